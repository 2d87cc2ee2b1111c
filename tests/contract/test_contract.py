"""The scheduler-facing contract, written once and run on both executors.

``local-IMPL-METHOD`` is a LocalExecutor on each loop implementation (``python``,
``cython``; the ``impl`` fixture's list) and each start method (fork, spawn,
forkserver); ``cluster`` is a ClusterExecutor connected to the Dask LocalCluster of two
worker processes on 127.0.0.1 that the cluster tests share (conftest.py's
``dask_cluster``). Where the two differ by design (a dead LocalExecutor worker has an
exit code, a lost Dask task names a worker address after the cluster's retries, Dask
sends functions by value), the test says so in one line; tests/executor/test_executor.py keeps
the LocalExecutor-only cases (initializers, recycling, adaptive depth, fd hygiene) and
tests/cluster/test_cluster.py the cluster-only ones.
"""

from __future__ import annotations

import contextlib
import copyreg
import os
import time
from concurrent.futures import CancelledError

import pytest

import cluster_tasks
import tasks
from helpers import START_METHODS, Executors, Recorder, connect, implementations, is_tblib
from pipepool import (
    DuplicateKeyError,
    LocalExecutor,
    RemoteTraceback,
    State,
    TaskKilledError,
    TaskPicklingError,
    TaskTimeoutError,
    TaskUnpicklingError,
    WorkerLostError,
)
from pipepool import loop as _impl

pytestmark = pytest.mark.timeout(90)


@contextlib.contextmanager
def plain_exception_pickling():
    """Without tblib's exception reducers, which importing distributed installs in this
    process and so in LocalExecutor's forked workers (SystemExit would lose its code)."""
    saved = copyreg.dispatch_table.copy()
    for cls, reducer in saved.items():
        if is_tblib(reducer):
            del copyreg.dispatch_table[cls]
    try:
        yield
    finally:
        copyreg.dispatch_table.clear()
        copyreg.dispatch_table.update(saved)


EXECUTORS = [
    *(("local", impl, method) for impl in implementations() for method in START_METHODS),
    ("cluster", None, None),
]


class ClusterExecutors:
    """The cluster row's ``make``: ClusterExecutors on the shared cluster (asked for on
    first use, so the local rows never start it), each terminated at ``close()``."""

    kind = "cluster"

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request
        self.made: list = []

    def build(self, parallelism: int = 2, **kwargs):
        from pipepool import ClusterExecutor

        return ClusterExecutor(self.request.getfixturevalue("dask_cluster").scheduler_address)

    def __call__(self, parallelism: int = 2, **kwargs):
        ex = connect(self.request.getfixturevalue("dask_cluster"), **kwargs)
        self.made.append(ex)
        return ex

    def close(self) -> None:
        for ex in self.made:
            ex.terminate()


@pytest.fixture(params=EXECUTORS, ids=lambda p: "-".join(x for x in p if x))
def make(request):
    """``make(parallelism, **kwargs)``: a started executor of this test's kind, terminated
    after the test; ``make.build(parallelism)`` an unstarted one; ``make.kind``."""
    kind, impl, start_method = request.param
    if kind == "cluster":
        executors = ClusterExecutors(request)
        yield executors
        executors.close()
        return
    _impl.load(impl)  # "cython" fails loudly if the compiled loop did not build
    with plain_exception_pickling():
        local = Executors(impl, start_method)
        local.kind = "local"  # type: ignore[attr-defined]
        yield local
        local.close()


def is_cluster(ex) -> bool:
    return not isinstance(ex, LocalExecutor)


def wait_running(rec: Recorder, key, limit: float = 30.0) -> None:
    """Drive ``rec`` until ``key`` has been reported RUNNING."""
    rec.run_until(lambda: key in rec.running_seen, limit=limit)


# -- outcomes ------------------------------------------------------------------------------


def test_results_and_events(make):
    ex = make(2)
    for i in range(50):
        ex.queue(("k", i), tasks.echo, i)
    assert ex.queued == {("k", i) for i in range(50)}
    assert ex.has_work() and not ex.running
    rec = Recorder(ex)
    rec.finish()
    assert not rec.duplicates
    assert {k: e.result for k, e in rec.terminal.items()} == {("k", i): i for i in range(50)}
    assert all(e.state is State.SUCCESS and e.pid for e in rec.terminal.values())
    assert ex.stats()["tasks_done"] == 50
    assert not ex.has_work() and not ex.queued and not ex.running


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
    assert ex.stats()["tasks_failed"] == 2


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
    lam = rec.terminal["lambda"]
    if is_cluster(ex):  # Dask sends functions by value (cloudpickle)
        assert lam.result == 1
    else:  # by name: a lambda has none
        assert isinstance(lam.exception, TaskPicklingError) and lam.exception.part == "function"
    assert rec.terminal["before"].result == 1 and rec.terminal["after"].result == 2
    assert ex.stats()["worker_crashes"] == 0


def test_result_and_exception_pickling_failures_fail_their_task_only(make):
    ex = make(1)
    ex.queue("result", tasks.return_unpicklable)
    ex.queue("result-parent", tasks.return_unpicklable_in_parent)
    ex.queue("exception", cluster_tasks.raise_unpicklable_in_parent)
    ex.queue("fine", tasks.echo, "ok")
    rec = Recorder(ex)
    rec.finish()
    assert isinstance(rec.terminal["result"].exception, TaskPicklingError)
    assert rec.terminal["result"].exception.part == "result"
    assert isinstance(rec.terminal["result-parent"].exception, TaskUnpicklingError)
    assert rec.terminal["result-parent"].exception.part == "result"
    exc = rec.terminal["exception"].exception
    assert isinstance(exc, TaskUnpicklingError) and exc.part == "exception"
    assert "UnpicklableInParentError" in str(exc.__cause__)  # the worker's traceback survives
    assert rec.terminal["fine"].result == "ok"


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


def test_dead_worker_fails_only_its_task(make):
    ex = make(2)
    ex.queue("doomed", tasks.exit_process, 3)
    for i in range(20):
        ex.queue(i, tasks.echo, i)
    rec = Recorder(ex)
    rec.finish()
    assert not rec.duplicates
    lost = rec.terminal["doomed"].exception
    assert isinstance(lost, WorkerLostError) and "'doomed'" in str(lost)
    if is_cluster(ex):  # after the cluster's own retries, named by the last worker
        assert lost.address.startswith("tcp://127.0.0.1:") and lost.address in str(lost)
        assert lost.exitcode is None and ex.stats()["tasks_lost"] == 1
    else:
        assert lost.exitcode == 3 and lost.pid == rec.terminal["doomed"].pid
    assert all(rec.terminal[i].result == i for i in range(20))


def test_running_events_name_the_worker_before_the_outcome(make):
    ex = make(2)
    ex.queue("slow", tasks.sleep, 0.5, "done")
    rec = Recorder(ex)
    wait_running(rec, "slow")
    assert "slow" in ex.running and not rec.terminal
    rec.finish()
    assert rec.history["slow"] == ["running", "success"]
    assert rec.terminal["slow"].result == "done" and rec.terminal["slow"].pid


def test_an_exclusive_key_takes_one_dispatch_until_its_terminal_event_is_read(make, tmp_path):
    """``exclusive=True`` (a face's "one run per key", Airflow's): a key already queued,
    running, or reported with its terminal event unread is refused with
    DuplicateKeyError (the first dispatch untouched: it runs once, reports once); once
    get_event_buffer() handed out that event the key is free again. Without it the same
    key is one more dispatch (tests/contract/test_dispatches.py)."""
    release = str(tmp_path / "release")
    ex = make(2)
    ex.queue("k", tasks.wait_for, release, "first")

    def refused(where: str) -> None:
        for again in (
            lambda: ex.queue_call("k", tasks.echo, ("second",), exclusive=True),
            lambda: ex.queue_call("k", tasks.echo, ("second",), timeout=5, exclusive=True),
        ):
            with pytest.raises(DuplicateKeyError, match="'k' is already") as info:
                again()
            assert info.value.key == "k" and info.value.where == where
            assert isinstance(info.value, ValueError)

    refused("queued")
    assert ex.queued == {"k"} and ex.stats()["tasks_queued"] == 1
    rec = Recorder(ex)
    wait_running(rec, "k")
    refused("running")
    assert ex.running_counts() == {"k": 1}
    open(release, "w").close()
    while ex.has_work():  # no rec.take(): the terminal event stays unread
        ex.sync(timeout=0.01)
    refused("reported")
    events = ex.get_event_buffer(["other"])  # reading another key frees nothing
    assert events == {}
    refused("reported")
    assert ex.get_event_buffer(["k"])["k"].result == ("first", 0)
    ex.queue_call("k", tasks.echo, ("second",), exclusive=True)  # read: free again
    rec.finish()
    assert rec.terminal["k"].result == "second" and not rec.duplicates
    assert [e.dispatch for e in rec.outcomes["k"]] == [1]


def test_a_cancelled_key_is_free_once_its_event_is_read(make):
    ex = make(1)
    ex.queue("first", tasks.sleep, 0.2)
    ex.queue("k", tasks.echo, "cancelled")
    assert ex.cancel("k") == 1
    with pytest.raises(DuplicateKeyError) as info:
        ex.queue_call("k", tasks.echo, ("again",), exclusive=True)
    assert info.value.where == "reported"
    assert isinstance(ex.get_event_buffer(["k"])["k"].exception, CancelledError)
    ex.queue_call("k", tasks.echo, ("again",), exclusive=True)
    rec = Recorder(ex)
    rec.finish()
    assert rec.terminal["k"].result == "again"


# -- stopping work ---------------------------------------------------------------------------


def test_timeout_fails_the_task_and_the_pool_goes_on(make):
    ex = make(1)
    ex.queue_call("slow", tasks.sleep, (30,), timeout=0.5)
    ex.queue("next", tasks.echo, "n")
    rec = Recorder(ex)
    started = time.monotonic()
    rec.finish(limit=60)
    assert isinstance(rec.terminal["slow"].exception, TaskTimeoutError)
    assert rec.terminal["next"].result == "n"
    assert time.monotonic() - started < 20


def test_cancel_fails_only_queued_tasks(make):
    ex = make(2)
    for i in range(5):
        ex.queue(("c", i), tasks.echo, i)
    ex.queue("keep", tasks.echo, "k")
    assert ex.cancel(("c", 3)) == 1 and ex.cancel("nothing") == 0
    assert ("c", 3) not in ex.queued
    rec = Recorder(ex)
    rec.take()  # the cancel's event is there before any round
    assert isinstance(rec.terminal[("c", 3)].exception, CancelledError)
    rec.finish()
    assert not rec.duplicates
    assert rec.terminal["keep"].result == "k"
    assert {k for k, e in rec.terminal.items() if e.state is State.SUCCESS} == {
        ("c", i) for i in (0, 1, 2, 4)
    } | {"keep"}


def test_kill_stops_a_running_task_and_the_pool_goes_on(make):
    ex = make(2)
    ex.queue("victim", tasks.sleep, 30)
    rec = Recorder(ex)
    wait_running(rec, "victim")
    assert ex.kill("victim") == 1 and ex.kill("unknown") == 0
    for i in range(10):
        ex.queue(i, tasks.echo, i)
    started = time.monotonic()
    rec.finish()
    assert time.monotonic() - started < 30
    assert isinstance(rec.terminal["victim"].exception, TaskKilledError)
    assert all(rec.terminal[i].result == i for i in range(10))
    assert not rec.duplicates
    # One name for one thing on both executors: a kill is no crash.
    stats = ex.stats()
    assert (stats["workers_killed"], stats["worker_crashes"]) == (1, 0)


def test_terminate_reports_every_unfinished_task_once(make):
    ex = make(2)
    ex.queue("running", tasks.sleep, 30)
    rec = Recorder(ex)
    wait_running(rec, "running")
    for i in range(20):
        ex.queue(i, tasks.sleep, 30)
    started = time.monotonic()
    ex.terminate()
    assert time.monotonic() - started < 15
    rec.take()
    assert not rec.duplicates
    assert set(rec.terminal) == {"running", *range(20)}
    assert isinstance(rec.terminal["running"].exception, TaskKilledError)
    assert all(
        isinstance(e.exception, TaskKilledError | CancelledError) for e in rec.terminal.values()
    )
    with pytest.raises(RuntimeError):
        ex.sync()
    with pytest.raises(RuntimeError):
        ex.queue("late", tasks.echo, 1)


def test_wait_until_done_is_bounded(make):
    ex = make(1)
    ex.queue("nap", tasks.sleep, 30)
    assert ex.wait_until_done(timeout=0.3) is False
    assert ex.has_work()
    ex.terminate()
    assert isinstance(ex.get_event_buffer()["nap"].exception, TaskKilledError | CancelledError)


# -- life cycle ------------------------------------------------------------------------------


def test_sync_requires_start(make):
    ex = make(1)
    ex.terminate()
    if make.kind == "local":
        fresh = make.build(1)
    else:
        from pipepool import ClusterExecutor

        fresh = ClusterExecutor("tcp://127.0.0.1:1")  # never started: never connects
    with pytest.raises(RuntimeError, match="start"):
        fresh.sync()
    fresh.end()


def test_context_manager_runs_everything(make):
    ex = make.build(2)
    with ex:
        for i in range(10):
            ex.queue(i, tasks.echo, i * 3)
    events = ex.get_event_buffer()
    assert {k: e.result for k, e in events.items()} == {i: i * 3 for i in range(10)}
    with pytest.raises(RuntimeError):
        ex.queue("late", tasks.echo, 1)


def test_stats_have_the_same_keys(make):
    ex = make(2)
    ex.queue("one", tasks.echo, 1)
    Recorder(ex).finish()
    stats = ex.stats()
    assert {
        "workers_alive",
        "workers_busy",
        "workers_idle",
        "tasks_queued",
        "tasks_running",
        "tasks_done",
        "tasks_failed",
        "tasks_lost",
        "worker_crashes",
        "workers_killed",
        "worker_recycles",
        "workers_started",
        "last_progress",
    } <= set(stats)
    assert stats["tasks_done"] == 1 and stats["tasks_queued"] == stats["tasks_running"] == 0
    assert all(v >= 0 for v in stats.values())


def test_records_each_run_in_a_file(make, tmp_path):
    """Real side effects: each task ran (at least) once, in another process."""
    ex = make(2)
    log = tmp_path / "runs"
    for i in range(30):
        ex.queue(i, tasks.record, str(log), i)
    rec = Recorder(ex)
    rec.finish()
    ran = [int(line) for line in log.read_text().split()]
    assert sorted(set(ran)) == list(range(30))
    assert {e.pid for e in rec.terminal.values()} <= set(range(1, 1 << 22)) - {os.getpid()}
