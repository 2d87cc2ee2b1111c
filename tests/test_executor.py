"""LocalExecutor: the scheduler-facing contract, on every start method and both loops."""

from __future__ import annotations

import os
import pickle
import signal

import pytest

import tasks
from executor_helpers import Recorder
from pipepool import (
    InitializerError,
    LocalExecutor,
    RemoteTraceback,
    State,
    TaskPicklingError,
    TaskTimeoutError,
    TaskUnpicklingError,
    WorkerLostError,
)


def test_results_and_events(make):
    ex = make(2)
    for i in range(50):
        ex.queue(("k", i), tasks.echo, i)
    assert ex.queued == {("k", i) for i in range(50)}
    rec = Recorder(ex)
    rec.finish()
    assert not rec.duplicates
    assert {k: e.result for k, e in rec.terminal.items()} == {("k", i): i for i in range(50)}
    assert all(e.state is State.SUCCESS and e.pid for e in rec.terminal.values())
    assert ex.stats()["tasks_done"] == 50


def test_task_exception_keeps_type_attributes_and_remote_traceback(make):
    ex = make(1)
    ex.queue("custom", tasks.raise_custom, 7)
    ex.queue("value", tasks.raise_value_error, "boom")
    rec = Recorder(ex)
    rec.finish()
    custom = rec.terminal["custom"].exception
    assert type(custom) is tasks.CustomError and custom.code == 7
    assert isinstance(custom.__cause__, RemoteTraceback)
    assert 'tasks.py", line' in str(custom.__cause__) and "raise_custom" in str(custom.__cause__)
    value = rec.terminal["value"].exception
    assert isinstance(value, ValueError) and str(value) == "boom"
    assert rec.terminal["value"].reason == "ValueError"


def test_unpicklable_argument_fails_only_that_key(make):
    ex = make(2)
    ex.queue("before", tasks.echo, 1)
    ex.queue("bad", tasks.echo, tasks.Unpicklable())
    ex.queue("lambda", lambda: 1)
    ex.queue("after", tasks.echo, 2)
    rec = Recorder(ex)
    rec.finish()
    bad = rec.terminal["bad"]
    assert bad.state is State.FAILED and isinstance(bad.exception, TaskPicklingError)
    assert bad.exception.part == "arguments" and "'bad'" in str(bad.exception)
    lam = rec.terminal["lambda"].exception
    assert isinstance(lam, TaskPicklingError) and lam.part == "function"
    assert rec.terminal["before"].result == 1 and rec.terminal["after"].result == 2
    assert ex.stats()["worker_crashes"] == 0


def test_result_and_exception_pickling_failures_fail_their_task_only(make):
    ex = make(1)
    ex.queue("result", tasks.return_unpicklable)
    ex.queue("result-parent", tasks.return_unpicklable_in_parent)
    ex.queue("exception", tasks.raise_bad_exception)
    ex.queue("fine", tasks.echo, "ok")
    rec = Recorder(ex)
    rec.finish()
    assert isinstance(rec.terminal["result"].exception, TaskPicklingError)
    assert rec.terminal["result"].exception.part == "result"
    assert isinstance(rec.terminal["result-parent"].exception, TaskUnpicklingError)
    assert rec.terminal["result-parent"].exception.part == "result"
    exc = rec.terminal["exception"].exception
    assert isinstance(exc, TaskUnpicklingError) and exc.part == "exception"
    assert "BadException" in str(exc.__cause__)  # the worker's traceback survives
    assert rec.terminal["fine"].result == "ok"


@pytest.mark.parametrize(
    ("fn", "args", "expect_exitcode"),
    [
        (tasks.exit_process, (3,), 3),
        (tasks.exit_process, (0,), 0),
        (tasks.kill_self, (signal.SIGKILL,), -signal.SIGKILL),
        (tasks.kill_self, (signal.SIGSEGV,), -signal.SIGSEGV),
    ],
    ids=["os._exit(3)", "os._exit(0)", "SIGKILL", "SIGSEGV"],
)
def test_dead_worker_fails_only_its_task(make, fn, args, expect_exitcode):
    ex = make(2)
    ex.queue("doomed", fn, *args)
    for i in range(20):
        ex.queue(i, tasks.echo, i)
    rec = Recorder(ex)
    rec.finish()
    lost = rec.terminal["doomed"].exception
    assert isinstance(lost, WorkerLostError)
    assert lost.exitcode == expect_exitcode and lost.pid == rec.terminal["doomed"].pid
    if expect_exitcode < 0:
        assert lost.signal == signal.Signals(-expect_exitcode).name
        assert lost.signal in str(lost)
    assert all(rec.terminal[i].result == i for i in range(20))


def test_system_exit_and_base_exception_are_task_failures(make):
    ex = make(1)
    ex.queue("exit", tasks.exit_via_sys, 3)
    ex.queue("base", tasks.raise_base_exception)
    ex.queue("after", tasks.echo, 1)
    rec = Recorder(ex)
    rec.finish()
    exit_exc = rec.terminal["exit"].exception
    assert type(exit_exc) is SystemExit and exit_exc.code == 3
    assert type(rec.terminal["base"].exception) is tasks.CustomBaseException
    assert rec.terminal["after"].result == 1
    assert ex.stats()["worker_crashes"] == 0  # the worker survived both


def test_timeout_kills_the_worker_and_fails_the_task(make):
    ex = make(1)
    ex.queue_call("slow", tasks.sleep, (30,), timeout=0.5)
    ex.queue("next", tasks.echo, "n")
    rec = Recorder(ex)
    rec.finish(limit=60)
    assert isinstance(rec.terminal["slow"].exception, TaskTimeoutError)
    assert rec.terminal["next"].result == "n"


def test_max_tasks_per_child_recycles_workers(make, tmp_path):
    ex = make(2, max_tasks_per_child=3)
    for i in range(30):
        ex.queue(i, tasks.pid_of_worker)
    rec = Recorder(ex)
    rec.finish()
    pids = [e.result for e in rec.terminal.values()]
    assert len(pids) == 30
    assert max(pids.count(p) for p in set(pids)) <= 3
    assert ex.stats()["worker_recycles"] >= 8


def test_initializer_runs_in_each_worker(make):
    ex = make(2, initializer=tasks.set_flag, initargs=("ready",))
    for i in range(6):
        ex.queue(i, tasks.get_flag)
    rec = Recorder(ex)
    rec.finish()
    assert {e.result for e in rec.terminal.values()} == {"ready"}


def test_failing_initializer_fails_queued_work_after_bounded_retries(make):
    ex = make(2, initializer=tasks.fail_init)
    for i in range(5):
        ex.queue(i, tasks.echo, i)
    rec = Recorder(ex)
    rec.finish(limit=60)
    assert set(rec.terminal) == set(range(5))
    for event in rec.terminal.values():
        assert isinstance(event.exception, InitializerError)
        assert "initializer says no" in str(event.exception)
    # Bounded: a handful of probes, not a busy respawn loop.
    assert ex.stats()["workers_started"] <= 4


def test_sync_is_non_blocking_and_requires_start(impl):
    ex = LocalExecutor(1, _loop_impl=impl)
    with pytest.raises(RuntimeError, match="start"):
        ex.sync()
    ex.end()


def test_context_manager_runs_everything(impl, start_method):
    with LocalExecutor(2, start_method=start_method, _loop_impl=impl) as ex:
        for i in range(10):
            ex.queue(i, tasks.echo, i * 3)
    events = ex.get_event_buffer()
    assert {k: e.result for k, e in events.items()} == {i: i * 3 for i in range(10)}


def test_pickle_of_errors_round_trips():
    err = WorkerLostError("lost", pid=12, exitcode=-9)
    again = pickle.loads(pickle.dumps(err))
    assert (again.pid, again.exitcode, again.signal) == (12, -9, "SIGKILL")
    assert isinstance(again, WorkerLostError)


def test_implementation_is_reported(impl):
    ex = LocalExecutor(1, _loop_impl=impl)
    assert ex.implementation == impl
    ex.end()


def test_worker_holds_only_its_own_pipe_ends(impl):
    """With fork, a worker must not keep another worker's pipe ends open."""
    ex = LocalExecutor(3, start_method="fork", _loop_impl=impl)
    ex.start()
    try:
        for i in range(3):
            ex.queue(i, tasks.wait_for, os.devnull)
        rec = Recorder(ex)
        rec.finish()
        assert len(rec.terminal) == 3
    finally:
        ex.terminate()


def test_adaptive_depth_never_queues_long_tasks_behind_each_other(impl):
    """prefetch=None: tasks that take longer than the backlog go one per worker."""
    ex = LocalExecutor(3, start_method="fork", prefetch=None, _loop_impl=impl)
    ex.start()
    try:
        for i in range(9):
            ex.queue(i, tasks.sleep, 0.05, i)
        rec = Recorder(ex)
        deepest = 0
        while ex.has_work():
            rec.round(0.01)
            deepest = max([deepest, *(len(w.in_flight) for w in ex._workers.values())])
        assert deepest == 1
        assert ex.stats()["dispatch_depth"] == 1
        rec.finish()
        assert {k: e.result for k, e in rec.terminal.items()} == {i: i for i in range(9)}
    finally:
        ex.terminate()


def test_adaptive_depth_runs_tiny_tasks(impl):
    with LocalExecutor(2, start_method="fork", prefetch=None, _loop_impl=impl) as ex:
        for i in range(3000):
            ex.queue(i, tasks.echo, i)
    events = ex.get_event_buffer()
    assert {k: e.result for k, e in events.items()} == {i: i for i in range(3000)}


def test_exceptions_keep_their_attributes_when_tblib_reducers_are_installed(impl):
    """Importing Dask installs tblib's copyreg reducer for every exception class; a
    forked worker inherits it, and SystemExit.code came back as None."""
    import copyreg

    import tblib.pickling_support

    before = dict(copyreg.dispatch_table)
    tblib.pickling_support.install()
    try:
        with LocalExecutor(1, start_method="fork", _loop_impl=impl) as ex:
            ex.queue("exit", tasks.exit_via_sys, 3)
            ex.queue("custom", tasks.raise_custom, 5)
        events = ex.get_event_buffer()
    finally:
        copyreg.dispatch_table.clear()
        copyreg.dispatch_table.update(before)
    assert type(events["exit"].exception) is SystemExit and events["exit"].exception.code == 3
    assert events["custom"].exception.code == 5


def test_sync_with_timeout_dispatches_before_it_waits(impl):
    """Work queued just before sync(timeout) is sent at once: the round that follows a
    queue() must not sleep the whole timeout first (it used to: 10 ms per task)."""
    with LocalExecutor(1, start_method="fork", _loop_impl=impl) as ex:
        ex.queue("warm", tasks.echo, 0)
        ex.wait_until_done()
        ex.get_event_buffer()
        ex.queue("k", tasks.echo, 1)
        for _ in range(50):  # far fewer rounds than a 60 s timeout each would allow
            ex.sync(timeout=60)
            if "k" in ex.get_event_buffer() and not ex.has_work():
                break
        assert not ex.has_work()
