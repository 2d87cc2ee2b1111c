"""Issue 14: one task's fault stays that task's, seen from outside as a user would.

=========================================  ============================================
row                                        test
=========================================  ============================================
1. an outcome whose unpickling raises a    ``test_outcome_that_raises_when_unpickled_
   BaseException in the parent             fails_only_its_task`` (LocalExecutor),
                                           ``test_process_pool_serves_on_after_...``,
                                           ``test_cluster_...``; the Ctrl-C rule:
                                           ``test_a_real_sigint_while_unpickling_...``
3. kill(), a timeout and terminate() take  ``test_killing_a_task_kills_its_process_tree``
   down the task's whole process tree      (also a worker that dies mid-task); the
                                           lifeline: ``test_a_tree_goes_with_its_
                                           worker_when_the_parent_is_killed``; the
                                           terminal: ``test_a_worker_does_not_read_
                                           the_terminal``
4. a segfault leaves the task's Python     ``test_segfault_report_names_the_tasks_frame``,
   stack in the WorkerLostError            ``test_a_worker_killed_without_a_report_...``
=========================================  ============================================

Row 5 (non-bytes payloads in both loops) is in tests/loop/test_differential.py; rows 2
and 6 are elsewhere. See docs/containment.md for the behaviour these tests pin.

Every test runs on both loop implementations and every start method where workers are
involved, and each is bounded by a timeout.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import uuid

import pytest

import fault_tasks
import proc_table
from helpers import Recorder, connect, wait_for
from pipepool import (
    RemoteTraceback,
    State,
    TaskKilledError,
    TaskTimeoutError,
    TaskUnpicklingError,
    WorkerLostError,
)

pytestmark = [pytest.mark.portable, pytest.mark.timeout(90)]

# -- 1. an outcome that raises a BaseException while the parent unpickles it -----------------

BAD_OUTCOMES = {  # task, its args, the part that fails to unpickle, what unpickling raises
    "result sys.exit(3)": (fault_tasks.return_exiting, (3,), "result", SystemExit),
    "result KeyboardInterrupt": (
        fault_tasks.return_interrupting,
        (),
        "result",
        KeyboardInterrupt,
    ),
    "result GeneratorExit": (
        fault_tasks.return_base_exception_raising,
        (),
        "result",
        GeneratorExit,
    ),
    "exception sys.exit(4)": (fault_tasks.raise_exiting_exception, (), "exception", SystemExit),
}


def check_unpickling_error(error: BaseException, part: str, raised: type) -> None:
    assert type(error) is TaskUnpicklingError and error.part == part, repr(error)
    assert raised.__name__ in str(error) and "'bad'" in str(error)
    if part == "result":
        assert type(error.__cause__) is raised  # what unpickling raised, attached
    else:  # the worker's traceback stays the cause; what unpickling raised is the context
        assert isinstance(error.__cause__, RemoteTraceback)
        assert "raise_exiting_exception" in str(error.__cause__)
        assert type(error.__context__) is raised


@pytest.mark.parametrize("case", list(BAD_OUTCOMES))
def test_outcome_that_raises_when_unpickled_fails_only_its_task(make, case):
    """The bad outcome sits among 20 good ones sent to the same worker at once (so its
    frame is read together with theirs): it fails alone with TaskUnpicklingError, the
    others succeed, the pool serves on, and ``end()`` returns."""
    fn, args, part, raised = BAD_OUTCOMES[case]
    ex = make(1, prefetch=32)
    for i in range(10):
        ex.queue(i, fault_tasks.square, i)
    ex.queue("bad", fn, *args)
    for i in range(10, 20):
        ex.queue(i, fault_tasks.square, i)
    rec = Recorder(ex)
    rec.run_until(lambda: not ex.has_work(), limit=60)
    for i in range(20, 25):  # the pool still serves
        ex.queue(i, fault_tasks.square, i)
    rec.finish(limit=60)  # end() included
    assert not rec.duplicates
    assert set(rec.terminal) == {"bad", *range(25)}
    assert all(rec.terminal[i].result == i * i for i in range(25))
    assert rec.terminal["bad"].state is State.FAILED
    check_unpickling_error(rec.terminal["bad"].exception, part, raised)
    stats = ex.stats()
    assert (stats["workers_started"], stats["worker_crashes"]) == (1, 0)
    assert (stats["tasks_done"], stats["tasks_failed"]) == (25, 1)


def test_a_real_sigint_while_unpickling_still_interrupts_between_steps(make):
    """The rule that tells the two apart: a SIGINT that arrives while the parent
    unpickles (here sent by the unpickling itself, as a Ctrl-C would land) is deferred
    with the step's signals and raises KeyboardInterrupt after the step, for the caller;
    the outcome it interrupted is still whole (this task succeeds)."""
    ex = make(1)
    ex.queue("signals", fault_tasks.return_signalling)
    ex.queue("after", fault_tasks.square, 3)
    rec = Recorder(ex)
    with pytest.raises(KeyboardInterrupt):
        rec.run_until(lambda: False, limit=60)
    rec.take()  # what the interrupted round had published
    rec.finish(limit=60)
    assert not rec.duplicates
    assert rec.terminal["signals"].state is State.SUCCESS
    assert rec.terminal["signals"].result is None
    assert rec.terminal["after"].result == 9


@pytest.mark.parametrize("case", ["result sys.exit(3)", "result KeyboardInterrupt"])
def test_process_pool_serves_on_after_an_outcome_that_raises_when_unpickled(
    impl, start_method, monkeypatch, case
):
    """Through ``ProcessPoolExecutor``: only that future fails, the 20 beside it and any
    submitted later succeed, and shutdown returns."""
    import pipepool

    monkeypatch.setenv("PIPEPOOL_IMPL", impl)  # the pool's LocalExecutor loads this loop
    fn, args, _part, raised = BAD_OUTCOMES[case]
    context = multiprocessing.get_context(start_method)
    with pipepool.ProcessPoolExecutor(2, mp_context=context) as pool:
        before = [pool.submit(fault_tasks.square, i) for i in range(10)]
        bad = pool.submit(fn, *args)
        after = [pool.submit(fault_tasks.square, i) for i in range(10, 20)]
        error = bad.exception(timeout=30)
        check_unpickling_error_of_future(error, raised)
        assert [f.result(timeout=30) for f in before + after] == [i * i for i in range(20)]
        later = list(pool.map(fault_tasks.square, range(5), timeout=30))
        assert later == [i * i for i in range(5)]


def check_unpickling_error_of_future(error: BaseException | None, raised: type) -> None:
    assert type(error) is TaskUnpicklingError and error.part == "result", repr(error)
    assert type(error.__cause__) is raised


@pytest.mark.parametrize("case", ["result sys.exit(3)", "exception sys.exit(4)"])
def test_cluster_outcome_that_raises_when_unpickled_fails_only_its_task(dask_cluster, case):
    """The same rule in ClusterExecutor: only that task fails, the round goes on."""
    fn, args, part, raised = BAD_OUTCOMES[case]
    ex = connect(dask_cluster)
    try:
        for i in range(10):
            ex.queue(i, fault_tasks.square, i)
        ex.queue("bad", fn, *args)
        for i in range(10, 20):
            ex.queue(i, fault_tasks.square, i)
        rec = Recorder(ex)
        rec.run_until(lambda: not ex.has_work(), limit=60)
        ex.queue(20, fault_tasks.square, 20)  # it still serves
        rec.finish(limit=60)  # end() included
    finally:
        ex.terminate()
    assert not rec.duplicates
    assert all(rec.terminal[i].result == i * i for i in range(21))
    check_unpickling_error(rec.terminal["bad"].exception, part, raised)


# -- 3. kill(), a timeout, terminate(): the task's whole process tree goes ------------------

TREE = 3  # sh and its two sleeps


def end_by_kill(ex, rec, key):
    assert ex.kill(key) == 1
    return TaskKilledError


def end_by_timeout(ex, rec, key):
    return TaskTimeoutError  # the task was queued with a timeout; it passes while we wait


def end_by_terminate(ex, rec, key):
    ex.terminate()
    return TaskKilledError


def end_by_dying(ex, rec, key):
    return WorkerLostError  # the task SIGKILLs its own worker once its tree is up


ENDINGS = {
    "kill": end_by_kill,
    "timeout": end_by_timeout,
    "terminate": end_by_terminate,
    "worker dies": end_by_dying,
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_killing_a_task_kills_its_process_tree(make, ending):
    """A task runs ``sh -c 'sleep 1000 & sleep 1000'`` (found by a marker in their
    environment); however its task ends, none of the three outlives it, and the pool
    serves on with a new worker."""
    marker = f"{os.getpid()}-{uuid.uuid4().hex}"
    ex = make(1)
    rec = Recorder(ex)
    try:
        if ending == "timeout":
            ex.queue_call("tree", fault_tasks.spawn_tree, (marker,), timeout=3.0)
        else:
            then = "die" if ending == "worker dies" else "wait"
            ex.queue("tree", fault_tasks.spawn_tree, marker, then)
        # The tree is up and the parent knows the task started (kill() needs that).
        rec.run_until(
            lambda: (
                (len(fault_tasks.marked(marker)) == TREE and bool(ex.running))
                or "tree" in rec.terminal
            ),
            limit=30,
        )
        error_type = ENDINGS[ending](ex, rec, "tree")
        if ending != "terminate":
            rec.run_until(lambda: "tree" in rec.terminal, limit=30)
            ex.queue("after", fault_tasks.square, 4)  # a replacement serves on
            rec.finish(limit=60)
            assert rec.terminal["after"].result == 16
        rec.take()
        assert type(rec.terminal["tree"].exception) is error_type
        assert wait_for(lambda: not fault_tasks.marked(marker), 10), f"processes left: {ending}"
    finally:
        for pid in fault_tasks.marked(marker):  # a failed run leaves nothing either
            os.kill(pid, signal.SIGKILL)


PARENT = r"""
import sys, time
sys.path[:0] = {path!r}
import fault_tasks
import proc_table
from pipepool import LocalExecutor

if __name__ == "__main__":
    ex = LocalExecutor(1, start_method={method!r}, loop_impl={impl!r})
    ex.start()
    ex.queue("tree", fault_tasks.spawn_tree, {marker!r})
    deadline = time.monotonic() + 60
    while len(fault_tasks.marked({marker!r})) < 3:
        ex.sync(timeout=0.01)
        if time.monotonic() > deadline:
            sys.exit("the tree never came up")
    print("up", flush=True)
    time.sleep(60)
"""


def test_a_tree_goes_with_its_worker_when_the_parent_is_killed(impl, start_method):
    """The lifeline still works from the worker's own process group, and takes the
    group along: SIGKILL the parent, and the worker and its task's tree all go."""
    marker = f"{os.getpid()}-{uuid.uuid4().hex}"
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
    script = PARENT.format(path=[here, *sys.path], method=start_method, impl=impl, marker=marker)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "up"
        workers = proc_table.children(proc.pid) - {
            p for p in proc_table.children(proc.pid) if b"forkserver" in proc_table.cmdline(p)
        }
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert wait_for(lambda: not fault_tasks.marked(marker), 10), "the tree outlived the parent"
        assert wait_for(lambda: not any(proc_table.alive(p) for p in workers), 10), (
            "a worker lived on"
        )
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
        for pid in fault_tasks.marked(marker):
            os.kill(pid, signal.SIGKILL)


TTY_PARENT = r"""
import sys
sys.path[:0] = {path!r}
import fault_tasks
from pipepool import LocalExecutor

if __name__ == "__main__":
    ex = LocalExecutor(1, start_method={method!r}, loop_impl={impl!r})
    ex.start()
    ex.queue("tty", fault_tasks.stdin_is_a_tty)
    ex.end()
    print("parent", sys.stdin.isatty(), "worker", ex.get_event_buffer()["tty"].result)
"""


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_a_worker_does_not_read_the_terminal(impl, start_method):
    """Out of the terminal's foreground group, a worker reading it would be stopped
    (SIGTTIN): a worker whose stdin is a terminal gets /dev/null instead."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
    script = TTY_PARENT.format(path=[here, *sys.path], method=start_method, impl=impl)
    primary, secondary = os.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script],
            stdin=secondary,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(primary)
        os.close(secondary)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["parent", "True", "worker", "False"]


# -- 4. a segfault says where: faulthandler's report in the WorkerLostError ---------------


def test_segfault_report_names_the_tasks_frame(make, caplog):
    """A real segfault (ctypes reads address 0): the error names the crashing frames,
    innermost first, and the whole report is logged; the pool serves on."""
    ex = make(1)
    ex.queue("crash", fault_tasks.segfault_in_named_frame)
    ex.queue("after", fault_tasks.square, 5)
    rec = Recorder(ex)
    with caplog.at_level(logging.ERROR, logger="pipepool"):
        rec.finish(limit=60)
    error = rec.terminal["crash"].exception
    assert type(error) is WorkerLostError and error.exitcode == -signal.SIGSEGV
    message = str(error)
    assert "'crash'" in message and "killed by SIGSEGV" in message
    assert "Fatal Python error: Segmentation fault" in message
    # The task's frames, innermost first, down to where pipepool's worker called it.
    assert message.index("in crash_here_for_the_report") < message.index(
        "in segfault_in_named_frame"
    )
    assert "in _outcome" not in message and "in _watch" not in message
    logged = [r.getMessage() for r in caplog.records if r.name == "pipepool"]
    # Every thread's stack: the watcher's too (its frames, or "<no Python frame>" if the
    # crash came before it first ran: it is started without waiting for it).
    assert any("in crash_here_for_the_report" in m and m.count("hread 0x") >= 2 for m in logged), (
        logged
    )
    assert rec.terminal["after"].result == 25


def test_a_worker_killed_without_a_report_keeps_the_plain_message(make, caplog):
    """SIGKILL leaves no report: the message has nothing quoted, and nothing is logged."""
    import tasks

    ex = make(1)
    ex.queue("killed", tasks.kill_self, signal.SIGKILL)
    rec = Recorder(ex)
    with caplog.at_level(logging.ERROR, logger="pipepool"):
        rec.finish(limit=60)
    error = rec.terminal["killed"].exception
    assert type(error) is WorkerLostError and "faulthandler" not in str(error)
    assert not [r for r in caplog.records if r.name == "pipepool"]
