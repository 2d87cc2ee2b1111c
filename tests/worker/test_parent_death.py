"""Invariant 5: workers never outlive their parent, even when it is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import proc_table
from helpers import orphan_deadline

pytestmark = pytest.mark.portable

PARENT = r"""
import os, sys, time
sys.path[:0] = {path!r}
import tasks
from pipepool import LocalExecutor

if __name__ == "__main__":
    ex = LocalExecutor(8, start_method={method!r}, loop_impl={impl!r})
    ex.start()
    for i in range(8):
        ex.queue(i, {task})
    deadline = time.monotonic() + 60
    while not ({ready}):
        ex.sync(timeout=0.01)
        if time.monotonic() > deadline:
            sys.exit("workers never came up")
    print(" ".join(map(str, ex.worker_pids())), flush=True)
    time.sleep(60)
"""
BUSY = {"task": "tasks.sleep, 60", "ready": "len(ex.running) == 8 and len(ex.worker_pids()) == 8"}
IDLE = {"task": "tasks.echo, i", "ready": "(not ex.has_work() and len(ex.worker_pids()) > 0)"}


alive = proc_table.alive  # exists and is not a zombie: /proc, or ps on macOS


@pytest.mark.parametrize("state", [BUSY, IDLE], ids=["busy", "idle"])
def test_workers_exit_when_parent_is_killed(impl, start_method, state):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
    script = PARENT.format(path=[here, *sys.path], method=start_method, impl=impl, **state)
    # The with closes its stdout whatever happens (a failed assertion's traceback keeps
    # proc, so its pipe would outlive the test, which the leak check reports as an error).
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            pids = [int(p) for p in proc.stdout.readline().split()]
            assert pids
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
    deadline = orphan_deadline()  # 2 s, and what a loaded machine delays a new process by
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    survivors = [p for p in pids if alive(p)]
    for p in survivors:
        os.kill(p, signal.SIGKILL)
    assert not survivors, f"workers outlived their parent by 2 s: {survivors}"


def test_workers_exit_when_parent_is_killed_right_after_creation(impl):
    """Killed 0-50 ms after the pool was created: whatever started must still go."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
    script = (
        f"import sys, time; sys.path[:0] = {[here, *sys.path]!r}\n"
        "import tasks\nfrom pipepool import LocalExecutor\n"
        f"ex = LocalExecutor(8, start_method='fork', loop_impl={impl!r}); ex.start()\n"
        "for i in range(8): ex.queue(i, tasks.sleep, 60)\n"
        "print('go', flush=True)\n"
        "while True: ex.sync(timeout=0.01)\n"
    )
    for delay in (0.0, 0.01, 0.025, 0.05):
        with subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
        ) as proc:
            try:
                assert proc.stdout.readline().strip() == "go"
                time.sleep(delay)
                kids = _children(proc.pid)
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
        kids |= _orphans_of_marker()
        deadline = orphan_deadline()
        while any(alive(p) for p in kids) and time.monotonic() < deadline:
            time.sleep(0.02)
        survivors = [p for p in kids if alive(p)]
        for p in survivors:
            os.kill(p, signal.SIGKILL)
        assert not survivors, f"delay {delay}: workers survived: {survivors}"


def _children(ppid: int) -> set[int]:
    return proc_table.children(ppid)


def _orphans_of_marker() -> set[int]:
    """Workers re-parented to init after the kill carry the pool's process title."""
    return {
        pid
        for pid, (ppid, cmd) in proc_table.processes().items()
        if ppid == 1 and b"import tasks" in cmd
    }
