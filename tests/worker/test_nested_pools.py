"""A task may start a pool of its own, as in the stdlib's workers, and what that pool
started ends with the task, as everything else a task starts does.

Each task starts one pool of every kind (``nested_tasks.KINDS``: the stdlib's
``ProcessPoolExecutor`` and ``multiprocessing.Pool``, pipepool's ``ProcessPoolExecutor``
and ``LocalExecutor``) on its worker's start method, has each run a task, and records
the processes each added below the worker. However the task ends, none of them is left:

=============================  ===========================================================
how the task ends              test
=============================  ===========================================================
it returns, the pools left     ``test_pools_a_task_left_running_end_with_its_worker``
running (a library's cache)    (the worker recycles on its own: ``max_tasks_per_child``)
``kill()``, ``terminate()``,   ``test_a_nested_pool_goes_when_its_task_is_ended``
it kills its own worker
a later task's timeout         ``test_a_nested_pool_goes_when_its_worker_times_out``
the parent is SIGKILLed        ``test_a_nested_pool_goes_when_the_parent_is_killed``
=============================  ===========================================================

docs/containment.md ("Pools inside tasks") says why each holds.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys

import pytest

import nested_tasks
from helpers import Recorder, wait_for
from pipepool import ProcessPoolExecutor, TaskKilledError, TaskTimeoutError, WorkerLostError

pytestmark = pytest.mark.timeout(240)

GONE_WITHIN = 15.0  # s for a killed tree to be reaped on a loaded machine


def read_record(path, rec: Recorder | None = None) -> dict:
    """What ``nested_tasks.start_pools`` wrote; the task's error if it ended without."""
    outcome = rec.terminal.get("pools") if rec is not None else None
    if outcome is not None and not path.exists():
        raise AssertionError(f"the task ended before its pools were up: {outcome.exception!r}")
    assert wait_for(path.exists, nested_tasks.WAIT), "the task's pools never came up"
    record = json.loads(path.read_text())
    empty = [kind for kind in nested_tasks.KINDS if not record.get(kind)]
    assert not empty, f"no process recorded for {empty}: nothing to check"
    return record


def check_all_gone(record: dict) -> None:
    try:
        wait_for(lambda: not nested_tasks.still_running(record), GONE_WITHIN)
        assert not nested_tasks.still_running(record), "left running, by kind"
    finally:
        for pids in nested_tasks.still_running(record).values():  # a failure leaves none
            for pid in pids:
                os.kill(pid, signal.SIGKILL)


def test_a_task_can_use_a_pool_of_each_kind(impl, start_method, monkeypatch):
    """Through the drop-in face, where it failed with "daemonic processes are not allowed
    to have children" (or, under spawn, a broken pool): a task opens, uses and shuts a
    pool of each kind, on its own start method."""
    monkeypatch.setenv("PIPEPOOL_IMPL", impl)  # the pool's LocalExecutor loads this loop
    context = multiprocessing.get_context(start_method)
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        used = pool.submit(nested_tasks.use_pools, start_method).result(timeout=120)
    assert used == list(nested_tasks.KINDS)


def test_pools_a_task_left_running_end_with_its_worker(make, tmp_path):
    """The task returns with its pools running (kept in a global); its worker, at
    ``max_tasks_per_child``, ends them and exits on its own, so the next task runs on
    its replacement: a worker waiting for its children for ever would hold the one slot.
    """
    path = tmp_path / "record.json"
    ex = make(1, max_tasks_per_child=1)
    ex.queue("pools", nested_tasks.start_pools, ex.start_method, str(path))
    ex.queue("after", nested_tasks.square, 4)
    rec = Recorder(ex)
    rec.finish(limit=180)
    record = read_record(path, rec)
    assert rec.terminal["pools"].result == record
    assert rec.terminal["after"].result == 16
    stats = ex.stats()
    # Exited on its own: recycled, neither crashed nor killed. The replacement that ran
    # "after" recycles too, and may be reaped before finish() returns or not (2 recycles
    # in 2 of 10 loaded runs): at least the first.
    assert stats["worker_recycles"] >= 1, stats
    assert stats["worker_crashes"] == stats["workers_killed"] == 0, stats
    check_all_gone(record)


def end_by_kill(ex, key):
    assert ex.kill(key) == 1
    return TaskKilledError


def end_by_terminate(ex, key):
    ex.terminate()
    return TaskKilledError


def end_by_dying(ex, key):
    return WorkerLostError  # the task SIGKILLs its own worker once its pools are up


ENDINGS = {"kill": end_by_kill, "terminate": end_by_terminate, "worker dies": end_by_dying}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_nested_pool_goes_when_its_task_is_ended(make, tmp_path, ending):
    """The task waits with its pools running, or kills its worker: its worker's process
    group goes, and with it the nested pools' workers (a stdlib pool's, in the group) and
    pipepool's (each in a group of its own, ended by its lifeline, the worker)."""
    path = tmp_path / "record.json"
    ex = make(1)
    then = "die" if ending == "worker dies" else "wait"
    ex.queue("pools", nested_tasks.start_pools, ex.start_method, str(path), then)
    rec = Recorder(ex)
    rec.run_until(lambda: (path.exists() and bool(ex.running)) or "pools" in rec.terminal, 120)
    record = read_record(path, rec)
    error_type = ENDINGS[ending](ex, "pools")
    if ending != "terminate":
        rec.run_until(lambda: "pools" in rec.terminal, 60)
    rec.take()
    assert type(rec.terminal["pools"].exception) is error_type
    check_all_gone(record)


def test_a_nested_pool_goes_when_its_worker_times_out(make, tmp_path):
    """A task leaves its pools running; the next task on the same worker times out, and
    the worker's kill takes the pools along. (The pools come up before the timed task
    starts, so its timeout can be short on a machine of any speed.)"""
    path = tmp_path / "record.json"
    ex = make(1)
    ex.queue("pools", nested_tasks.start_pools, ex.start_method, str(path))
    rec = Recorder(ex)
    rec.run_until(lambda: "pools" in rec.terminal, 120)
    record = read_record(path, rec)
    ex.queue_call("sleeps", nested_tasks.time.sleep, (600,), timeout=0.5)
    rec.run_until(lambda: "sleeps" in rec.terminal, 60)
    assert type(rec.terminal["sleeps"].exception) is TaskTimeoutError
    check_all_gone(record)


def test_a_fork_worker_starts_a_fork_server_of_its_own(impl, tmp_path):
    """A fork worker inherits this process's fork server, which is not its child: a
    forkserver pool in a task failed there (ChildProcessError), or would have had the
    parent's server fork its workers, outside the task's group. Now each kind works on
    a server the worker starts, below it, and ends with it."""
    from multiprocessing import forkserver

    forkserver.ensure_running()  # a process-wide helper, as the leak check knows
    path = tmp_path / "record.json"
    from helpers import Executors

    executors = Executors(impl, "fork")
    try:
        ex = executors(1)
        ex.queue("pools", nested_tasks.start_pools, "forkserver", str(path))
        rec = Recorder(ex)
        rec.finish(limit=180)
        record = read_record(path, rec)
    finally:
        executors.close()
    check_all_gone(record)


PARENT = r"""
import os, sys, time
sys.path[:0] = {path!r}
import nested_tasks
from pipepool import LocalExecutor

if __name__ == "__main__":
    ex = LocalExecutor(1, start_method={method!r}, loop_impl={impl!r})
    ex.start()
    ex.queue("pools", nested_tasks.start_pools, {method!r}, {record!r}, "wait")
    deadline = time.monotonic() + 120
    while not ex.running or not os.path.exists({record!r}):
        ex.sync(timeout=0.05)
        for event in ex.get_event_buffer().values():
            if event.state.terminal:
                sys.exit(f"the task ended before its pools were up: {{event.exception!r}}")
        if time.monotonic() > deadline:
            sys.exit("the pools never came up")
    print("up", flush=True)
    time.sleep(600)
"""


def test_a_nested_pool_goes_when_the_parent_is_killed(impl, start_method, tmp_path):
    """SIGKILL the parent: the worker's lifeline closes, it kills its group, and the
    nested pipepool pools' workers see their own lifeline (the worker) close."""
    path = tmp_path / "record.json"
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
    script = PARENT.format(path=[here, *sys.path], method=start_method, impl=impl, record=str(path))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "up"
        record = read_record(path)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        check_all_gone(record)
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="shared memory is not in /dev/shm")
def test_shared_memory_of_a_killed_task_is_unlinked(tmp_path):
    """Under fork the pool starts multiprocessing's resource tracker before its workers,
    as spawn and forkserver pools do. Else a task's shared memory (or its spawn pool's
    semaphores) was registered with a tracker its worker started, in its group, which
    the task's kill killed before it unlinked them: left in /dev/shm until reboot."""
    path = tmp_path / "segment"
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
    script = SHARED_MEMORY.format(path=[here, *sys.path], record=str(path))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    segment = "/dev/shm/" + path.read_text().lstrip("/")
    try:
        assert wait_for(lambda: not os.path.exists(segment), GONE_WITHIN), "left in /dev/shm"
    finally:
        if os.path.exists(segment):
            os.unlink(segment)


SHARED_MEMORY = r"""
import os, sys, time
sys.path[:0] = {path!r}
import nested_tasks
from pipepool import LocalExecutor

if __name__ == "__main__":
    ex = LocalExecutor(1, start_method="fork")
    ex.start()
    ex.queue("segment", nested_tasks.make_shared_memory, {record!r})
    deadline = time.monotonic() + 60
    while not ex.running or not os.path.exists({record!r}):
        ex.sync(timeout=0.05)
        if time.monotonic() > deadline:
            sys.exit("the segment never came")
    ex.kill("segment")
    while ex.has_work():
        ex.sync(timeout=0.05)
    ex.end()
"""
