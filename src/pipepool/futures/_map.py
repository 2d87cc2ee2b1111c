"""``ProcessPoolExecutor.map``: the stdlib's algorithm (3.14, with ``buffersize``) over
items lighter than Futures, each result freed as soon as it is handed out."""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError
from concurrent.futures._base import CANCELLED, FINISHED, PENDING
from typing import Any

from ._item import Record


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


def map_calls(
    submit: Callable[..., MapItem],
    fn: Callable[..., Any],
    iterables: tuple[Iterable[Any], ...],
    timeout: float | None = None,
    chunksize: int = 1,
    buffersize: int | None = None,
) -> Iterator[Any]:
    """The stdlib's ``Executor.map`` (3.14, with ``buffersize``) over chunks."""
    if chunksize < 1:
        raise ValueError("chunksize must be >= 1.")
    if buffersize is not None and not isinstance(buffersize, int):
        raise TypeError("buffersize must be an integer or None")
    if buffersize is not None and buffersize < 1:
        raise ValueError("buffersize must be None or > 0")
    end_time = None if timeout is None else timeout + time.monotonic()
    if chunksize == 1:
        calls: Iterator[tuple] = zip(*iterables, strict=False)  # shortest, as map()
        task = fn
    else:
        calls = ((chunk,) for chunk in _chunks(zip(*iterables, strict=False), chunksize))
        task = ChunkRunner(fn)
    if buffersize:
        items = deque(submit(task, *args) for args in itertools.islice(calls, buffersize))
    else:
        items = deque(submit(task, *args) for args in calls)
    results = _results(items, submit, task, calls if buffersize else None, end_time)
    return _flatten(results) if chunksize > 1 else results


def _chunks(iterable: Iterable[Any], size: int) -> Iterator[tuple]:
    it = iter(iterable)
    while chunk := tuple(itertools.islice(it, size)):
        yield chunk


class ChunkRunner:
    """Runs one chunk of ``map`` in a worker; module level so it pickles by name, with a
    repr that reads well in error messages."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, chunk: tuple[tuple, ...]) -> list[Any]:
        fn = self.fn
        return [fn(*args) for args in chunk]

    def __reduce__(self) -> tuple[type, tuple[Callable[..., Any]]]:
        return (ChunkRunner, (self.fn,))

    def __repr__(self) -> str:
        return f"<map chunk of {self.fn!r}>"


def _results(
    items: deque[MapItem],
    submit: Callable[..., MapItem],
    task: Callable[..., Any],
    calls: Iterator[tuple] | None,
    end_time: float | None,
) -> Iterator[Any]:
    # A generator, so nothing waits until the first next(); the finally cancels what is
    # left when the consumer stops early, raises, or drops the iterator.
    try:
        while items:
            if calls is not None:
                args = next(calls, None)
                if args is not None:
                    items.append(submit(task, *args))  # refill before waiting: stay full
                del args
            # No local names the item or its value across the yield: once the consumer
            # drops a result, nothing here keeps it alive (as the stdlib).
            yield _result_or_cancel(items.popleft(), end_time)
    finally:
        for item in items:
            item.cancel()


def _result_or_cancel(item: MapItem, end_time: float | None) -> Any:
    try:
        return item.result(None if end_time is None else end_time - time.monotonic())
    finally:
        item.cancel()


def _flatten(chunks: Iterator[list[Any]]) -> Iterator[Any]:
    for chunk in chunks:
        chunk.reverse()
        while chunk:
            yield chunk.pop()
