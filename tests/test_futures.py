"""pipepool.ProcessPoolExecutor: the concurrent.futures contract, and where it does better.

The contract tests run against both pipepool's class and the standard library's, on
every start method: a test that passes on the stdlib tests the real contract, not
pipepool's reading of it. The tests after them cover what only pipepool promises (a dead
worker or a pickling failure costs one future; per-task timeout and kill; Ctrl-C and exit).
Real processes throughout; every test is bounded by pytest-timeout.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import gc
import inspect
import itertools
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

import futures_tasks as ft
import pipepool
import proc_table
from helpers import wait_for
from pipepool import (
    TaskKilledError,
    TaskPicklingError,
    TaskTimeoutError,
    TaskUnpicklingError,
    WorkerLostError,
)

WAIT = 30.0  # s: upper bound on any single result in these tests; a hang fails, not wedges
POOLS = {"pipepool": pipepool.ProcessPoolExecutor, "stdlib": cf.ProcessPoolExecutor}
TESTS_DIR = Path(__file__).resolve().parent
SRC_DIR = TESTS_DIR.parent / "src"


@pytest.fixture(scope="module", autouse=True)
def _shared_helpers_running():
    """Start the resource tracker and fork server before any leak check: they are shared
    by every pool of the process and live on purpose."""
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    forkserver.ensure_running()


@pytest.fixture(params=list(POOLS))
def flavor(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_pool(flavor, start_method, no_leaks):
    """Build pools of the class under test; all are shut down (waiting) at the end, and
    the test fails if a process, thread or fd outlives them."""
    made: list[cf.Executor] = []
    threads_before, fds_before = set(threading.enumerate()), proc_table.open_fds()
    # Children alive before this test (another suite's reusable pool, e.g. loky's under
    # joblib's tests) are not this pool's to wind down.
    children_before = {p.pid for p in multiprocessing.active_children()}

    def make(max_workers: int = 2, **kwargs) -> cf.Executor:
        pool = POOLS[flavor](
            max_workers, mp_context=multiprocessing.get_context(start_method), **kwargs
        )
        made.append(pool)
        return pool

    yield make
    for pool in made:
        if flavor == "stdlib":
            shutdown_stdlib(pool)
        else:
            pool.shutdown(wait=True, cancel_futures=True)
    if flavor == "stdlib":
        # After a shutdown(wait=False), the stdlib's later shutdown(wait=True) no longer
        # joins its workers or threads, and its queues' pipes close when collected: give
        # it time to wind down before the leak check (pipepool gets none).
        def wound_down() -> bool:
            gc.collect()
            return (
                {p.pid for p in multiprocessing.active_children()} <= children_before
                and set(threading.enumerate()) <= threads_before
                and proc_table.open_fds() <= fds_before
            )

        assert wait_for(wound_down), "the stdlib pool did not wind down"


def shutdown_stdlib(pool: cf.ProcessPoolExecutor) -> None:
    """shutdown(wait=True) of a stdlib pool, bounded: a wedged one (gh-115634, say) has
    its workers killed, which breaks it and lets its shutdown return."""
    processes = dict(pool._processes or {})  # type: ignore[attr-defined]
    closer = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True})
    closer.start()
    closer.join(WAIT)
    if closer.is_alive():
        for process in processes.values():
            process.kill()
        closer.join(WAIT)
        pytest.fail("the stdlib pool hung in shutdown(); its workers were killed")


@pytest.fixture
def make_pipepool(start_method, no_leaks):
    made: list[pipepool.ProcessPoolExecutor] = []

    def make(max_workers: int = 2, **kwargs) -> pipepool.ProcessPoolExecutor:
        pool = pipepool.ProcessPoolExecutor(
            max_workers, mp_context=multiprocessing.get_context(start_method), **kwargs
        )
        made.append(pool)
        return pool

    yield make
    for pool in made:
        pool.shutdown(wait=True, cancel_futures=True)


def warm_up(pool: cf.Executor, workers: int = 2) -> None:
    """Start ``workers`` workers now, so start-up time does not count in timed checks."""
    fs = [pool.submit(ft.sleep_return, 0.2) for _ in range(workers)]
    for f in fs:
        f.result(timeout=WAIT)


def read_pid(path: Path, limit: float = WAIT) -> int:
    assert wait_for(path.exists, limit), f"{path.name} did not appear"
    return int(path.read_text())


alive = proc_table.alive  # running, not a zombie: /proc, or ps on macOS


def line_of(fn, text: str) -> int:
    """The file line number of the first source line of ``fn`` containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# == the concurrent.futures contract: both classes, every start method ======================


def test_submit_returns_results_and_reraises_with_remote_traceback(make_pool):
    pool = make_pool()
    assert pool.submit(ft.square, 7).result(timeout=WAIT) == 49
    assert pool.submit(ft.add, 2, b=3).result(timeout=WAIT) == 5
    f = pool.submit(ft.fail, 42)
    with pytest.raises(ft.TaskError) as info:
        f.result(timeout=WAIT)
    assert info.value.code == 42
    assert info.value.args == ("task failed on purpose", 42)
    assert isinstance(f.exception(), ft.TaskError)
    # The worker's traceback is the cause, naming the file and line that raised.
    line = line_of(ft.fail, "raise TaskError")
    assert f'futures_tasks.py", line {line}, in fail' in str(info.value.__cause__)
    # Whatever its type: a task's own CancelledError is not mistaken for a cancellation.
    f = pool.submit(ft.raise_cancelled)
    with pytest.raises(cf.CancelledError, match="raised by the task itself"):
        f.result(timeout=WAIT)
    assert not f.cancelled()


def test_map_keeps_order_with_any_chunksize(make_pool):
    pool = make_pool()
    expected = [i * i for i in range(50)]
    assert list(pool.map(ft.square, range(50), timeout=WAIT)) == expected
    assert list(pool.map(ft.square, range(50), chunksize=7, timeout=WAIT)) == expected
    assert list(pool.map(ft.add, [1, 2, 3], [10, 20], timeout=WAIT)) == [11, 22]  # shortest
    assert list(pool.map(ft.square, [], timeout=WAIT)) == []
    # An exception comes out at its own position, after the results before it.
    got = []
    with pytest.raises(ValueError, match="bad item 5"):
        for value in pool.map(ft.fail_if, range(10), itertools.repeat(5), timeout=WAIT):
            got.append(value)
    assert got == [0, 1, 4, 9, 16]
    with pytest.raises(ValueError):
        pool.map(ft.square, range(3), chunksize=0)


def test_map_timeout_counts_from_the_call(make_pool):
    pool = make_pool()
    warm_up(pool)
    results = pool.map(ft.sleep_return, [0.0, 1.5], timeout=0.7)
    assert next(results) == 0.0
    start = time.monotonic()
    with pytest.raises(cf.TimeoutError):
        next(results)
    assert time.monotonic() - start < 1.2


def test_map_consumer_wakes_when_shutdown_cancels_its_items(make_pool, tmp_path):
    """A map iterator waiting on an item that shutdown(cancel_futures=True) cancels
    raises CancelledError instead of waiting forever; what was handed over finishes."""
    pool = make_pool(1)
    gate = tmp_path / "gate"
    results = pool.map(ft.wait_for_file, [str(gate)] * 30, range(30), timeout=WAIT)
    got: list = []
    ended: list[BaseException] = []

    def consume() -> None:
        try:
            got.extend(results)
        except BaseException as exc:  # what the iterator ended with is the point
            ended.append(exc)

    consumer = threading.Thread(target=consume)
    consumer.start()
    pool.shutdown(wait=False, cancel_futures=True)
    gate.touch()
    consumer.join(WAIT)
    assert not consumer.is_alive()
    assert len(ended) == 1 and isinstance(ended[0], cf.CancelledError)
    assert got == list(range(len(got))) and len(got) < 30


def test_cancel_pending_futures(make_pool, tmp_path):
    pool = make_pool(1)
    gate = tmp_path / "gate"
    first = pool.submit(ft.wait_for_file, str(gate), "first")
    assert wait_for(first.running), "the first task is not running"
    fs = [pool.submit(ft.square, i) for i in range(10)]
    # The last ones are certainly still pending (stdlib and pipepool hand at most a few
    # futures ahead to the workers): they cancel, and never run.
    assert all(f.cancel() for f in fs[5:])
    assert all(f.cancelled() and f.done() for f in fs[5:])
    assert not first.cancel()  # running futures cannot be cancelled
    gate.touch()
    assert first.result(timeout=WAIT) == "first"
    assert [f.result(timeout=WAIT) for f in fs[:5]] == [0, 1, 4, 9, 16]
    for f in fs[5:]:
        with pytest.raises(cf.CancelledError):
            f.result(timeout=0)


def test_shutdown_wait_finishes_all_work_then_refuses_more(make_pool):
    pool = make_pool()
    fs = [pool.submit(ft.sleep_return, 0.1, i) for i in range(6)]
    pool.shutdown(wait=True)
    assert all(f.done() for f in fs)
    assert [f.result() for f in fs] == list(range(6))
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(ft.square, 2)
    with pytest.raises(RuntimeError):
        pool.map(ft.square, range(3))
    pool.shutdown()  # twice is fine


def test_context_manager_shuts_down_waiting(make_pool):
    with make_pool() as pool:
        fs = [pool.submit(ft.sleep_return, 0.1, i) for i in range(4)]
    assert [f.result(timeout=0) for f in fs] == list(range(4))
    with pytest.raises(RuntimeError):
        pool.submit(ft.square, 2)


def test_shutdown_without_wait_returns_at_once_and_work_completes(make_pool):
    pool = make_pool()
    warm_up(pool)
    fs = [pool.submit(ft.sleep_return, 0.5, i) for i in range(3)]
    start = time.monotonic()
    pool.shutdown(wait=False)
    assert time.monotonic() - start < 0.3
    assert [f.result(timeout=WAIT) for f in fs] == [0, 1, 2]
    with pytest.raises(RuntimeError):
        pool.submit(ft.square, 2)


@pytest.mark.parametrize("wait", [True, False], ids=["wait", "nowait"])
def test_shutdown_cancel_futures_cancels_pending_only(make_pool, flavor, tmp_path, wait):
    pool = make_pool(1)
    gate = tmp_path / "gate"
    first = pool.submit(ft.wait_for_file, str(gate), "first")
    assert wait_for(first.running), "the first task is not running"
    fs = [pool.submit(ft.square, i) for i in range(20)]
    opener = threading.Timer(0.3, gate.touch)
    opener.start()
    try:
        pool.shutdown(wait=wait, cancel_futures=True)
        if not wait and flavor == "stdlib":  # its manager thread cancels them, soon after
            assert wait_for(lambda: all(f.cancelled() for f in fs[5:])), "no cancellation"
        # pipepool cancels them before shutdown() returns, waiting or not.
        assert all(f.cancelled() for f in fs[5:]), "pending futures were not cancelled"
        assert first.result(timeout=WAIT) == "first"
        if not wait:
            pool.shutdown(wait=True)
    finally:
        opener.join()
    for i, f in enumerate(fs):
        if not f.cancelled():  # the few handed to workers before the shutdown still ran
            assert f.result(timeout=WAIT) == i * i
    if flavor == "pipepool":
        # Its cancelled futures are also notified, so wait() does not hang on them (the
        # stdlib's stay CANCELLED without notifying waiters, and wait() blocks).
        assert not cf.wait(fs, timeout=5).not_done


def test_as_completed_and_wait(make_pool):
    pool = make_pool()
    warm_up(pool)
    fs = [pool.submit(ft.sleep_return, d) for d in (0.8, 0.0, 0.3)]
    order = [f.result() for f in cf.as_completed(fs, timeout=WAIT)]
    assert order == [0.0, 0.3, 0.8]

    fast, slow = pool.submit(ft.sleep_return, 0.0), pool.submit(ft.sleep_return, 1.0)
    done, not_done = cf.wait([fast, slow], timeout=WAIT, return_when=cf.FIRST_COMPLETED)
    assert fast in done and slow in not_done
    failing = pool.submit(ft.fail, 1)
    done, _ = cf.wait([slow, failing], timeout=WAIT, return_when=cf.FIRST_EXCEPTION)
    assert failing in done
    done, not_done = cf.wait([slow], timeout=WAIT)
    assert done == {slow} and not not_done


def test_asyncio_run_in_executor(make_pool):
    pool = make_pool()

    async def main():
        loop = asyncio.get_running_loop()
        return await asyncio.gather(*(loop.run_in_executor(pool, ft.square, i) for i in range(10)))

    assert asyncio.run(main()) == [i * i for i in range(10)]


def test_done_callbacks_run_and_may_submit_more(make_pool):
    pool = make_pool()
    seen: list[int] = []
    chained: list[cf.Future] = []
    done = threading.Event()

    def callback(f: cf.Future) -> None:
        seen.append(f.result())
        chained.append(pool.submit(ft.square, f.result()))  # re-entrant submit: no deadlock
        done.set()

    pool.submit(ft.square, 3).add_done_callback(callback)
    assert done.wait(WAIT)
    assert seen == [9]
    assert chained[0].result(timeout=WAIT) == 81


def test_submit_from_many_threads(make_pool):
    pool = make_pool()
    results: dict[int, list[int]] = {}

    def client(n: int) -> None:
        fs = [pool.submit(ft.add, n * 1000, i) for i in range(100)]
        results[n] = [f.result(timeout=WAIT) for f in fs]

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert results == {n: [n * 1000 + i for i in range(100)] for n in range(4)}


def test_initializer_runs_in_each_worker(make_pool):
    pool = make_pool(initializer=ft.init_set, initargs=("ready",))
    assert set(pool.map(ft.get_initialized, range(8), timeout=WAIT)) == {"ready"}


def test_initializer_failure_breaks_the_pool(make_pool):
    pool = make_pool(initializer=ft.init_fail)
    f = pool.submit(ft.square, 2)
    with pytest.raises(BrokenProcessPool):
        f.result(timeout=WAIT)
    with pytest.raises(BrokenProcessPool):
        pool.submit(ft.square, 3)


def test_max_tasks_per_child_recycles_workers(make_pool, flavor, start_method):
    if flavor == "stdlib" and start_method == "fork":
        with pytest.raises(ValueError, match="fork"):
            make_pool(max_tasks_per_child=1)
        return  # the stdlib refuses this combination; pipepool allows it
    # Above 1 the stdlib deadlocks on Python 3.11 to 3.13 (CPython gh-115634).
    for limit in [1] if flavor == "stdlib" else [1, 3]:
        pool = make_pool(max_tasks_per_child=limit)
        pids = [f.result(timeout=WAIT) for f in [pool.submit(ft.pid_of) for _ in range(9)]]
        served = collections.Counter(pids)
        assert max(served.values()) <= limit, served
        assert len(served) >= 9 // limit


def test_constructor_and_map_argument_checks(flavor):
    cls = POOLS[flavor]
    with pytest.raises(ValueError):
        cls(0)
    with pytest.raises(TypeError):
        cls(1, initializer=5)
    with pytest.raises(ValueError):
        cls(1, max_tasks_per_child=0)
    with pytest.raises(TypeError):
        cls(1, max_tasks_per_child="3")


def test_map_buffersize_reads_input_lazily(make_pool, flavor):
    if flavor == "stdlib" and sys.version_info < (3, 14):
        pytest.skip("the stdlib has buffersize from Python 3.14")
    pool = make_pool()
    taken: list[int] = []

    def source():
        for i in itertools.count():
            taken.append(i)
            yield i

    results = pool.map(ft.square, source(), buffersize=4, timeout=WAIT)
    assert [next(results) for _ in range(10)] == [i * i for i in range(10)]
    assert len(taken) <= 10 + 4
    results.close()  # stops reading; the buffered futures are cancelled or finish

    taken.clear()
    chunked = pool.map(ft.square, source(), chunksize=3, buffersize=2, timeout=WAIT)
    assert [next(chunked) for _ in range(9)] == [i * i for i in range(9)]
    assert len(taken) <= (3 + 2 + 1) * 3
    chunked.close()
    with pytest.raises(ValueError):
        pool.map(ft.square, range(3), buffersize=0)
    with pytest.raises(TypeError):
        pool.map(ft.square, range(3), buffersize=2.0)


@pytest.mark.parametrize("chunksize, buffersize", [(1, None), (3, None), (1, 2), (4, 2)], ids=str)
def test_map_frees_each_result_once_yielded(make_pool, flavor, chunksize, buffersize):
    """A result the consumer has dropped is garbage at once: a long map of big results
    holds one at a time, not all of them (issue 14)."""
    if buffersize is not None and flavor == "stdlib" and sys.version_info < (3, 14):
        pytest.skip("the stdlib has buffersize from Python 3.14")
    pool = make_pool()
    kwargs = {} if buffersize is None else {"buffersize": buffersize}
    refs = []
    for obj in pool.map(ft.make_payload, range(10), timeout=WAIT, chunksize=chunksize, **kwargs):
        assert obj.n == len(refs)
        refs.append(weakref.ref(obj))
        del obj
        gc.collect()
        alive_now = [r().n for r in refs if r() is not None]
        assert not alive_now, f"results still referenced after they were yielded: {alive_now}"
    assert len(refs) == 10


# == pickling failures: one future each ======================================================

# row id: (how to submit it, shared with the stdlib, pipepool's error type, its .part)
PICKLING_CASES = {
    "lambda": (lambda pool: pool.submit(lambda: 1), True, TaskPicklingError, "function"),
    "unpicklable argument": (
        lambda pool: pool.submit(ft.identity, threading.Lock()),
        True,
        TaskPicklingError,
        "arguments",
    ),
    "unpicklable result": (
        lambda pool: pool.submit(ft.return_lock),
        True,
        TaskPicklingError,
        "result",
    ),
    # The stdlib breaks the whole pool on the rows below: pipepool's rows only.
    "exception that cannot be unpickled": (
        lambda pool: pool.submit(ft.raise_two_arg_error),
        False,
        TaskUnpicklingError,
        "exception",
    ),
    "result that cannot be unpickled": (
        lambda pool: pool.submit(ft.return_unloadable),
        False,
        TaskUnpicklingError,
        "result",
    ),
    "argument the worker cannot unpickle": (
        lambda pool: pool.submit(ft.identity, ft.Unloadable()),
        False,
        TaskUnpicklingError,
        "task",
    ),
}


@pytest.mark.parametrize(
    ("flavor", "case"),
    [
        (flavor, case)
        for case, (_, shared, _, _) in PICKLING_CASES.items()
        for flavor in POOLS
        if shared or flavor == "pipepool"
    ],
)
def test_pickling_failures_fail_only_their_own_future(make_pool, flavor, case):
    """The bad future fails (pipepool: with its typed error naming the part), and the
    100 submitted right behind it all succeed. One row per case, so one failure hides
    none of the others."""
    submit_bad, _, error_type, part = PICKLING_CASES[case]
    pool = make_pool()
    bad = submit_bad(pool)
    following = [pool.submit(ft.square, i) for i in range(100)]
    error = bad.exception(timeout=WAIT)
    assert error is not None, "the future did not fail"
    if flavor == "pipepool":
        assert isinstance(error, error_type), repr(error)
        assert error.part == part, f"part {error.part!r}, not {part!r}"
    results = [f.result(timeout=WAIT) for f in following]
    assert results == [i * i for i in range(100)], "a following task failed"


# == pipepool only: its lighter Future ======================================================


def test_pool_future_sets_every_attribute_of_a_stdlib_future(make_pipepool):
    """PoolFuture skips Future.__init__ (whose Condition it shares with its pool): a
    Python that adds a field there must fail here, not deep in wait() or asyncio."""
    pool = make_pipepool(1)
    f = pool.submit(ft.square, 2)
    missing = [name for name in vars(cf.Future()) if not hasattr(f, name)]
    assert not missing, f"PoolFuture does not set {missing}"
    assert f.result(timeout=WAIT) == 4


def test_a_done_callback_may_wait_for_another_future(make_pipepool):
    """A callback runs in the thread that drives the pool's loop; waiting there for
    another future drives the loop in turn (the stdlib's manager thread would hang)."""
    pool = make_pipepool(2)
    got: list[int] = []
    done = threading.Event()

    def callback(f: cf.Future) -> None:
        got.append(pool.submit(ft.square, f.result()).result(timeout=WAIT))
        done.set()

    pool.submit(ft.square, 3).add_done_callback(callback)
    assert done.wait(WAIT)
    assert got == [81]


def test_wait_and_as_completed_over_several_pools(make_pipepool):
    """wait() and as_completed() drive the pool of the first future they see; futures of
    another pool and of a thread pool still wake them when done."""
    a, b = make_pipepool(1), make_pipepool(1)
    with cf.ThreadPoolExecutor(1) as threads:
        fs = [
            a.submit(ft.sleep_return, 0.2, "a"),
            b.submit(ft.sleep_return, 0.1, "b"),
            threads.submit(ft.sleep_return, 0.3, "t"),
        ]
        done, not_done = cf.wait(fs, timeout=WAIT)
        assert not not_done and {f.result() for f in done} == {"a", "b", "t"}
        fs = [
            b.submit(ft.sleep_return, 0.2, "b"),
            threads.submit(ft.sleep_return, 0.1, "t"),
            a.submit(ft.sleep_return, 0.3, "a"),
            a.submit(ft.fail, 7),
        ]
        got = {f.exception() is None and f.result() for f in cf.as_completed(fs, timeout=WAIT)}
        assert got == {"a", "b", "t", False}
        first = [b.submit(ft.sleep_return, 30), a.submit(ft.square, 3)]
        done, not_done = cf.wait(first, timeout=WAIT, return_when=cf.FIRST_COMPLETED)
        assert done == {first[1]} and not_done == {first[0]}
        assert b.kill(first[0])


# == pipepool only: dead workers ==============================================================


def test_sigkill_one_worker_among_1000_tasks(make_pipepool, tmp_path):
    pool = make_pipepool(2)
    marker = tmp_path / "victim.pid"
    victim = pool.submit(ft.announce_and_sleep, str(marker), 60)
    others = [pool.submit(ft.slow_pid, 0.002) for _ in range(999)]
    pid = read_pid(marker)
    os.kill(pid, signal.SIGKILL)
    assert sum(not f.done() for f in others) >= 500, "the tasks were not queued at the kill"

    with pytest.raises(WorkerLostError) as info:
        victim.result(timeout=WAIT)
    lost = info.value
    assert isinstance(lost, BrokenProcessPool)
    assert (lost.pid, lost.exitcode, lost.signal) == (pid, -signal.SIGKILL, "SIGKILL")
    assert "SIGKILL" in str(lost)

    served = [f.result(timeout=WAIT) for f in others]  # every other future succeeds
    assert pid not in served
    assert len(set(served)) >= 2, "the replacement worker never served a task"
    # The pool is whole again: two live workers, the killed one not among them.
    assert wait_for(lambda: len(pool.worker_pids()) == 2), "not two live workers"
    assert pid not in pool.worker_pids()
    assert all(alive(p) for p in pool.worker_pids())
    assert pool.submit(ft.square, 5).result(timeout=WAIT) == 25


# (row id, task, args, expected exit code)
DEATHS = [
    ("SIGKILL", ft.sigkill_self, (), -signal.SIGKILL),
    ("segfault", ft.die_by_segfault, (), -signal.SIGSEGV),
    ("os._exit(3)", ft.die_by_exit, (3,), 3),
    ("SIGTERM", ft.die_by_signal, (signal.SIGTERM,), -signal.SIGTERM),
]


def test_a_dying_worker_fails_only_its_own_future(make_pipepool):
    pool = make_pipepool(2)
    for name, task, args, exitcode in DEATHS:
        doomed = pool.submit(task, *args)
        following = [pool.submit(ft.square, i) for i in range(20)]
        error = doomed.exception(timeout=WAIT)
        assert isinstance(error, WorkerLostError), f"{name}: {error!r}"
        assert error.exitcode == exitcode, f"{name}: exit code {error.exitcode}"
        assert [f.result(timeout=WAIT) for f in following] == [i * i for i in range(20)], name


# == pipepool only: per-task timeout and kill =================================================


def test_per_task_timeout_kills_only_that_task(make_pipepool):
    pool = make_pipepool(2)
    warm_up(pool)
    bounded = pool.with_options(timeout=0.3)
    start = time.monotonic()
    f = bounded.submit(ft.sleep_return, 30)
    quick = bounded.submit(ft.square, 4)
    with pytest.raises(TaskTimeoutError) as info:
        f.result(timeout=WAIT)
    assert isinstance(info.value, TimeoutError)
    assert time.monotonic() - start < 5
    assert quick.result(timeout=WAIT) == 16
    results = bounded.map(ft.sleep_return, [0.0, 30], timeout=WAIT)
    assert next(results) == 0.0
    with pytest.raises(TaskTimeoutError):
        next(results)
    assert pool.submit(ft.square, 6).result(timeout=WAIT) == 36
    with pytest.raises(ValueError):
        pool.with_options(timeout=0)


def test_kill_a_running_task(make_pipepool, tmp_path):
    pool = make_pipepool(2)
    marker = tmp_path / "victim.pid"
    victim = pool.submit(ft.announce_and_sleep, str(marker), 60)
    pid = read_pid(marker)
    assert pool.kill(victim) is True
    with pytest.raises(TaskKilledError):
        victim.result(timeout=WAIT)
    assert wait_for(lambda: not alive(pid)), "the killed worker did not exit"
    assert pool.submit(ft.square, 3).result(timeout=WAIT) == 9
    assert pool.kill(victim) is False  # already finished
    with pytest.raises(ValueError):
        pool.kill(cf.Future())


def test_kill_before_start_and_kill_pending(make_pipepool, tmp_path):
    pool = make_pipepool(1)
    gate = tmp_path / "gate"
    marker = tmp_path / "never.pid"
    first = pool.submit(ft.wait_for_file, str(gate), "first")
    handed = pool.submit(ft.announce_and_sleep, str(marker), 60)  # queued behind first
    pending = [pool.submit(ft.square, i) for i in range(5)]
    assert wait_for(first.running), "the first task to start did not come"
    assert wait_for(lambda: handed in pool._driver.running), (
        "the second task to be handed over did not come"
    )
    assert not handed.running()  # handed over, not started: pending to its user
    assert pool.kill(handed) is True  # not started: cancelled, its worker kept
    assert pool.kill(pending[-1]) is True  # still pending: simply cancelled
    assert pending[-1].cancelled()
    with pytest.raises(cf.CancelledError):
        handed.result(timeout=WAIT)
    assert handed.cancelled()
    gate.touch()
    assert first.result(timeout=WAIT) == "first"
    assert [f.result(timeout=WAIT) for f in pending[:-1]] == [0, 1, 4, 9]
    assert not marker.exists(), "a task killed before it started ran anyway"


def warm_depth(pool) -> int:
    """Maps of tiny tasks until the adaptive depth has grown (tasks are then sent to the
    workers many at once, long before they start); returns the depth."""
    for _ in range(5):
        assert list(pool.map(ft.square, range(2000))) == [i * i for i in range(2000)]
    depth = pool._driver.executor.dispatch_depth
    assert depth > 8, "precondition: the adaptive depth grew"
    return depth


@pytest.fixture
def on_impl(impl, monkeypatch):
    """The pool's loop (and its workers') on this test's implementation."""
    monkeypatch.setenv("PIPEPOOL_IMPL", impl)


def test_warm_pool_shutdown_cancel_futures_revokes_what_was_sent_ahead(make_pipepool, on_impl):
    """Issue 23: after a few maps of tiny tasks, 50 sleep(0.1) go to the workers at once;
    shutdown(cancel_futures=True) must cancel every one not started (it cancelled none:
    handed over counted as running), and the others finish."""
    pool = make_pipepool(2)
    warm_depth(pool)
    fs = [pool.submit(time.sleep, 0.1) for _ in range(50)]
    assert wait_for(fs[0].running), "the first sleep to start did not come"
    # All 50 handed over (to the workers, or taken back from them by the revoke trap into
    # the LocalExecutor's queue), none left in the pool's own queue: before, they all
    # counted as running and none could be cancelled.
    stats = pool._driver.executor.stats()
    assert stats["tasks_running"] + stats["tasks_queued"] == 50, "precondition: handed over"
    pool.shutdown(cancel_futures=True)
    cancelled = [f for f in fs if f.cancelled()]
    assert len(cancelled) >= 40
    others = [f for f in fs if not f.cancelled()]
    assert others and all(f.done() and f.exception() is None for f in others)


def test_a_future_handed_over_is_pending_until_it_starts_and_cancels(
    make_pipepool, on_impl, tmp_path
):
    """A future handed over behind a running one (sent to its worker, or taken back
    from it) is not running(); cancel() is True and it never runs; the running one
    cannot be cancelled."""
    pool = make_pipepool(1)
    warm_depth(pool)
    gate = tmp_path / "gate"
    first = pool.submit(ft.wait_for_file, str(gate), "first")
    behind = [pool.submit(ft.sleep_then_touch, str(tmp_path / f"ran{i}"), 0) for i in range(3)]
    assert wait_for(first.running), "the first task to start did not come"
    assert wait_for(lambda: all(f in pool._driver.running for f in behind)), (
        "the others were not handed over"
    )
    assert not any(f.running() or f.done() for f in behind)
    assert behind[1].cancel() is True
    assert behind[1].cancelled() and behind[1].done() and not behind[1].running()
    assert behind[1].cancel() is True  # again: still cancelled
    assert first.cancel() is False and first.running()
    gate.touch()
    assert first.result(timeout=WAIT) == "first"
    behind[0].result(timeout=WAIT), behind[2].result(timeout=WAIT)
    with pytest.raises(cf.CancelledError):
        behind[1].result(timeout=0)
    assert not (tmp_path / "ran1").exists(), "a cancelled future's task ran"
    assert (tmp_path / "ran0").exists() and (tmp_path / "ran2").exists()


def test_shutdown_of_an_idle_pool_is_prompt(make_pipepool):
    # Regression: forked workers ran the parent's exit hook, which took a pool lock the
    # submitting thread held at fork time: every fork-pool shutdown waited STOP_GRACE.
    pool = make_pipepool(2)
    assert list(pool.map(ft.square, range(20))) == [i * i for i in range(20)]
    pids = pool.worker_pids()
    start = time.monotonic()
    pool.shutdown(wait=True)
    assert time.monotonic() - start < 2.0
    assert not any(alive(p) for p in pids)


def test_terminate_workers_stops_running_tasks(make_pipepool, tmp_path):
    pool = make_pipepool(2)
    marker = tmp_path / "victim.pid"
    running = pool.submit(ft.announce_and_sleep, str(marker), 60)
    pid = read_pid(marker)
    rest = [pool.submit(ft.sleep_return, 60) for _ in range(6)]
    start = time.monotonic()
    pool.terminate_workers()
    assert time.monotonic() - start < 5
    with pytest.raises(TaskKilledError):
        running.result(timeout=0)
    assert all(f.done() for f in rest)
    assert not alive(pid)


def test_shutdown_with_nothing_left_stops_without_waiting_out_a_poll(make_pipepool, monkeypatch):
    """shutdown(wait=True) of a pool with nothing left to run stops it at once: its
    driver used to sleep one poll first (LocalExecutor's REAP_INTERVAL, 250 ms), as
    nothing told the round that the shutdown was due. Counted on the pure loop, whose
    wait() a test can wrap (the driver is the same for both)."""
    monkeypatch.setenv("PIPEPOOL_IMPL", "python")
    pool = make_pipepool(2)
    assert pool.submit(ft.square, 3).result(timeout=WAIT) == 9
    driver = pool._driver
    loop = driver.executor._loop
    waits_after_shutdown = []
    real_wait = loop.wait

    def wait(timeout=None):
        if driver.shutdown:
            waits_after_shutdown.append(timeout)
        return real_wait(timeout)

    monkeypatch.setattr(loop, "wait", wait)
    pool.shutdown(wait=True)
    assert waits_after_shutdown == []


@pytest.mark.parametrize("in_cycle", [False, True], ids=["refcount", "cycle"])
def test_garbage_collected_pool_stops_its_workers(start_method, no_leaks, in_cycle):
    pool = pipepool.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(start_method))
    if in_cycle:
        pool.myself = pool  # only the cycle collector can free it
    f = pool.submit(ft.square, 3)
    thread = pool._driver.thread
    del pool
    gc.collect()
    assert f.result(timeout=WAIT) == 9
    thread.join(WAIT)
    assert not thread.is_alive()


# == pipepool only: Ctrl-C, and no worker outliving the interpreter ==========================

SCRIPT = textwrap.dedent("""
    import multiprocessing, sys, threading, time
    import futures_tasks as ft
    from pipepool import ProcessPoolExecutor

    def announce_waiting(path):
        # Write ``path`` once the main thread waits inside Future.result(): on a
        # Condition, or driving the pool's loop itself (its wait between two rounds,
        # LocalExecutor._idle).
        main = threading.main_thread().ident
        while True:
            frame, names = sys._current_frames().get(main), set()
            while frame is not None:
                names.add(frame.f_code.co_name)
                frame = frame.f_back
            if "result" in names and names & {"wait", "_idle"}:
                open(path, "w").close()
                return
            time.sleep(0.001)

    if __name__ == "__main__":
        method, mode, tmp = sys.argv[1:4]
        pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(method))
        if mode == "exit":  # fall off the end: the submitted work still completes
            pool.submit(ft.sleep_then_touch, tmp + "/done", 0.3)
            pool.submit(ft.announce_and_sleep, tmp + "/w0", 0.5)
            sys.exit(0)
        if mode == "exit-crash":  # and survives losing a worker meanwhile
            pool.submit(ft.sleep_then_sigkill, 0.2)
            pool.submit(ft.announce_and_sleep, tmp + "/w0", 0.5)
            for i in range(6):
                pool.submit(ft.sleep_then_touch, f"{tmp}/done{i}", 0.1)
            sys.exit(0)
        fs = [pool.submit(ft.announce_and_sleep, f"{tmp}/w{i}", 60) for i in range(2)]
        fs += [pool.submit(ft.sleep_return, 60) for _ in range(10)]
        threading.Thread(target=announce_waiting, args=(tmp + "/waiting",), daemon=True).start()
        if mode == "with":
            with pool:
                fs[0].result()
        else:
            fs[0].result()
""")


def run_script(tmp_path: Path, start_method: str, mode: str) -> subprocess.Popen:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC_DIR), str(TESTS_DIR)]))
    return subprocess.Popen(
        [sys.executable, str(script), start_method, mode, str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("mode", ["result", "with"])
def test_ctrl_c_interrupts_promptly_and_stops_the_workers(tmp_path, start_method, mode):
    proc = run_script(tmp_path, start_method, mode)
    try:
        pids = [read_pid(tmp_path / f"w{i}") for i in range(2)]
        waiting = tmp_path / "waiting"
        assert wait_for(waiting.exists, WAIT), "the main thread did not wait in result()"
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=WAIT)
        assert time.monotonic() - start < 5, "Ctrl-C took too long"
    finally:
        proc.kill()
        proc.wait()
    assert "KeyboardInterrupt" in err, err
    assert wait_for(lambda: not any(alive(p) for p in pids), 5), "the workers did not exit"


def test_workers_exit_when_the_parent_is_killed(tmp_path, start_method):
    proc = run_script(tmp_path, start_method, "result")
    try:
        pids = [read_pid(tmp_path / f"w{i}") for i in range(2)]
        proc.kill()
        proc.wait(WAIT)
    finally:
        proc.kill()
        proc.communicate()
    assert wait_for(lambda: not any(alive(p) for p in pids), 5), "orphaned workers live on"


@pytest.mark.parametrize("mode", ["exit", "exit-crash"])
def test_interpreter_exit_finishes_submitted_work(tmp_path, start_method, mode):
    # "exit-crash" loses a worker while the interpreter shuts down, when Python 3.12
    # refuses to fork a replacement: the work must still complete on the others.
    proc = run_script(tmp_path, start_method, mode)
    try:
        _, err = proc.communicate(timeout=WAIT)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    done = ["done"] if mode == "exit" else [f"done{i}" for i in range(6)]
    missing = [name for name in done if not (tmp_path / name).exists()]
    assert not missing, f"submitted work did not complete at exit: {missing}\n{err}"
    pid = read_pid(tmp_path / "w0", 0)
    assert wait_for(lambda: not alive(pid), 5), "the worker did not exit"
