"""LocalExecutor on its own: initializers, the adaptive depth, fd hygiene, on every start
method and both loops (recycling: tests/worker/test_max_tasks_per_child.py). The contract
it shares with ClusterExecutor (results, failures of every kind, timeouts, cancel, kill,
terminate, life cycle) is written once, in tests/contract/test_contract.py, and runs there
on both loops and every start method too."""

from __future__ import annotations

import os
import pickle

import pytest

import tasks
from helpers import Recorder
from pipepool import (
    InitializerError,
    LocalExecutor,
    WorkerLostError,
)

pytestmark = [pytest.mark.smoke, pytest.mark.portable]


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


def test_pickle_of_errors_round_trips():
    err = WorkerLostError("lost", pid=12, exitcode=-9)
    again = pickle.loads(pickle.dumps(err))
    assert (again.pid, again.exitcode, again.signal) == (12, -9, "SIGKILL")
    assert isinstance(again, WorkerLostError)


def test_implementation_is_reported(impl):
    ex = LocalExecutor(1, loop_impl=impl)
    assert ex.implementation == impl
    ex.end()


def test_worker_holds_only_its_own_pipe_ends(impl):
    """With fork, a worker must not keep another worker's pipe ends open."""
    ex = LocalExecutor(3, start_method="fork", loop_impl=impl)
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
    ex = LocalExecutor(3, start_method="fork", prefetch=None, loop_impl=impl)
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
    with LocalExecutor(2, start_method="fork", prefetch=None, loop_impl=impl) as ex:
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
        with LocalExecutor(1, start_method="fork", loop_impl=impl) as ex:
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
    with LocalExecutor(1, start_method="fork", loop_impl=impl) as ex:
        ex.queue("warm", tasks.echo, 0)
        ex.wait_until_done()
        ex.get_event_buffer()
        ex.queue("k", tasks.echo, 1)
        for _ in range(50):  # far fewer rounds than a 60 s timeout each would allow
            ex.sync(timeout=60)
            if "k" in ex.get_event_buffer() and not ex.has_work():
                break
        assert not ex.has_work()


def test_running_counts_holds_running_keys_with_their_queued_dispatches(impl, tmp_path):
    """As its docstring says: a running key's dispatches not yet ended, handed over or
    queued again; a key only queued (never handed over) is in ``queued``, not here."""
    gate = tmp_path / "gate"
    ex = LocalExecutor(1, start_method="fork", prefetch=1, loop_impl=impl)
    ex.start()
    try:
        ex.queue("k", tasks.wait_for, str(gate))
        rec = Recorder(ex)
        rec.run_until(lambda: "k" in rec.running_seen)
        ex.queue("k", tasks.wait_for, str(gate))  # dispatch 2 of k: queued, k still running
        ex.queue("only-queued", tasks.echo, 1)  # behind them, on the one worker
        assert ex.running == {"k"} and ex.queued == {"k", "only-queued"}
        assert ex.running_counts() == {"k": 2}
        gate.touch()
        rec.finish()
        assert ex.running_counts() == {}
    finally:
        ex.terminate()
