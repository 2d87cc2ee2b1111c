"""The deadlock pipepool exists for (Airflow issue 70526), on the real Airflow.

One ``_process_workloads`` call hands 1,000 workloads to an executor with parallelism 2,
Airflow's supervisor mocked to return at once (``burst.py``, each run in a process
session of its own). Airflow's LocalExecutor blocks forever in ``activity_queue.put``
while its workers block writing results: the test proves that circular wait from the
kernel's side (every process asleep in a pipe write or on the queue's lock, no progress)
and the Python side (the parent's stack), within a bound, then kills the whole session.
It is marked xfail(strict): it passes while upstream is broken and fails, saying so,
once upstream is fixed. PipepoolExecutor finishes the same burst, and 10,000 workloads
with 64 KiB results.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import airflow_env

airflow_env.require_airflow()

import proc_table  # noqa: E402

BURST = Path(__file__).with_name("burst.py")
UPSTREAM = "airflow.executors.local_executor.LocalExecutor"
OURS = "pipepool.airflow.PipepoolExecutor"
BOUND = 90.0  # s a burst may take before it counts as hung
STUCK_FOR = 3.0  # s every process must stay blocked, with no progress, to be deadlocked


class UpstreamDeadlock(AssertionError):
    """Airflow's LocalExecutor is in the circular wait of Airflow issue 70526."""


def _wchan(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read().strip()
    except OSError:
        return "gone"


def _blocked(wchan: str) -> bool:
    # A write into a full pipe, or the futex of the result queue's writer lock held by
    # a worker that is itself in that write.
    return "pipe_write" in wchan or "futex" in wchan


def run_burst(executor: str, n: int, result_bytes: int = 0) -> tuple[dict | None, str]:
    """Run one burst; return (its summary, or None if deadlocked, and a description)."""
    out_path = Path(os.environ["AIRFLOW_HOME"]) / f"burst-{os.getpid()}-{n}.out"
    with open(out_path, "w+") as out:
        proc = subprocess.Popen(
            [sys.executable, str(BURST), executor, str(n), str(result_bytes)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return _watch(proc, out_path)
        finally:
            # The whole session goes: the script and any worker it left behind.
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _watch(proc: subprocess.Popen, out_path: Path) -> tuple[dict | None, str]:
    deadline = time.monotonic() + BOUND
    stuck_since = None
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = out_path.read_text()
            summary = [line for line in text.splitlines() if line.startswith("{")]
            assert proc.returncode == 0 and summary, f"burst failed:\n{text[-3000:]}"
            return json.loads(summary[-1]), text
        text = out_path.read_text()
        if "ready" not in text:
            time.sleep(0.1)
            continue
        pids = [proc.pid, *proc_table.children(proc.pid)]
        state = {pid: _wchan(pid) for pid in pids}
        progress = (state, out_path.stat().st_size)
        parent_in_write = "pipe_write" in state[proc.pid]
        if parent_in_write and all(_blocked(w) for w in state.values()) and progress == last:
            stuck_since = stuck_since or time.monotonic()
            if time.monotonic() - stuck_since >= STUCK_FOR:
                proc.send_signal(signal.SIGUSR1)  # faulthandler: the parent's stack
                time.sleep(0.5)
                return None, f"{state}\n{out_path.read_text()[-4000:]}"
        else:
            stuck_since = None
        last = progress
        time.sleep(0.2)
    raise AssertionError(f"burst neither finished nor deadlocked in {BOUND} s")


@pytest.mark.xfail(
    raises=UpstreamDeadlock,
    strict=True,
    reason="known upstream bug, Airflow issue 70526: LocalExecutor deadlocks on a burst of "
    "1,000 workloads. If this XPASSes, upstream is fixed: update this test and docs/airflow.md",
)
def test_upstream_local_executor_survives_a_burst():
    summary, description = run_burst(UPSTREAM, 1000)
    if summary is None:
        print(f"Airflow's LocalExecutor deadlocked (issue 70526):\n{description}")
        # The parent's own stack must show where: the put into the activity queue.
        assert "_process_workloads" in description and "_send" in description, description
        raise UpstreamDeadlock("Airflow's LocalExecutor blocked in activity_queue.put")
    print(f"UPSTREAM FIXED: Airflow's LocalExecutor finished the burst: {summary}")
    assert summary["states"] == {"success": 990, "failed": 10}


def test_pipepool_executor_finishes_the_same_burst():
    summary, description = run_burst(OURS, 1000)
    assert summary is not None, f"PipepoolExecutor deadlocked:\n{description}"
    print(summary)
    assert summary["states"] == {"success": 990, "failed": 10}


def test_pipepool_executor_ten_thousand_workloads_with_big_results():
    summary, description = run_burst(OURS, 10_000, result_bytes=64 * 1024)
    assert summary is not None, f"PipepoolExecutor deadlocked:\n{description}"
    print(summary)
    assert summary["states"] == {"success": 9900, "failed": 100}
