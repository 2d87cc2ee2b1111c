"""``ProcessPoolExecutor.map``: the stdlib's algorithm (3.14, with ``buffersize``) over
items lighter than Futures, each result freed as soon as it is handed out.

With ``chunksize`` > 1 (docs/design.md, "Chunked map") nothing of pipepool runs in Python
per item: a chunk of one iterable travels as one list (several iterables: a list of
``zip`` tuples), the worker runs it with ``map`` (``starmap``) in C, and the parent hands
the results out through ``itertools.chain``, resuming Python once per chunk. A chunk stops
at its first failing item; the results before it come back with the failure, and are
handed out before it is raised (the stdlib loses them).
"""

from __future__ import annotations

import collections
import itertools
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import CancelledError
from concurrent.futures._base import CANCELLED, FINISHED, PENDING
from typing import TYPE_CHECKING, Any, cast

from .. import _checks
from .._outcome import encode_failure, load_exception
from .._task import NO_KWARGS
from ._item import Record

if TYPE_CHECKING:
    from ._driver import Driver


class MapItem(Record):
    """One call of a ``map``: a record with the part of a Future that map and the driver
    use, without callbacks or waiters. Internal to the map's iterator, so no user code
    waits on it, adds callbacks or cancels it; its consumer drives the pool like
    ``result()``."""

    __slots__ = ()

    def cancel(self) -> bool:
        """Cancel it if it was never handed over (the consumer is done with it)."""
        if self._state == PENDING and self not in self.driver.running:
            self._state = CANCELLED
        return self._state == CANCELLED

    def result(self, timeout: float | None = None) -> Any:
        if self._state != FINISHED:
            self.driver.wait_for(self.done, timeout)
        state = self._state
        if state == FINISHED:
            if self._exception is None:
                return self._result
            raise self._exception
        if self.done():
            raise CancelledError()
        raise TimeoutError()


class MapCalls:
    """The calls of a ``map(chunksize=1)`` not yet made into MapItems: one entry of the
    driver's ``pending`` queue for all of them. The token holder's feed makes as many
    items as the pool has room for (``take``), so a map's items are made, run and freed
    a pool's room at a time: a map of many calls does not keep them all alive, which in
    a long map was the most of the parent's garbage collections (docs/design.md, "Map
    calls").

    Submitted all the same: the pool runs every call (``shutdown(wait=True)`` waits for
    them), ``drain_pending`` makes every call left into a PENDING item when the pool
    cancels or fails its pending work, and ``cancel`` drops the calls left when the map's
    consumer stops. The invariant, under the driver's lock: it is in ``pending`` while
    ``calls`` holds any and it is not ``dropped``, or until the next feed. An item enters
    ``made`` before its call leaves ``calls``, so a reader without the lock who finds
    ``calls`` empty finds every item in ``made``."""

    __slots__ = ("calls", "driver", "dropped", "fn", "made", "single", "timeout")

    def __init__(
        self, driver: Driver, fn: Callable[..., Any], timeout: float | None, single: bool
    ) -> None:
        self.driver = driver
        self.fn = fn
        self.timeout = timeout
        # In call order: argument tuples, or with ``single`` (a map over one iterable) each
        # call's one argument, its tuple made with its record (no tuple kept per call).
        self.calls: deque[Any] = deque()
        self.single = single
        self.made: deque[MapItem] = deque()  # items made, not yet handed out, in order
        self.dropped = False  # the consumer is done: no more items (``cancel``)

    def take(self, n: int) -> list[MapItem]:
        """Make the next ``n`` calls (or all that are left; none once dropped) into items
        (lock held)."""
        calls, d, fn, timeout = self.calls, self.driver, self.fn, self.timeout
        keys = d.keys
        n = 0 if self.dropped else min(n, len(calls))
        next_calls: Iterator[Any] = itertools.islice(calls, n)
        if self.single:
            next_calls = zip(next_calls)  # (argument,)
        taken = [MapItem(d, next(keys), fn, args, NO_KWARGS, timeout) for args in next_calls]
        self.made.extend(taken)
        for _ in range(n):
            calls.popleft()
        return taken

    def cancel(self) -> None:
        """Drop the calls not made yet: the consumer is done with the map (as cancelled
        pending calls, they would never run). Only a mark, which the next feed reads: this
        may run inside that very feed, in ``take`` (a collection there finalizes a map's
        iterator held in a reference cycle), and so neither changes the queue under it
        nor waits for the lock; a feed already under way makes its items, which run."""
        self.dropped = True

    def wait(self, end_time: float | None) -> None:
        """Until the token holder made the next item, or no call is left (a reader that
        handed out every item made); TimeoutError at ``end_time``."""
        made, calls = self.made, self.calls
        timeout = None if end_time is None else end_time - time.monotonic()
        if not self.driver.wait_for(lambda: bool(made) or not calls, timeout):
            raise TimeoutError()


def map_calls(
    submit: Callable[..., MapItem],
    submit_all: Callable[[Callable[..., Any], Iterable[Any]], deque[MapItem]],
    queue_all: Callable[[Callable[..., Any], Iterable[Any], bool], MapCalls],
    handout: Callable[[list[Any]], Iterator[Any]],
    fn: Callable[..., Any],
    iterables: tuple[Iterable[Any], ...],
    timeout: float | None = None,
    chunksize: int = 1,
    buffersize: int | None = None,
) -> Iterator[Any]:
    """The stdlib's ``Executor.map`` (3.14, with ``buffersize``) over chunks. ``submit``
    submits one call, ``submit_all`` every call of an iterable of argument tuples (in
    bulk, as items), ``queue_all`` every call of one (or, when told, every argument of
    one-argument calls) as a ``MapCalls`` (``chunksize=1`` without ``buffersize``: items
    made as the pool has room); ``handout`` is the pool's loop's ``chunk_results``
    (compiled or its pure twin)."""
    # Counts (``pipepool._checks``); buffersize's messages start with the stdlib's words
    # (3.14's tests match them).
    chunksize = _checks.count(chunksize, "chunksize")
    buffersize = _checks.count(
        buffersize,
        "buffersize",
        none=True,
        says=("buffersize must be an integer or None", "buffersize must be None or > 0"),
    )
    end_time = None if timeout is None else timeout + time.monotonic()
    calls: Iterator[Any]
    task: Callable[..., Any]
    if chunksize == 1 and not buffersize:
        # Items made as the pool has room; one iterable's items queued as they are
        # (their argument tuples made with their records), several zipped.
        single = len(iterables) == 1
        args = iter(iterables[0]) if single else zip(*iterables, strict=False)
        queued = queue_all(fn, args, single)
        return _results(queued.made, queued, submit, fn, None, end_time)
    if chunksize == 1:
        calls = zip(*iterables, strict=False)  # shortest, as map()
        task = fn
    elif len(iterables) == 1:
        source = iterables[0]
        if type(source) in _SLICEABLE:
            calls = _slices(cast(Sequence[Any], source), chunksize)  # no item in Python
        else:
            calls = _chunks(iter(source), chunksize)
        task = MapChunk(fn)
    else:
        calls = _chunks(zip(*iterables, strict=False), chunksize)
        task = StarmapChunk(fn)
    first = itertools.islice(calls, buffersize) if buffersize else calls
    if chunksize == 1:
        items = submit_all(task, first)
    else:
        items = deque(submit(task, chunk) for chunk in first)  # a chunk is one argument
    refill = calls if buffersize else None
    if chunksize == 1:
        return _results(items, None, submit, task, refill, end_time)
    chunks = _chunk_results(items, submit, handout, task, refill, end_time)
    return MapResults.over(chunks, items)


def _chunks(it: Iterator[Any], size: int) -> Iterator[list[Any]]:
    """Lists of ``size`` items from ``it`` (the last one shorter), built in C."""
    take = itertools.islice
    while chunk := list(take(it, size)):
        yield chunk


_SLICEABLE = (list, tuple, range)  # exact types: a subclass's slice may not be a copy


def _slices(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """``_chunks`` of a list, tuple or range, by slicing: a copy in C for a list or
    tuple, and a range's chunks are ranges, which pickle as three numbers whatever their
    length (the worker makes the items). No ``len()``: a range may be too long for it."""
    for start in itertools.count(0, size):
        chunk = seq[start : start + size]
        if not chunk:
            return
        yield chunk


class MapChunk:
    """Runs one chunk of ``map`` over one iterable in a worker: ``map(fn, chunk)`` in C.

    Returns the results as a list, or a ``ChunkStopped`` with the results before the first
    failing item and that item's failure. Module level, so it pickles by name; its repr
    reads well in error messages."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, chunk: Sequence[Any]) -> list[Any] | ChunkStopped:
        out: list[Any] = []
        try:
            # extend() keeps what it appended before the iterator raised: the results
            # before the failing item.
            out.extend(map(self.fn, chunk))
        except BaseException as exc:  # any exception of an item is its outcome (as _serve)
            return ChunkStopped(out, *encode_failure(exc))
        return out

    def __reduce__(self) -> tuple[type, tuple[Callable[..., Any]]]:
        return (type(self), (self.fn,))

    def __repr__(self) -> str:
        return f"<map chunk of {self.fn!r}>"


class StarmapChunk(MapChunk):
    """``MapChunk`` over several iterables: the chunk is a list of ``zip`` tuples."""

    __slots__ = ()

    def __call__(self, chunk: Sequence[Any]) -> list[Any] | ChunkStopped:
        out: list[Any] = []
        try:
            out.extend(itertools.starmap(self.fn, chunk))
        except BaseException as exc:
            return ChunkStopped(out, *encode_failure(exc))
        return out


class ChunkStopped:
    """A chunk that stopped at a failing item: the results before it, then the failure
    as the worker encodes a task's (traceback text, pickled exception)."""

    __slots__ = ("exc_bytes", "results", "tb")

    def __init__(self, results: list[Any], tb: str, exc_bytes: bytes) -> None:
        self.results = results
        self.tb = tb
        self.exc_bytes = exc_bytes

    def __reduce__(self) -> tuple[type, tuple[list[Any], str, bytes]]:
        return (ChunkStopped, (self.results, self.tb, self.exc_bytes))


class MapResults(itertools.chain[Any]):
    """The iterator a chunked ``map`` returns: ``chain``'s C iteration over each chunk's
    results, plus ``close()`` (as the stdlib's generator has) that stops reading, cancels
    the chunks not started and drops the results not handed out."""

    __slots__ = ("_chunks", "_items")
    _chunks: Generator[Iterator[Any], None, None]
    _items: deque[MapItem]

    @classmethod
    def over(
        cls, chunks: Generator[Iterator[Any], None, None], items: deque[MapItem]
    ) -> MapResults:
        it = cast(MapResults, cls.from_iterable(chunks))
        it._chunks = chunks
        it._items = items
        return it

    def close(self) -> None:
        self._chunks.close()  # its finally cancels what is left, once it has started
        for item in self._items:  # closed before the first next(): no finally ran
            item.cancel()
        collections.deque(self, maxlen=0)


def _results(
    items: deque[MapItem],
    source: MapCalls | None,
    submit: Callable[..., MapItem],
    task: Callable[..., Any],
    calls: Iterator[Any] | None,
    end_time: float | None,
) -> Generator[Any, None, None]:
    # A generator, so nothing waits until the first next(); the finally cancels what is
    # left when the consumer stops early, raises, or drops the iterator. With a
    # ``source`` the items are its ``made``: ``calls`` read before ``items`` (MapCalls).
    try:
        while (source is not None and source.calls) or items:
            if not items:
                cast(MapCalls, source).wait(end_time)
                continue
            if calls is not None:
                args = next(calls, None)
                if args is not None:
                    items.append(submit(task, *args))  # refill before waiting: stay full
                del args
            # No local names the item or its value across the yield: once the consumer
            # drops a result, nothing here keeps it alive (as the stdlib). A result in
            # already (most, in a burst) is handed out without a call.
            if items[0]._state == FINISHED and items[0]._exception is None:
                yield items.popleft()._result
            else:
                yield _result_or_cancel(items.popleft(), end_time)
    finally:
        if source is not None:
            source.cancel()
        for item in items:
            item.cancel()


def _chunk_results(
    items: deque[MapItem],
    submit: Callable[..., MapItem],
    handout: Callable[[list[Any]], Iterator[Any]],
    task: Callable[..., Any],
    calls: Iterator[Any] | None,
    end_time: float | None,
) -> Generator[Iterator[Any], None, None]:
    """``_results`` for chunks: yields, per chunk, a C iterator over its results in order,
    each one dropped from the chunk as it is handed out (as the stdlib's
    ``_chain_from_iterable_of_lists``): the loop's ``chunk_results``, compiled or its
    pure twin. After a stopped chunk's results, raises its failure. Resumed once per
    chunk by ``MapResults``."""
    try:
        while items:
            if calls is not None:
                chunk = next(calls, None)
                if chunk is not None:
                    items.append(submit(task, chunk))  # refill before waiting: stay full
                del chunk
            item = items.popleft()
            key = item.key
            out = _result_or_cancel(item, end_time)
            del item
            if type(out) is ChunkStopped:
                error = load_exception(key, out.tb, out.exc_bytes, "in the parent")
                yield handout(out.results)
                raise error
            yield handout(out)
            del out
    finally:
        for item in items:
            item.cancel()


def _result_or_cancel(item: MapItem, end_time: float | None) -> Any:
    try:
        return item.result(None if end_time is None else end_time - time.monotonic())
    finally:
        item.cancel()
