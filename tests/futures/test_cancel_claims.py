"""``Future.cancel()`` on a future handed over to a worker and not started (issue 30,
item 5): with the compiled loop the parent claims the task in shared memory and answers
at once, whatever the worker does (docs/design.md, "Cancel claims"); with the pure loop
it asks the worker (CANCEL) and waits for the answer. Either way True means the task
never runs and False that it started (or runs in its turn after a cancel withdrawn):
the outcomes agree, only how soon they come differs.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import random
import signal

import pytest

import futures_tasks as ft
import tasks
from helpers import FUTURE_WAIT, runs, wait_for
from pipepool import WorkerLostError

pytestmark = pytest.mark.usefixtures("_shared_helpers_running")


@pytest.fixture
def on_impl(impl, monkeypatch):
    """The pool's loop (and its workers') on this test's implementation."""
    monkeypatch.setenv("PIPEPOOL_IMPL", impl)
    return impl


def warm_depth(pool) -> None:
    """Maps of tiny tasks until the adaptive depth has grown, so that futures are sent to
    a worker many at once, long before they start; and the tasks module imported there."""
    pool.submit(tasks.echo, 0).result(timeout=FUTURE_WAIT)
    for _ in range(5):
        assert list(pool.map(ft.square, range(2000))) == [i * i for i in range(2000)]
    assert pool._driver.executor.dispatch_depth > 8, "precondition: the depth grew"


def count_asks(pool) -> list:
    """The calls of the pool's ``_send_cancels`` (a CANCEL, or a REVOKE, for a cancel():
    the parent asking the worker) from here on, each as the tasks it names."""
    ex = pool._driver.executor
    asks: list = []
    send = ex._send_cancels

    def counting(w, doomed):
        asks.append([t.key for t in doomed])
        return send(w, doomed)

    ex._send_cancels = counting
    return asks


def behind_a_gil_hog(pool, tmp_path, count: int):
    """One warm worker runs a task that holds its GIL (its watcher thread cannot answer
    anything); ``count`` futures were submitted behind it. Returns the hog's future,
    the futures behind it, the ones its worker holds, and the log of runs."""
    log = str(tmp_path / "runs")
    warm_depth(pool)
    hog = pool.submit(tasks.hog_gil, log, "hog", FUTURE_WAIT)
    behind = [pool.submit(tasks.record, log, f"t{i}") for i in range(count)]
    assert wait_for(lambda: tasks.hogging(log)), "the hog did not take the GIL"
    (worker,) = pool._driver.executor._workers.values()

    def held_now() -> list:
        return [f for f in behind if f.tid in worker.in_flight]

    # Awaited, not read once: on a loaded machine the pool may recall what it sent ahead
    # (a REVOKE its watcher answers before the hog takes the GIL) and send it again.
    assert wait_for(held_now), "precondition: futures sent to the worker behind the hog"
    held = held_now()
    return hog, behind, held, log


@pytest.mark.timeout(120)
def test_cancel_behind_a_task_holding_the_gil(make_pipepool, on_impl, tmp_path):
    """The worker's running task holds its GIL, so it can answer no frame. Compiled
    loop: cancel() of a future it holds returns True by a claim, without asking the
    worker (no CANCEL, nothing left waiting), and the task never runs. Pure loop: the
    cancel asks, waits CANCEL_WAIT for an answer that cannot come, and returns False;
    the future is not cancelled (it would run in its turn)."""
    pool = make_pipepool(1)
    hog, _, held, log = behind_a_gil_hog(pool, tmp_path, 6)
    asks = count_asks(pool)
    target = held[-1]
    cancelled = target.cancel()
    driver = pool._driver
    if on_impl == "cython":
        assert cancelled is True and target.cancelled()
        assert asks == [] and not driver.cancelling  # decided here, nothing asked
    else:
        assert cancelled is False and not target.cancelled()
        assert asks == [[target.tid]] and not driver.cancelling
    pool.terminate_workers()  # the hog fails; the rest never started: cancelled
    with pytest.raises(cf.CancelledError):
        target.result(timeout=FUTURE_WAIT)
    assert hog.exception(timeout=FUTURE_WAIT) is not None
    assert runs(log) == {"hog": 1}


@pytest.mark.timeout(120)
def test_a_claimed_future_stays_cancelled_when_its_worker_dies(
    make_pipepool, monkeypatch, tmp_path
):
    """Compiled loop: a future claimed behind a task that holds the GIL, then the worker
    SIGKILLed. The claimed one stays cancelled and never runs; the running one fails
    as lost; the others it held run on another worker, once each."""
    monkeypatch.setenv("PIPEPOOL_IMPL", "cython")
    pool = make_pipepool(1)
    hog, behind, held, log = behind_a_gil_hog(pool, tmp_path, 6)
    target = held[0]
    assert target.cancel() is True
    (worker,) = pool._driver.executor._workers.values()
    os.kill(worker.pid, signal.SIGKILL)
    assert isinstance(hog.exception(timeout=FUTURE_WAIT), WorkerLostError)
    others = {f"t{i}": f for i, f in enumerate(behind) if f is not target}
    assert {key: f.result(timeout=FUTURE_WAIT) for key, f in others.items()} == {
        key: key for key in others
    }
    assert target.cancelled()
    with pytest.raises(cf.CancelledError):
        target.result(timeout=0)
    assert runs(log) == {"hog": 1, **dict.fromkeys(others, 1)}


@pytest.mark.timeout(120)
def test_cancels_racing_a_busy_pool_each_started_or_cancelled_never_both(
    make_pipepool, on_impl, tmp_path
):
    """Two warm workers run 300 short tasks sent many ahead; cancel() hits random ones
    as they go. Each future whose cancel() said True never ran and is cancelled; each
    one that said False, and each never cancelled, ran exactly once and has its result.
    Both loops: the same outcomes, whichever way each cancel was decided."""
    log = str(tmp_path / "runs")
    pool = make_pipepool(2)
    warm_depth(pool)
    rng = random.Random(30)
    futures = [
        pool.submit(tasks.record, log, f"k{i}", rng.choice([0.0, 0.0, 0.0005, 0.002]))
        for i in range(300)
    ]
    said: dict[int, bool] = {}
    order = list(range(300))
    rng.shuffle(order)
    for n, i in enumerate(order[:150]):
        said[i] = futures[i].cancel()
        if n % 10 == 0:  # let the pool run on between cancels: the first one left ends
            next(f for f in futures if not f.cancelled()).exception(timeout=FUTURE_WAIT)
    cf.wait(futures, timeout=FUTURE_WAIT)
    assert all(f.done() for f in futures)
    ran = runs(log)
    assert max(ran.values(), default=1) == 1, "a task ran twice"
    for i, f in enumerate(futures):
        if said.get(i) is True:
            assert f.cancelled() and f"k{i}" not in ran, i
        else:
            assert not f.cancelled() and f.result(timeout=0) == f"k{i}" and f"k{i}" in ran, i
    assert len(ran) == 300 - sum(said.values())
    assert any(said.values()) and not all(said.values()), "precondition: some of each"
