"""pipepool.ProcessPoolExecutor where it does better than the concurrent.futures
contract (test_futures.py): a lighter Future; a dead worker costs one future; per-task
timeout and kill (Ctrl-C and exit are test_futures.py's). The fixtures are this folder's
conftest.py's. Real processes throughout; every test is bounded by pytest-timeout.
"""

from __future__ import annotations

import concurrent.futures as cf
import gc
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

import futures_tasks as ft
import pipepool
import proc_table
from helpers import FUTURE_WAIT, read_pid, wait_for, warm_up
from pipepool import TaskKilledError, TaskTimeoutError, WorkerLostError

WAIT = FUTURE_WAIT  # s: upper bound on any single result in these tests; a hang fails
# The fork server and resource tracker up before any leak check (conftest.py).
pytestmark = pytest.mark.usefixtures("_shared_helpers_running")


alive = proc_table.alive  # running, not a zombie: /proc, or ps on macOS


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
    driver = pool._driver
    del pool
    gc.collect()
    assert f.result(timeout=WAIT) == 9
    driver.join_thread(WAIT)
    assert driver.thread is not None and not driver.thread.is_alive()


def test_map_of_something_not_callable_fails_each_call_as_submit_does(make_pipepool):
    """``map(chunksize=1)`` submits in bursts of 256 on a pool already started, and a
    function that cannot be called still fails its calls in the parent, with submit's
    message, not in a worker."""
    pool = make_pipepool()
    assert str(pool.submit(5, 0).exception(timeout=WAIT)) == "5 is not callable"
    with pytest.raises(TypeError, match=r"^5 is not callable$"):
        list(pool.map(5, range(300), timeout=WAIT))


def test_a_long_map_makes_its_records_as_the_pool_has_room(make_pipepool, tmp_path):
    """``map(chunksize=1)`` of many calls keeps about the pool's room of records alive,
    not one per call (docs/design.md, "Map calls"), and still runs and hands out every
    call, in order."""
    from pipepool.futures._map import MapItem

    pool = make_pipepool()
    gate = tmp_path / "gate"
    results = pool.map(ft.wait_for_file, [str(gate)] * 3000, range(3000), timeout=WAIT)
    made = sum(type(o) is MapItem and o.driver is pool._driver for o in gc.get_objects())
    assert 0 < made <= pool._driver._room() < 3000
    gate.touch()
    assert list(results) == list(range(3000))


def test_closing_a_long_map_drops_the_calls_not_made(make_pipepool, tmp_path):
    """The calls of a map its consumer closed never run, as cancelled pending items:
    the calls not yet made into records are dropped, not run by shutdown(wait=True)."""
    pool = make_pipepool()
    marks = tmp_path / "marks"
    marks.mkdir()
    paths = [str(marks / f"mark-{i}") for i in range(3000)]
    results = pool.map(ft.sleep_then_touch, paths, [0.005] * 3000, timeout=WAIT)
    next(results)
    results.close()
    pool.shutdown(wait=True)
    assert 0 < len(os.listdir(marks)) < 1000  # the room at p=2 is at most 130


def test_a_map_iterator_collected_inside_the_feed_breaks_nothing(
    make_pipepool, tmp_path, monkeypatch
):
    """A map's iterator dropped in a reference cycle is closed by whichever collection
    finds it, and that can be one inside the pool's feed, while it makes that map's own
    records: the close must not change the queue under the feed, nor break the pool
    (docs/design.md, "Map calls")."""
    from pipepool.futures import _map

    pool = make_pipepool()
    gate = tmp_path / "gate"
    paths = [str(tmp_path)] + [str(gate)] * 999  # the first call returns at once
    collected: list[int] = []

    class CollectingItem(_map.MapItem):
        __slots__ = ()

        def __init__(self, *args):
            if not collected:  # finds the cycle below, and closes its iterator
                collected.append(gc.collect())
            super().__init__(*args)

    gc.disable()  # the cycle is collected in the feed, not before
    try:
        cycle: list = [pool.map(ft.wait_for_file, paths, range(1000), timeout=WAIT)]
        cycle.append(cycle)
        assert next(cycle[0]) == 0
        del cycle
        monkeypatch.setattr(_map, "MapItem", CollectingItem)
        gate.touch()  # the calls sent end, and the next feed makes more of that map's
        assert pool.submit(ft.square, 3).result(timeout=WAIT) == 9
    finally:
        gc.enable()
    assert collected and collected[0] > 0


def test_a_driver_thread_that_cannot_start_leaves_its_helper_driving(monkeypatch):
    # The first submit starts the driver thread from a helper thread, without waiting
    # for it (Driver.launch). If it cannot start, the helper drives: a future nobody
    # waits for still ends (its callback runs), and shutdown stops the workers.
    real_start = threading.Thread.start

    def start(self):
        if self.name.startswith("pipepool-driver"):
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    pool = pipepool.ProcessPoolExecutor(2)
    called = threading.Event()
    pool.submit(ft.square, 2).add_done_callback(lambda f: called.set())
    assert called.wait(WAIT), "no thread drove a future nobody waited for"
    assert pool.submit(ft.square, 3).result(timeout=WAIT) == 9
    driver = pool._driver
    assert isinstance(driver.launch_error, RuntimeError)
    pids = pool.worker_pids()
    pool.shutdown(wait=True)
    assert driver.stopped.is_set()
    for pid in pids:
        assert wait_for(lambda pid=pid: not proc_table.alive(pid), WAIT), f"worker {pid} left"


# == an idle pool waits without polling =====================================================

WAKEUPS_BOUND = 60  # wake-ups of the whole parent allowed for the test below: ~10 seen
# (about two per outcome, for the caller and the driver thread), against 180-190 before
# the driver stopped looking every LINGER (1 ms) while a caller waited on a long task;
# the stdlib's parent makes about as many as pipepool's now.


def pidfds_here() -> bool:
    """Whether this kernel gives pidfds (Linux 5.3+): a pool then watches its workers'
    exits in its poll, without the periodic reap's look (executor._lifecycle.exit_fd)."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


def voluntary_switches() -> int:
    """Times any thread of this process went to sleep (each wake-up is one)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def test_a_pool_waiting_on_long_tasks_wakes_for_their_outcomes_only(make_pipepool):
    """While a caller waits in result() on tasks that sleep and nothing arrives, the
    parent sleeps: it wakes for the outcomes, not every millisecond (the driver thread
    used to look every LINGER while a caller drove) nor every REAP_INTERVAL (the reap's
    periodic look, now only where a worker has no pidfd). Counted in the kernel's count
    of voluntary context switches of every thread (getrusage), so no clock decides it."""
    if voluntary_switches() == 0:  # pragma: no cover  (every POSIX kernel counts them)
        pytest.skip("this platform does not count voluntary context switches")
    if not pidfds_here():  # pragma: no cover
        pytest.skip("no pidfds here (macOS, Linux < 5.3): the periodic reap wakes the pool")
    pool = make_pipepool(2)
    warm_up(pool, 2)
    before = voluntary_switches()
    futures = [pool.submit(ft.sleep_return, 0.5, i) for i in range(4)]
    assert [f.result(timeout=WAIT) for f in futures] == [0, 1, 2, 3]
    woken = voluntary_switches() - before
    assert woken <= WAKEUPS_BOUND, f"{woken} wake-ups for 4 tasks of 0.5 s on 2 workers"
