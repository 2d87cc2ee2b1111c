"""Who holds a ProcessPoolExecutor's token (``futures/_driver.py``): the driver thread
gives it up to a caller that asked for it, and the turn's news decide whether it waits."""

from __future__ import annotations

import threading

import pytest

import futures_tasks as ft
from pipepool._task import NO_KWARGS
from pipepool.executor import RecordExecutor
from pipepool.futures import ProcessPoolExecutor
from pipepool.futures._driver import BURST, Driver
from pipepool.futures._item import PoolFuture
from pipepool.futures._state import TERMINATING

WAIT = 30.0


@pytest.mark.timeout(120)
def test_the_driver_yields_the_token_to_a_caller_that_asked(tmp_path):
    """A caller asked for the token (it waited while the driver held it), then its
    future was settled by the driver's own turn and it stopped waiting: the driver still
    gives the token up at the end of that turn, instead of settling every later future
    for it one by one while it wakes up for each (callers drive, the driver lingers)."""
    ex = RecordExecutor(1, start_method="fork")
    ex.start()
    d = Driver(ex, 2)
    gate = tmp_path / "gate"
    with d.lock:
        d.add(PoolFuture(d, 1, ft.wait_for_file, (str(gate),), {}, None))  # stays outstanding
    me = threading.get_ident()
    d.poller = d.driver_ident = me  # this thread acts as the driver thread
    d.asked = True
    ended: list[bool] = []
    worker = threading.Thread(target=lambda: ended.append(d._run_rounds()), daemon=True)
    worker.start()
    worker.join(WAIT)
    try:
        assert ended == [False], "the driver kept the token a caller had asked for"
        assert d.poller is None and not d.asked and d.running  # handed off, work still out
    finally:
        if worker.is_alive():
            d.stage = TERMINATING  # its next check stops it
            ex.wake()
            worker.join(WAIT)
        gate.touch()
        ex.terminate()


@pytest.mark.timeout(120)
def test_a_burst_of_submits_feeds_the_workers_from_the_submitting_thread():
    """Once BURST records wait with the token free, the submit that made it so runs one
    turn with the token: the records reach the workers while the burst goes on (no
    driver thread here), then the token is free again. Fewer waiting: no turn."""
    ex = RecordExecutor(1, start_method="fork")
    ex.start()
    d = Driver(ex, 2)
    try:
        turns = []
        with d.lock:
            for tid in range(1, BURST + 200):
                turns.append(d.add(PoolFuture(d, tid, abs, (-tid,), {}, None)))
                if turns[-1]:
                    break
        room = d._room()
        assert turns[:-1] == [False] * (room + BURST - 1) and turns[-1] is True
        d.burst()
        assert d.poller is None, "the token stays taken after the burst's turn"
        assert sum(len(w.in_flight) for w in ex._workers.values()) > 0, "nothing was sent"
    finally:
        ex.terminate()


def test_calls_without_keywords_share_one_empty_kwargs_that_stays_empty(tmp_path):
    """Every call without keyword arguments holds the one shared ``NO_KWARGS`` (a dict of
    its own per task was one more object per task for the garbage collector); a call
    with keywords keeps its own, and nothing writes into the shared one."""
    gate = tmp_path / "go"
    with ProcessPoolExecutor(2) as pool:
        busy = [pool.submit(ft.wait_for_file, str(gate)) for _ in range(2)]
        plain = [pool.submit(divmod, 7, 2) for _ in range(3)]
        keyed = pool.submit(ft.sleep_return, 0, value=5)
        items = pool.map(divmod, [7, 9], [2, 4])
        try:  # not done (both workers wait for the gate): each still holds its call
            assert all(f.kwargs is NO_KWARGS for f in plain)
            assert keyed.kwargs == {"value": 5} and keyed.kwargs is not NO_KWARGS
        finally:
            gate.touch()
        assert [f.result(WAIT) for f in plain] == [(3, 1)] * 3
        assert keyed.result(WAIT) == 5
        assert list(items) == [(3, 1), (2, 1)]
        assert [f.result(WAIT) for f in busy] == [None, None]
    assert NO_KWARGS == {}
