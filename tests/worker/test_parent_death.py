"""Invariant 5: workers never outlive their parent, even when it is SIGKILLed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid

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


SLOW_IMPORT = r"""
import os, time
# In a process the parent started (spawn worker or fork server), this import takes a
# minute: the start-up a loaded machine stretches, made long enough to tell apart.
if os.environ["PIPEPOOL_SLOW_IMPORT_PARENT"] != str(os.getpid()):
    with open(os.environ["PIPEPOOL_SLOW_IMPORT_LOG"], "a") as log:
        log.write(f"{os.getpid()}\n")
    time.sleep(60)
"""

SLOW_PARENT = r"""
import os, sys
sys.path[:0] = {path!r}
import tasks
from pipepool import LocalExecutor

os.environ.setdefault("PIPEPOOL_SLOW_IMPORT_PARENT", str(os.getpid()))
import slow_import  # each process that imports this script stops here

if __name__ == "__main__":
    ex = LocalExecutor(2, start_method={method!r}, loop_impl={impl!r})
    ex.start()
    for i in range(2):
        ex.queue(i, tasks.sleep, 60)
    while True:
        ex.sync(timeout=0.05)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_process_still_importing_exits_when_the_parent_is_killed(impl, method, tmp_path):
    """A spawn worker, or a fork server, that is still importing the parent's main module
    when the parent is SIGKILLed is gone within 2 s, not when its imports end (a minute
    here; seconds on a loaded machine): its start-up watch (``_startup_watch``) sees the
    parent's pipe hang up. Everything carrying the run's marker is counted, the resource
    tracker too."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
    (tmp_path / "slow_import.py").write_text(SLOW_IMPORT)
    parent = tmp_path / "parent.py"
    parent.write_text(
        SLOW_PARENT.format(path=[str(tmp_path), here, *sys.path], method=method, impl=impl)
    )
    log = tmp_path / "importing.log"
    marker = f"PIPEPOOL_SLOW_IMPORT_MARKER={uuid.uuid4().hex}"
    name, value = marker.split("=")
    env = {**os.environ, name: value, "PIPEPOOL_SLOW_IMPORT_LOG": str(log)}
    env.pop("PIPEPOOL_SLOW_IMPORT_PARENT", None)
    with subprocess.Popen([sys.executable, str(parent)], env=env) as proc:
        try:
            deadline = time.monotonic() + 30
            # Spawn: both workers. Forkserver: its workers (they import the main module
            # on Python 3.11-3.13), or the server (where it preloads the main module).
            wanted = 2 if method == "spawn" else 1
            while not (log.exists() and len(log.read_text().split()) >= wanted):
                assert proc.poll() is None, "the parent exited"
                assert time.monotonic() < deadline, "nothing reached the slow import"
                time.sleep(0.02)
            importing = {int(p) for p in log.read_text().split()}
            assert importing <= proc_table.with_environ(marker)  # alive, mid-import
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
    deadline = orphan_deadline()
    while (left := proc_table.with_environ(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    assert not left, f"outlived the parent by 2 s: {[proc_table.cmdline(p)[:80] for p in left]}"


def _children(ppid: int) -> set[int]:
    return proc_table.children(ppid)


def _orphans_of_marker() -> set[int]:
    """Workers re-parented to init after the kill carry the pool's process title."""
    return {
        pid
        for pid, (ppid, cmd) in proc_table.processes().items()
        if ppid == 1 and b"import tasks" in cmd
    }
