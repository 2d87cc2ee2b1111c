"""``chunk_results``, the chunked map's hand-out iterator, on both loop twins: the same
items in the same order, and each one dropped from its chunk as it is handed out (a
result the consumer lets go of is freed at once: issue 14's promise for chunked maps)."""

from __future__ import annotations

import gc
import weakref

import pytest

from helpers import twins


class Item:
    """An object a weak reference can follow (ints and strs cannot)."""

    def __init__(self, n: int) -> None:
        self.n = n


@pytest.mark.parametrize("size", [0, 1, 7])
def test_hands_out_every_item_in_order_then_stops(loop_module, size):
    items = list(range(size))
    it = loop_module.chunk_results(list(items))
    assert iter(it) is it
    assert list(it) == items
    assert next(it, "ended") == "ended"  # stays exhausted


def test_each_item_is_dropped_from_the_chunk_as_it_is_handed_out(loop_module):
    chunk = [Item(n) for n in range(5)]
    refs = [weakref.ref(x) for x in chunk]
    it = loop_module.chunk_results(chunk)
    del chunk
    for n in range(5):
        got = next(it)
        assert got.n == n
        del got
        gc.collect()
        assert refs[n]() is None, f"item {n} still held after it was handed out"
        assert all(r() is not None for r in refs[n + 1 :])  # the rest are still there
    assert next(it, "ended") == "ended"


@pytest.mark.parametrize("size", [0, 1, 6])
def test_the_twins_agree(size):
    """The compiled twin hands out what the pure one does, in the same order, and then
    stops (not parametrized by ``impl``: one side is always the pure specification)."""
    pure, compiled = twins()
    assert type(compiled.chunk_results([])) is not type(pure.chunk_results([]))  # two twins
    mixed = [None, 0, "x", (1, 2), [3], Item(4)][:size]
    sides = [loop.chunk_results(list(mixed)) for loop in (compiled, pure)]
    assert [list(side) for side in sides] == [mixed, mixed]
    assert [next(side, "ended") for side in sides] == ["ended", "ended"]
