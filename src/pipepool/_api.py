"""What LocalExecutor and ClusterExecutor share: the event buffer and the verbs a
scheduler builds on ``queue_call``, ``sync`` and ``has_work``, so both keep one contract."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import CancelledError
from typing import Any, Self

from . import _signals
from .events import Event, State


class SchedulerAPI:
    """Mixin: subclasses provide ``queue_call``, ``sync``, ``has_work``, ``start``, ``end``,
    ``terminate``, ``_finish``, an ``_events`` dict, a ``_queue`` deque of tasks and a
    ``_state`` of "new", "started" or "ended"."""

    _events: dict[Hashable, Event]
    _state: str
    _queue: deque  # of tasks (anything with a ``key``), in dispatch order
    _published = 0  # events published so far (an instance attribute once counting)

    def queue(self, key: Hashable, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        """Queue ``fn(*args, **kwargs)`` under ``key``; pickled when it is dispatched."""
        self.queue_call(key, fn, args, kwargs)  # type: ignore[attr-defined]

    def heartbeat(self, timeout: float = 0.0) -> None:
        """The same as ``sync``: the name Airflow's executors use for one round."""
        self.sync(timeout)  # type: ignore[attr-defined]

    def get_event_buffer(self, keys: Iterable[Hashable] | None = None) -> dict[Hashable, Event]:
        """Pop and return ``{key: newest event}``, for all keys or only ``keys``."""
        if keys is None:
            events, self._events = self._events, {}
            return events
        return {k: self._events.pop(k) for k in list(keys) if k in self._events}

    @property
    def queued(self) -> set[Hashable]:
        """Keys with a task not yet dispatched (to a worker, or to the cluster)."""
        return {t.key for t in self._queue}

    def cancel(self, key: Hashable) -> int:
        """Cancel the queued (never dispatched) tasks of ``key``; returns how many.

        Each gets a FAILED event with ``concurrent.futures.CancelledError``.
        """
        deferred = None
        try:
            deferred = _signals.defer()
            doomed = [t for t in self._queue if t.key == key]
            if doomed:
                self._queue = deque(t for t in self._queue if t.key != key)
                for t in doomed:
                    self._finish(  # type: ignore[attr-defined]
                        t,
                        State.FAILED,
                        exception=CancelledError(f"task {key!r} cancelled"),
                    )
            return len(doomed)
        finally:
            _signals.undefer(deferred)

    def wait_until_done(self, timeout: float | None = None) -> bool:
        """Drive the rounds until nothing is queued or in flight; False if ``timeout`` hit."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.sync()  # type: ignore[attr-defined]
        while self.has_work():  # type: ignore[attr-defined]
            remaining = 1.0 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sync(timeout=min(remaining, 1.0))  # type: ignore[attr-defined]
        return True

    def __enter__(self) -> Self:
        self.start()  # type: ignore[attr-defined]
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None and not issubclass(exc_type, Exception):
            self.terminate()  # type: ignore[attr-defined]  # Ctrl-C, SystemExit: stop now
        else:
            self.end()  # type: ignore[attr-defined]

    def _publish(self, event: Event, *, terminal: bool) -> None:
        # Newest event per key, except that a RUNNING event never hides an unread
        # terminal one (the same key may be queued again while its first run ends).
        if not terminal:
            old = self._events.get(event.key)
            if old is not None and old.state.terminal:
                return
        self._events[event.key] = event
        self._published += 1  # lets sync() tell whether a round produced anything

    def _require_started(self) -> None:
        if self._state != "started":
            name = type(self).__name__
            raise RuntimeError(
                f"{name} is not running: call start() first"
                if self._state == "new"
                else f"{name} has ended"
            )
