"""This process's cgroups as ``pipepool.host`` finds them, on captured trees: where each
hierarchy is mounted *and which of its directories sits at the mount point* (mountinfo),
and what the cgroup says there (cpuset, quota, throttling, OOM kills).

The case two readers used to disagree on: a container that bind-mounts its own part of
the host's hierarchy. ``/proc/self/cgroup`` names the host's path (``/docker/abc``), the
container sees that cgroup's files at the mount point itself; mountinfo says so (the
mount's root is ``/docker/abc``), ``/proc/mounts`` cannot, and a reader of it looked for
``/sys/fs/cgroup/cpuset/docker/abc``, which is not there."""

from __future__ import annotations

from pathlib import Path

from pipepool import host

CONTAINER_V1 = {
    "proc/self/cgroup": "5:memory:/docker/abc\n4:cpuset:/docker/abc\n3:cpu,cpuacct:/docker/abc\n",
    "proc/self/cpuset": "/docker/abc\n",
    "proc/self/mountinfo": (
        "30 29 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
        "31 30 0:28 /docker/abc /sys/fs/cgroup/cpuset ro,nosuid - cgroup cgroup rw,cpuset\n"
        "32 30 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct\n"
        "33 30 0:30 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n"
    ),
    "proc/mounts": (
        "tmpfs /sys/fs/cgroup tmpfs ro,nosuid,mode=755 0 0\n"
        "cgroup /sys/fs/cgroup/cpuset cgroup rw,cpuset 0 0\n"
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n"
        "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
    ),
    # the container's own cgroup, at each mount point
    "sys/fs/cgroup/cpuset/cpuset.cpus": "2-3\n",
    "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "150000\n",
    "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
    "sys/fs/cgroup/memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
    "proc/vmstat": "nr_free_pages 1\noom_kill 7\n",
}


def tree(tmp_path: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return str(tmp_path)


def test_a_bind_mounted_cgroup_is_read_at_its_mount_point(tmp_path: Path) -> None:
    root = tree(tmp_path, CONTAINER_V1)
    assert host.cgroup_directory("cpuset", root) == "/sys/fs/cgroup/cpuset"
    assert host.cgroup_cpuset(root) == {2, 3}
    assert host.cgroup_quota(root) == (
        1.5,
        "cgroup v1 cpu.cfs_quota_us/cpu.cfs_period_us 150000/100000 in /sys/fs/cgroup/cpu,cpuacct",
    )
    counters = host.oom_counters(root)
    assert [(c.label, c.read()) for c in counters] == [
        ("memory cgroup /docker/abc", 3),
        ("the machine (/proc/vmstat)", 7),
    ]


def test_the_topology_of_a_bind_mounted_container_is_its_cpuset_s(tmp_path: Path) -> None:
    files = dict(CONTAINER_V1)
    for cpu in range(4):
        files[f"sys/devices/system/cpu/cpu{cpu}/topology/core_id"] = f"{cpu}\n"
    files["sys/devices/system/cpu/online"] = "0-3\n"
    top = host.read_topology(tree(tmp_path, files))
    assert sorted(top.cpus) == [2, 3]  # where /proc/mounts' reader saw all four


def test_without_mountinfo_proc_mounts_is_read(tmp_path: Path) -> None:
    # hwloc's captured trees have /proc/mounts only: each mount is its hierarchy's root
    files = {k: v for k, v in CONTAINER_V1.items() if k != "proc/self/mountinfo"}
    files["sys/fs/cgroup/cpuset/docker/abc/cpuset.cpus"] = "1\n"
    assert host.cgroup_cpuset(tree(tmp_path, files)) == {1}


V2 = {
    "proc/self/cgroup": "0::/user.slice/job\n",
    "proc/self/mountinfo": "24 23 0:21 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
    "sys/fs/cgroup/user.slice/job/cpuset.cpus.effective": "0,4-5\n",
    "sys/fs/cgroup/user.slice/job/cpu.stat": "usage_usec 9\nthrottled_usec 2500000\n",
    "sys/fs/cgroup/user.slice/job/memory.events": "low 0\noom 1\noom_kill 1\n",
    "sys/fs/cgroup/user.slice/cpu.max": "200000 100000\n",
    "proc/vmstat": "oom_kill 9\n",
}


def test_a_v2_cgroup_s_cpuset_quota_throttling_and_oom_count(tmp_path: Path) -> None:
    root = tree(tmp_path, V2)
    assert host.cgroup_path(None, root) == "/user.slice/job"
    assert host.cgroup_cpuset(root) == {0, 4, 5}
    assert host.cgroup_quota(root) == (
        2.0,
        "cgroup v2 cpu.max 200000 100000 in /sys/fs/cgroup/user.slice",
    )
    assert host.throttled_seconds(root) == 2.5
    # v2 counts its own and the machine's kills below it: the only counter read
    assert [(c.label, c.read()) for c in host.oom_counters(root)] == [
        ("memory cgroup /user.slice/job", 1)
    ]


def test_no_cgroups_no_answers(tmp_path: Path) -> None:
    root = tree(tmp_path, {"proc/vmstat": "oom_kill 0\n"})
    assert host.cgroup_path(None, root) is None and host.cgroup_directory("cpu", root) is None
    assert host.cgroup_cpuset(root) is None and host.cgroup_quota(root) is None
    assert host.throttled_seconds(root) is None
    assert [c.label for c in host.oom_counters(root)] == ["the machine (/proc/vmstat)"]
    assert host.oom_counters(str(tmp_path / "nothing")) == ()  # macOS: the kernel says nothing
