"""One cancellation rule on the futures face (issue 30, item 5): a future whose task had
not started when the pool ended it is CANCELLED, whatever ended it (``cancel()``,
``shutdown(cancel_futures=True)``, ``terminate_workers()``), handed to the workers or
not; a started one fails with the error that stopped it. Both loops.
"""

from __future__ import annotations

import concurrent.futures as cf

import pytest

import futures_tasks as ft
from helpers import FUTURE_WAIT, wait_for
from pipepool import TaskKilledError

WAIT = FUTURE_WAIT
pytestmark = pytest.mark.usefixtures("_shared_helpers_running")


@pytest.fixture
def on_impl(impl, monkeypatch):
    """The pool's loop (and its workers') on this test's implementation."""
    monkeypatch.setenv("PIPEPOOL_IMPL", impl)


def warm_depth(pool) -> None:
    """Maps of tiny tasks until the adaptive depth has grown: futures are then handed to
    the workers many at once, long before they start."""
    for _ in range(5):
        assert list(pool.map(ft.square, range(2000))) == [i * i for i in range(2000)]
    assert pool._driver.executor.dispatch_depth > 8, "precondition: the depth grew"


@pytest.mark.timeout(120)
def test_terminate_workers_cancels_every_future_not_started(make_pipepool, on_impl, tmp_path):
    """A warm pool of one worker: one future runs, ten are handed over behind it (sent
    to the worker, or taken back into the LocalExecutor's queue by the revoke trap),
    ten more wait in the pool. terminate_workers(): the running one fails with
    TaskKilledError, all twenty others are cancelled (the handed-over ones failed with
    TaskKilledError before), and none of them ran."""
    pool = make_pipepool(1)
    warm_depth(pool)
    gate = tmp_path / "gate"
    first = pool.submit(ft.wait_for_file, str(gate), "first")
    behind = [pool.submit(ft.sleep_then_touch, str(tmp_path / f"ran{i}"), 0) for i in range(20)]
    assert wait_for(first.running), "the first task to start did not come"
    handed = [f for f in behind if f in pool._driver.running]
    assert len(handed) >= 5, "precondition: futures handed over behind the running one"
    pool.terminate_workers()
    with pytest.raises(TaskKilledError):
        first.result(timeout=0)
    not_cancelled = [(i, f.exception(0)) for i, f in enumerate(behind) if not f.cancelled()]
    assert not not_cancelled, not_cancelled
    assert not list(tmp_path.glob("ran*")), "a cancelled future's task ran"
    for f in handed:
        with pytest.raises(cf.CancelledError):
            f.result(timeout=0)
