"""ClusterExecutor's own cases, and ``pipepool run --cluster``, on Dask LocalClusters.

The contract shared with LocalExecutor is in tests/contract/test_contract.py; this module uses the
same shared cluster (conftest.py's ``dask_cluster``: two worker processes, one thread each,
127.0.0.1).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cluster_tasks
import optional
import proc_table
import tasks
from helpers import ENV, Recorder, connect, joblog_rows, marker, run_cli, survivors, wait_for

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)"),
]


def test_importing_pipepool_never_imports_distributed():
    code = (
        "import sys, pipepool\n"
        "from pipepool import ClusterExecutor, ClusterWorkerLostError, WorkerLostError\n"
        "assert issubclass(ClusterWorkerLostError, WorkerLostError)\n"
        "print('distributed' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "False\n"


def test_without_distributed_both_entry_points_say_how_to_install_it():
    code = (
        "import sys\n"
        "sys.modules['distributed'] = None  # any import of it raises ImportError\n"
        "from pipepool import ClusterExecutor\n"
        "try:\n"
        "    ClusterExecutor()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "from pipepool.cli import main\n"
        "sys.exit(main(['run', '--cluster', 'local', ':::', 'true']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60
    )
    assert proc.returncode == 255, proc.stderr
    assert "pip install 'pipepool[dask]'" in proc.stdout
    assert "pip install 'pipepool[dask]'" in proc.stderr


# -- the executor ------------------------------------------------------------------------------


def test_own_local_cluster_listens_on_loopback_only_and_goes_away():
    optional.require("distributed")
    from pipepool import ClusterExecutor

    ex = ClusterExecutor(n_workers=1)
    try:
        ex.start()
        assert ex.scheduler_address.startswith("tcp://127.0.0.1:")
        pids = ex.client.run(os.getpid)
        assert len(pids) == 1 and all(a.startswith("tcp://127.0.0.1:") for a in pids)
        ours = {os.getpid(), *pids.values()}
        listening = listening_addresses(ours)
        assert listening and {host for host, _ in listening} == {"127.0.0.1"}, listening
        ex.queue("x", cluster_tasks.where)
        assert ex.wait_until_done(timeout=60)
        pid, address = ex.get_event_buffer()["x"].result
        assert (address, pid) in pids.items()
    finally:
        ex.end()
    assert wait_for(lambda: not any(proc_table.alive(p) for p in pids.values()), timeout=15)
    assert ex.client is None


def test_functions_travel_by_value_with_cloudpickle(dask_cluster):
    """Unlike LocalExecutor's workers, Dask workers cannot import the caller's __main__ or
    a closure: calls go by value (what changes when a pool spans machines)."""
    ex = connect(dask_cluster)
    base = 40
    ex.queue("lambda", lambda: base + 2)
    ex.queue("closure", (lambda n: lambda: n * 2)(21))
    rec = Recorder(ex)
    rec.finish()
    assert rec.terminal["lambda"].result == 42 and rec.terminal["closure"].result == 42


def test_killing_a_worker_mid_batch_of_500_loses_no_task(dask_cluster, tmp_path):
    """SIGKILL one of two Dask worker processes while 500 tasks run: every key ends with
    exactly one terminal event; what ran on the dead worker ran again elsewhere (Dask's
    retry) or is reported lost, and nothing vanishes. The worker is killed while it runs
    one of a few longer tasks, one that waits for a file the test creates only after the
    kill, so that one surely dies with it (a 0.5 s task chosen while it ran had finished
    on the victim by the time the kill landed, under load). Where each key ran is
    read from its runs' log (key and pid), not from the RUNNING events the parent had
    seen at the kill: those lag behind the workers (under load a key already running on
    the victim had no event yet, and a check built on them failed)."""
    ex = connect(dask_cluster)
    log = tmp_path / "runs"
    keys = [("t", i) for i in range(500)]
    long = {key for key in keys if key[1] % 100 == 50}
    interrupted = ("t", 50)  # the one the kill interrupts: it runs until the gate opens
    gate = tmp_path / "gate"
    for key in keys:
        if key == interrupted:
            ex.queue(key, tasks.record_pid_until, str(log), key[1], str(gate))
        else:
            ex.queue(key, tasks.record_pid, str(log), key[1], 0.5 if key in long else 0.002)
    rec = Recorder(ex)
    started_on = rec.running_seen  # key -> pids of the RUNNING events it had
    deadline = time.monotonic() + 60

    while len(rec.terminal) < 100 or interrupted not in started_on:
        assert time.monotonic() < deadline
        rec.round()
    assert interrupted not in rec.terminal  # it waits for the gate
    pids = ex.client.run(os.getpid)
    victim = started_on[interrupted][-1]
    assert victim in pids.values()
    os.kill(victim, signal.SIGKILL)
    gate.touch()  # its run elsewhere (Dask's retry) ends at once
    while ex.has_work():
        assert time.monotonic() < deadline, ex.stats()
        rec.round()
    ex.end()
    assert not rec.duplicates
    assert set(rec.terminal) == set(keys)
    ran_on: dict[tuple[str, int], list[int]] = {}  # key -> the pids of its runs, in order
    for line in log.read_text().splitlines():
        index, pid = line.split()
        ran_on.setdefault(("t", int(index)), []).append(int(pid))
    on_victim = {key for key, ran in ran_on.items() if victim in ran}
    assert interrupted in on_victim
    for key in on_victim:
        event = rec.terminal[key]
        if event.state.value == "success":  # retried by another worker process, or done
            assert event.pid != victim or key != interrupted  # before the kill landed
        else:
            assert getattr(event.exception, "address", "").startswith("tcp://127.0.0.1:")
    event = rec.terminal[interrupted]
    if event.state.value == "success":
        assert len(ran_on[interrupted]) >= 2, ran_on[interrupted]  # ran again
    succeeded = {k for k, e in rec.terminal.items() if e.state.value == "success"}
    assert all(rec.terminal[k].result in ran_on[k] for k in succeeded)  # one of its runs'
    assert len(succeeded) >= len(keys) - len(on_victim)
    # Only what ran on the dead worker ran twice (cut short there, or done there with its
    # result not fetched yet): a result already fetched was released at once, so Dask had
    # nothing to compute again.
    twice = {key: ran for key, ran in ran_on.items() if len(ran) > 1}
    assert all(set(ran[:-1]) == {victim} for ran in twice.values()), (victim, twice)


# -- pipepool run --cluster ----------------------------------------------------------------------


def hundred_jobs() -> tuple[list[str], int]:
    """test_cli's mix: 3 exit 1, one killed by a signal, one timed out (with --timeout 2)."""
    special = {10: "exit 1", 20: "exit 1", 30: "exit 1", 40: "kill -9 $$", 50: "sleep 30"}
    return [special.get(i, f"echo job{i}") for i in range(1, 101)], 5


def test_run_on_a_local_cluster_matches_the_local_run(tmp_path: Path):
    optional.require("distributed")
    lines, failures = hundred_jobs()
    jobs = "\n".join(lines) + "\n"
    runs = {}
    for name, extra in (("local", []), ("cluster", ["--cluster", "local"])):
        log = tmp_path / f"{name}.tsv"
        proc = run_cli(
            "run",
            "-j",
            "2",
            "--timeout",
            "2",
            "--joblog",
            str(log),
            "--json",
            *extra,
            input=jobs,
            timeout=90,
        )
        runs[name] = proc, joblog_rows(log)
    (local, local_rows), (cluster, cluster_rows) = runs["local"], runs["cluster"]
    assert local.returncode == cluster.returncode == failures, cluster.stderr
    assert sorted(local.stdout.splitlines()[:-1]) == sorted(cluster.stdout.splitlines()[:-1])

    def comparable(rows):  # Host, Starttime and JobRuntime aside
        return sorted((r[0], r[4], r[5], r[6], r[7], r[8]) for r in rows)

    assert len(cluster_rows) == 100
    assert comparable(local_rows) == comparable(cluster_rows)
    assert {r[1] for r in local_rows} == {":"}
    hosts = {r[1] for r in cluster_rows}
    assert len(hosts) == 2 and all(h.startswith("tcp://127.0.0.1:") for h in hosts), hosts
    summary = json.loads(cluster.stdout.splitlines()[-1])
    assert summary["failed"] == failures and summary["jobs"] == 2


def test_run_on_a_cluster_retries_and_keeps_results(dask_cluster, tmp_path):
    """--cluster ADDRESS: -j from the cluster, output comes back through Dask (--results
    lands on the runner's side), retries run the job again."""
    counter = tmp_path / "count"
    flaky = (
        f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; "
        f"echo attempt $n; [ $n -ge 2 ]"
    )
    res = tmp_path / "res"
    proc = run_cli(
        "run",
        "--cluster",
        dask_cluster.scheduler_address,
        "-k",
        "--json",
        "--retries",
        "2",
        "--results",
        str(res),
        ":::",
        flaky,
        "echo out; echo err >&2",
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:-1] == ["attempt 2", "out"]
    assert "err" in proc.stderr
    assert (res / "2" / "stdout").read_text() == "out\n"
    assert (res / "2" / "stderr").read_text() == "err\n"
    assert json.loads(proc.stdout.splitlines()[-1])["jobs"] == 2  # the cluster's threads


def test_halt_now_on_a_cluster_kills_the_running_job_tree(dask_cluster, tmp_path):
    mark = marker()
    log = tmp_path / "log"
    try:
        started = time.monotonic()
        proc = run_cli(
            "run",
            "--cluster",
            dask_cluster.scheduler_address,
            "-j",
            "2",
            "--halt",
            "now,fail=1",
            "--joblog",
            str(log),
            "--json",
            ":::",
            f"sleep 1000.{mark} & sleep 1000.{mark}",
            "sleep 0.5; exit 7",
            timeout=60,
        )
        assert time.monotonic() - started < 20
        assert proc.returncode == 7, proc.stderr  # fail=1: the failed job's own status
        summary = json.loads(proc.stdout.splitlines()[-1])
        assert summary["aborted"] == 1 and summary["failures"][0]["exitval"] == 7
        assert [r[0] for r in joblog_rows(log)] == ["2"]
        # The killed Dask worker's guardian took the job's process group with it.
        assert wait_for(lambda: not survivors(mark), timeout=10), survivors(mark)
    finally:
        for pid in survivors(mark):
            os.kill(pid, signal.SIGKILL)


# -- helpers --------------------------------------------------------------------------------------


def listening_addresses(pids: set[int]) -> set[tuple[str, int]]:
    """(host, port) of every TCP socket in LISTEN state that one of ``pids`` holds."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            host_hex, port_hex = local.split(":")
            found.add((_host(host_hex, width), int(port_hex, 16)))
    return found


def _host(hex_address: str, width: int) -> str:
    import ipaddress

    raw = bytes.fromhex(hex_address)
    if width == 8:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return str(ipaddress.IPv6Address(words))
