"""How many workers by default (pipepool._cpus, issue 35): the affinity mask capped by the
cgroup CPU quotas of the process's cgroups and their ancestors, rounded up, at least 1.

Captured cgroup trees (a root the reader is pointed at) cover v2, v1, hybrid hosts and
namespaces; real runs (``taskset -c 0``, and a real cgroup limited to one CPU, made when
this runs as root) check that every face starts one worker and says why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pipepool._cpus import available_cpus, cgroup_quota

MASK = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
if hasattr(os, "process_cpu_count"):
    MASK = os.process_cpu_count()

V2_MOUNT = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V1_CPU_MOUNT = "32 31 0:29 {root} /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
HYBRID_V2 = "38 31 0:33 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"


def tree(tmp: Path, cgroup: str, mountinfo: str, files: dict[str, str]) -> str:
    """A captured host under ``tmp``: /proc/self/{cgroup,mountinfo} and cgroup files."""
    (tmp / "proc/self").mkdir(parents=True)
    (tmp / "proc/self/cgroup").write_text(cgroup)
    (tmp / "proc/self/mountinfo").write_text(mountinfo)
    for path, text in files.items():
        (tmp / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp / path.lstrip("/")).write_text(text)
    return str(tmp)


def test_v2_own_cgroup_quota(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        "0::/kubepods/pod1/ctr\n",
        V2_MOUNT,
        {
            "/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max": "50000 100000\n",
            "/sys/fs/cgroup/kubepods/cpu.max": "max 100000\n",
        },
    )
    quota, where = cgroup_quota(root)
    assert quota == 0.5 and "cpu.max 50000 100000 in /sys/fs/cgroup/kubepods/pod1/ctr" in where
    workers, reason = available_cpus(root)
    assert workers == 1 and "cgroup v2" in reason  # rounded up, at least 1


def test_v2_ancestor_quota_is_the_lower(tmp_path: Path) -> None:
    """A pod's 2-CPU limit sits on the pod's cgroup, not the container's own."""
    root = tree(
        tmp_path,
        "0::/kubepods/pod1/ctr\n",
        V2_MOUNT,
        {
            "/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max": "max 100000\n",
            "/sys/fs/cgroup/kubepods/pod1/cpu.max": "150000 100000\n",
            "/sys/fs/cgroup/kubepods/cpu.max": "400000 100000\n",
        },
    )
    assert cgroup_quota(root) == (
        1.5,
        "cgroup v2 cpu.max 150000 100000 in /sys/fs/cgroup/kubepods/pod1",
    )
    workers, _ = available_cpus(root)
    assert workers == min(MASK, 2)  # 1.5 CPUs: two workers, rounded up


def test_v2_max_everywhere_means_the_mask(tmp_path: Path) -> None:
    root = tree(tmp_path, "0::/a/b\n", V2_MOUNT, {"/sys/fs/cgroup/a/b/cpu.max": "max 100000\n"})
    assert cgroup_quota(root) is None
    assert available_cpus(root).workers == MASK


def test_v1_quota_and_minus_one(tmp_path: Path) -> None:
    files = {
        "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "-1\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us": "25000\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us": "50000\n",
    }
    cgroup = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n"
    root = tree(tmp_path, cgroup, V1_CPU_MOUNT.format(root="/"), files)
    quota, where = cgroup_quota(root)
    assert quota == 0.5 and where.endswith("25000/50000 in /sys/fs/cgroup/cpu,cpuacct/docker")
    assert available_cpus(root) == (1, f"{where} ({_source()} allows {MASK})")


def test_hybrid_reads_v1_cpu_beside_an_empty_unified(tmp_path: Path) -> None:
    """A hybrid host (this CI machine's layout): cpu is a v1 controller, the unified
    hierarchy has no cpu.max; the v1 quota decides."""
    files = {
        "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "100000\n",
        "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n",
        "/sys/fs/cgroup/unified/job/cgroup.procs": "",
    }
    mounts = V1_CPU_MOUNT.format(root="/") + HYBRID_V2
    root = tree(tmp_path, "4:cpu,cpuacct:/job\n0::/job\n", mounts, files)
    assert cgroup_quota(root) == (
        1.0,
        "cgroup v1 cpu.cfs_quota_us/cpu.cfs_period_us 100000/100000"
        " in /sys/fs/cgroup/cpu,cpuacct/job",
    )


def test_hybrid_takes_the_lower_of_both(tmp_path: Path) -> None:
    files = {
        "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "300000\n",
        "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n",
        "/sys/fs/cgroup/unified/job/cpu.max": "120000 100000\n",
    }
    mounts = V1_CPU_MOUNT.format(root="/") + HYBRID_V2
    root = tree(tmp_path, "4:cpu,cpuacct:/job\n0::/job\n", mounts, files)
    assert cgroup_quota(root) == (
        1.2,
        "cgroup v2 cpu.max 120000 100000 in /sys/fs/cgroup/unified/job",
    )


def test_cgroup_namespace_reads_from_its_root(tmp_path: Path) -> None:
    """In a cgroup namespace /proc/self/cgroup says "/" and the mount is the namespace's
    root: its cpu.max (what the container runtime set) is read; above it is not visible."""
    root = tree(tmp_path, "0::/\n", V2_MOUNT, {"/sys/fs/cgroup/cpu.max": "200000 100000\n"})
    assert cgroup_quota(root) == (2.0, "cgroup v2 cpu.max 200000 100000 in /sys/fs/cgroup")


def test_bind_mounted_subtree_without_namespace(tmp_path: Path) -> None:
    """Docker without a cgroup namespace: the mount's root is the container's cgroup and
    /proc/self/cgroup gives the full path; the part below the mount root is used."""
    files = {
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "150000\n",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
    }
    mounts = V1_CPU_MOUNT.format(root="/docker/abc")
    root = tree(tmp_path, "4:cpu,cpuacct:/docker/abc\n", mounts, files)
    assert cgroup_quota(root) == (
        1.5,
        "cgroup v1 cpu.cfs_quota_us/cpu.cfs_period_us 150000/100000 in /sys/fs/cgroup/cpu,cpuacct",
    )


def test_path_outside_the_mount_reads_the_mount_only(tmp_path: Path) -> None:
    """A cgroup moved outside the namespace's root shows as "/../x": no climbing out."""
    root = tree(
        tmp_path,
        "0::/../sibling\n",
        V2_MOUNT,
        {"/sys/fs/cgroup/cpu.max": "100000 100000\n", "/cpu.max": "1 100000\n"},
    )
    assert cgroup_quota(root) == (1.0, "cgroup v2 cpu.max 100000 100000 in /sys/fs/cgroup")


def test_escaped_mount_point(tmp_path: Path) -> None:
    mounts = "30 23 0:27 / /sys/fs/my\\040cgroups rw - cgroup2 cgroup2 rw\n"
    root = tree(tmp_path, "0::/a\n", mounts, {"/sys/fs/my cgroups/a/cpu.max": "300000 100000\n"})
    assert cgroup_quota(root) == (3.0, "cgroup v2 cpu.max 300000 100000 in /sys/fs/my cgroups/a")


def test_no_cgroups_no_quota(tmp_path: Path) -> None:
    """No /proc (macOS) or no cgroup mounts: the mask alone decides."""
    assert cgroup_quota(str(tmp_path)) is None
    workers, reason = available_cpus(str(tmp_path))
    assert workers == MASK and reason.startswith(f"{MASK} CPU")


def test_malformed_files_are_no_limit(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        "garbage\n0::/a\n",
        "nonsense line\n" + V2_MOUNT,
        {"/sys/fs/cgroup/a/cpu.max": "lots\n"},
    )
    assert cgroup_quota(root) is None


def _source() -> str:
    return "os.process_cpu_count()" if hasattr(os, "process_cpu_count") else "the affinity mask"


# -- real runs: every face, one CPU allowed -------------------------------------------------

FACES = r"""
import json, os, subprocess, sys
from pipepool import LocalExecutor, ProcessPoolExecutor

out = {}
with LocalExecutor() as ex:
    for i in range(4):
        ex.queue(i, os.getpid)
    while ex.has_work():
        ex.sync(timeout=0.1)
    ex.get_event_buffer()
    out["LocalExecutor"] = [ex.stats()["workers_started"], ex.parallelism_reason]
with ProcessPoolExecutor() as pool:
    pids = {f.result() for f in [pool.submit(os.getpid) for _ in range(4)]}
    out["ProcessPoolExecutor"] = [len(pids), pool.max_workers_reason]
run = subprocess.run(
    [sys.executable, "-m", "pipepool", "run", "echo", "{%}", ":::", "a", "b", "c", "d"],
    capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL,
)
out["pipepool run"] = [len(set(run.stdout.split())), run.stderr.splitlines()[0]]
info = subprocess.run(
    [sys.executable, "-m", "pipepool", "info"], capture_output=True, text=True, check=True
).stdout
out["pipepool info"] = [
    int(info.split("default workers: ")[1].split()[0]), info.split("because: ")[1].strip()
]
if sys.argv[1] == "cluster":
    from pipepool import ClusterExecutor
    ex = ClusterExecutor()
    ex.start()
    try:
        out["ClusterExecutor"] = [ex.stats()["workers_alive"], "local cluster"]
    finally:
        ex.end()
print(json.dumps(out))
"""


def _faces(prefix: list[str], cluster: bool) -> dict[str, list]:
    proc = subprocess.run(
        [*prefix, sys.executable, "-c", FACES, "cluster" if cluster else "-"],
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _has_distributed() -> bool:
    try:
        import distributed  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")
def test_every_face_starts_one_worker_under_taskset() -> None:
    faces = _faces(["taskset", "-c", "0"], cluster=_has_distributed())
    for face in ("LocalExecutor", "ProcessPoolExecutor", "pipepool info"):
        assert faces[face][0] == 1, faces
        assert "1 CPU in" in faces[face][1], faces  # says why: the affinity mask
    assert faces["pipepool run"][0] == 1 and "-j 1" in faces["pipepool run"][1], faces
    if _has_distributed():
        assert faces["ClusterExecutor"][0] == 1, faces


def _cpu_cgroup_dir() -> tuple[Path, str] | None:
    """Where a child cgroup with a CPU quota can be made here: the v2 hierarchy if it
    has the cpu controller, else the v1 cpu hierarchy (a hybrid host); None if neither."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fstype, options = line.split(" - ", 1)[1].split()[0], line.split(" - ", 1)[1].split()[2]
        point = Path(line.split()[4])
        if fstype == "cgroup2" and "cpu" in (point / "cgroup.controllers").read_text().split():
            if "cpu" not in (point / "cgroup.subtree_control").read_text().split():
                continue  # enabling it would change the host's tree: not from a test
            return point, "v2"
        if fstype == "cgroup" and "cpu" in options.split(","):
            return point, "v1"
    return None


@pytest.fixture
def one_cpu_cgroup():
    """A real cgroup limited to one CPU (0.6 CPU, rounded up); its cgroup.procs path."""
    if os.geteuid() != 0:
        pytest.skip("making a cgroup needs root (CI runs as root)")
    found = _cpu_cgroup_dir()
    if found is None:
        pytest.skip("no cgroup hierarchy with the cpu controller is mounted")
    point, version = found
    own = Path("/proc/self/cgroup").read_text().splitlines()
    line = next(
        (
            x
            for x in own
            if (x.startswith("0::") if version == "v2" else "cpu" in x.split(":")[1].split(","))
        ),
        None,
    )
    parent = point / line.split(":", 2)[2].lstrip("/") if line else point
    group = parent / f"pipepool-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup under {parent}: {exc}")
    try:
        if version == "v2":
            (group / "cpu.max").write_text("60000 100000\n")
        else:
            (group / "cpu.cfs_period_us").write_text("100000\n")
            (group / "cpu.cfs_quota_us").write_text("60000\n")
        yield group / "cgroup.procs", version
    finally:
        for _ in range(50):  # the children have exited; the kernel lets go in a moment
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_every_face_starts_one_worker_in_a_one_cpu_cgroup(one_cpu_cgroup) -> None:
    procs, version = one_cpu_cgroup
    enter = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]
    faces = _faces(enter, cluster=_has_distributed())
    for face in ("LocalExecutor", "ProcessPoolExecutor", "pipepool info"):
        assert faces[face][0] == 1, faces
        assert f"cgroup {version}" in faces[face][1] and "60000" in faces[face][1], faces
    assert faces["pipepool run"][0] == 1 and "-j 1" in faces["pipepool run"][1], faces
    if _has_distributed():
        assert faces["ClusterExecutor"][0] == 1, faces


def test_given_parallelism_says_so() -> None:
    from pipepool import LocalExecutor

    ex = LocalExecutor(3)
    assert ex.parallelism == 3 and ex.parallelism_reason == "3 given"
