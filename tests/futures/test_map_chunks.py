"""ProcessPoolExecutor.map with chunksize > 1: the chunk path (docs/design.md, "Chunked
map"). A chunk runs with map()/starmap() in the worker and is handed out through
itertools.chain in the parent; what it keeps of the stdlib's map and where it does better
(a failing item's chunk-mates before it are not lost). Both loop implementations."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import time
from concurrent.futures import TimeoutError as FuturesTimeout

import pytest

import pipepool
from pipepool import RemoteTraceback, TaskTimeoutError

from . import map_chunk_tasks as mt

WAIT = 30.0  # s: upper bound on any single result here; a hang fails, not wedges


@pytest.fixture
def make_pool(impl, monkeypatch):
    """Fork pools on this test's loop implementation (the workers' too), shut down
    (cancelling) at the end."""
    monkeypatch.setenv("PIPEPOOL_IMPL", impl)
    made: list[pipepool.ProcessPoolExecutor] = []

    def make(max_workers: int = 2, start_method: str = "fork") -> pipepool.ProcessPoolExecutor:
        ctx = multiprocessing.get_context(start_method)
        pool = pipepool.ProcessPoolExecutor(max_workers, mp_context=ctx)
        made.append(pool)
        return pool

    yield make
    for pool in made:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_chunks_keep_order_for_every_input_kind(make_pool, start_method):
    pool = make_pool(start_method=start_method)
    expected = [i * i for i in range(103)]
    for source in (list(range(103)), tuple(range(103)), range(103), iter(range(103))):
        assert list(pool.map(mt.square, source, chunksize=10, timeout=WAIT)) == expected
    # Several iterables: zip's shortest, as the builtin map.
    got = pool.map(mt.slow_square, range(50), [0.0] * 23, chunksize=4, timeout=WAIT)
    assert list(got) == [i * i for i in range(23)]
    assert list(pool.map(mt.square, [], chunksize=5, timeout=WAIT)) == []


@pytest.mark.parametrize("several", [False, True], ids=["map", "starmap"])
def test_a_chunk_yields_its_results_before_the_failing_item_then_raises(make_pool, several):
    """Chunk [3, "x", 5]: 0, 1, 4 (chunk one), then 9, then the TypeError of "x"; the
    stdlib's chunked map loses the 9. Nothing after the exception."""
    pool = make_pool()
    items = [0, 1, 2, 3, "x", 5, 6]
    if several:
        results = pool.map(mt.slow_square, items, [0.0] * len(items), chunksize=3, timeout=WAIT)
    else:
        results = pool.map(mt.square, items, chunksize=3, timeout=WAIT)
    got = []
    with pytest.raises(TypeError) as caught:
        for value in results:
            got.append(value)
    assert got == [0, 1, 4, 9]
    assert isinstance(caught.value.__cause__, RemoteTraceback)  # the worker's traceback
    assert "map_chunk_tasks.py" in str(caught.value.__cause__)
    assert next(results, "ended") == "ended"


def test_a_chunk_stops_at_its_first_failing_item(make_pool):
    """The item after the failing one would sleep 60 s: had the chunk gone on, the map's
    20 s timeout would end it, not the TypeError."""
    pool = make_pool()
    results = pool.map(mt.slow_square, ["x", 3], [0, 60], chunksize=2, timeout=20)
    with pytest.raises(TypeError):
        next(results)


def test_chunked_map_timeout_counts_from_the_call(make_pool):
    pool = make_pool()
    assert list(pool.map(mt.square, range(8), chunksize=4, timeout=WAIT))  # warm
    results = pool.map(mt.slow_square, [1, 2, 3, 4], [0, 0, 2.0, 0], chunksize=2, timeout=0.5)
    assert [next(results), next(results)] == [1, 4]  # chunk one, in time
    start = time.monotonic()
    with pytest.raises(FuturesTimeout):
        next(results)  # chunk two takes 2 s
    assert time.monotonic() - start < 1.9  # raised at the deadline, not at the chunk's end


def test_with_options_timeout_bounds_a_whole_chunk(make_pool):
    """A chunk is one task for ``with_options(timeout=)``: four 0.4 s items in one chunk
    exceed a 1 s limit that each of them alone would meet."""
    pool = make_pool()
    view = pool.with_options(timeout=1.0)
    assert list(view.map(mt.slow_square, [1, 2], [0.4, 0.4], chunksize=1)) == [1, 4]
    with pytest.raises(TaskTimeoutError):
        list(view.map(mt.slow_square, [1, 2, 3, 4], [0.4] * 4, chunksize=4))


@pytest.mark.parametrize("several", [False, True], ids=["map", "starmap"])
def test_endless_input_with_buffersize_reads_a_bounded_amount(make_pool, several):
    pool = make_pool()
    taken: list[int] = []

    def source():
        for i in itertools.count():
            taken.append(i)
            yield i

    if several:
        results = pool.map(
            mt.slow_square, source(), itertools.repeat(0.0), chunksize=4, buffersize=2
        )
    else:
        results = pool.map(mt.square, source(), chunksize=4, buffersize=2, timeout=WAIT)
    assert [next(results) for _ in range(30)] == [i * i for i in range(30)]
    # 30 handed out = 8 chunks read; then at most buffersize more, and one being built.
    assert len(taken) <= (8 + 2 + 1) * 4 + 1
    results.close()
    read = len(taken)
    assert next(results, "ended") == "ended"
    assert len(taken) == read  # closed: nothing more is read


def test_close_in_a_chunk_drops_its_rest_and_stops(make_pool):
    pool = make_pool()
    results = pool.map(mt.square, range(100), chunksize=10, timeout=WAIT)
    assert [next(results) for _ in range(3)] == [0, 1, 4]
    results.close()
    assert list(results) == []


@pytest.mark.parametrize("started", [False, True], ids=["before-next", "after-next"])
def test_close_cancels_the_chunks_not_started(make_pool, tmp_path, started):
    """One worker, six chunks of two: the first waits for a gate. Closed before the gate
    opens, the chunks never handed to the worker never run; what ran is a prefix."""
    pool = make_pool(1)
    gate = tmp_path / "gate"
    marks = [str(tmp_path / f"mark{i}") for i in range(12)]
    results = pool.map(mt.mark_after_gate, [str(gate)] * 12, marks, chunksize=2, timeout=WAIT)
    if started:
        gate.touch()
        assert next(results) == marks[0]
    results.close()
    gate.touch()
    pool.shutdown(wait=True)
    ran = [os.path.exists(m) for m in marks]
    assert ran == sorted(ran, reverse=True)  # a prefix of the items ran
    assert not ran[-1], "the last chunk ran after close()"


def test_max_tasks_per_child_counts_chunks(impl, monkeypatch):
    """One worker recycled after every task: the items of a chunk share a worker, and
    the next chunk runs in its replacement."""
    monkeypatch.setenv("PIPEPOOL_IMPL", impl)
    ctx = multiprocessing.get_context("fork")
    with pipepool.ProcessPoolExecutor(1, mp_context=ctx, max_tasks_per_child=1) as pool:
        pids = list(pool.map(mt.pid, range(6), chunksize=3, timeout=WAIT))
    assert len(set(pids[:3])) == 1 and len(set(pids[3:])) == 1
    assert pids[0] != pids[3]


def test_a_range_travels_as_ranges():
    """A range's chunks are ranges, pickled as three numbers whatever their length, not
    lists of its items (the parent neither makes nor pickles the items)."""
    from pipepool.futures import _map

    sent: list[object] = []

    def submit(task, chunk):
        sent.append(chunk)
        return None

    def submit_all(task, calls):  # chunksize=1's ways: not taken for chunks
        raise AssertionError("chunks are submitted one by one")

    _map.map_calls(submit, submit_all, submit_all, iter, mt.square, (range(10),), chunksize=4)
    assert sent == [range(0, 4), range(4, 8), range(8, 10)]
    assert sent[0] != [0, 1, 2, 3]  # a range is not equal to the list of its items


def test_a_range_too_long_for_len_maps_lazily_with_buffersize(make_pool):
    """range(10**20) has no len() (OverflowError): its chunks are sliced one by one,
    and buffersize keeps the map from reading far ahead, as for any endless input."""
    pool = make_pool()
    results = pool.map(mt.square, range(10**20), chunksize=3, buffersize=2, timeout=WAIT)
    assert [next(results) for _ in range(7)] == [i * i for i in range(7)]
    results.close()
