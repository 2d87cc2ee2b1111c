"""What LocalExecutor and ClusterExecutor share: the event buffer, the verbs a scheduler
builds on ``sync`` and ``has_work``, and the bookkeeping of queued, timed and finished
tasks (``_task.Task``), so both keep one contract."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import CancelledError
from typing import Any, Self

from . import _signals
from ._task import DONE, RUNNING, Task
from .events import Event, State


class SchedulerAPI:
    """Base of both executors: the state they share, declared here once, and the verbs
    built on the steps each one provides (``start``, ``sync``, ``has_work``,
    ``terminate``, ``_shut_down``, ``_dispatched``, ``_time_out``)."""

    def __init__(self, counters: Iterable[str]) -> None:
        self._state = "new"  # new -> started -> ended
        self._queue: deque[Task] = deque()  # queued tasks, in dispatch order
        self._timed: dict[int, Task] = {}  # tid -> started task with a deadline
        self._events: dict[Hashable, Event] = {}  # key -> newest event, until read
        self._published = 0  # events published so far: did a round produce any?
        self._tids = itertools.count(1)  # task ids, unique per executor
        self._stats = dict.fromkeys(counters, 0)  # counters stats() reports
        self._last_progress = time.monotonic()  # when a task last ended (stats())

    # -- the steps each executor provides -------------------------------------------------

    def start(self) -> None:
        """Connect or create what the executor runs on; work may then be queued."""
        raise NotImplementedError

    def sync(self, timeout: float = 0.0) -> None:
        """One round of the executor's steps (see its class); never blocks on I/O."""
        raise NotImplementedError

    def has_work(self) -> bool:
        """True while any task is queued or in flight."""
        raise NotImplementedError

    def terminate(self) -> None:
        """Stop now: unfinished tasks fail, queued ones are cancelled."""
        raise NotImplementedError

    def _shut_down(self) -> None:
        """What ``end`` does once all work is done."""
        raise NotImplementedError

    def _dispatched(self) -> Iterable[Task]:
        """Every task dispatched (to a worker, or to the cluster) and not reported."""
        raise NotImplementedError

    def _time_out(self, t: Task) -> None:
        """Stop task ``t``, past its deadline, and report it."""
        raise NotImplementedError

    # -- the verbs a scheduler uses -------------------------------------------------------

    def queue_call(
        self,
        key: Hashable,
        fn: Callable[..., Any],
        args: tuple = (),
        kwargs: dict | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """Like ``queue`` with the call spelled out, plus a per-task ``timeout`` in seconds,
        counted from the moment a worker starts the task; past it the task fails with
        ``TaskTimeoutError`` (what happens to its worker: see the executor's class doc)."""
        if self._state == "ended":
            raise RuntimeError(f"cannot queue on an ended {type(self).__name__}")
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")
        task = Task(next(self._tids), key, fn, tuple(args), kwargs or {}, timeout)
        self._queue.append(task)  # one atomic append: queued, or (if interrupted) not at all

    def queue(self, key: Hashable, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        """Queue ``fn(*args, **kwargs)`` under ``key``; pickled when it is dispatched."""
        self.queue_call(key, fn, args, kwargs)

    def heartbeat(self, timeout: float = 0.0) -> None:
        """The same as ``sync``: the name Airflow's executors use for one round."""
        self.sync(timeout)

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

    @property
    def running(self) -> set[Hashable]:
        """Keys with at least one task dispatched and not reported (started or not)."""
        return {t.key for t in self._dispatched()}

    def running_counts(self) -> dict[Hashable, int]:
        """``{key: tasks dispatched and not reported}``, for keys queued again while
        running."""
        counts: dict[Hashable, int] = {}
        for t in self._dispatched():
            counts[t.key] = counts.get(t.key, 0) + 1
        return counts

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
                    self._finish(
                        t, State.FAILED, exception=CancelledError(f"task {key!r} cancelled")
                    )
            return len(doomed)
        finally:
            _signals.undefer(deferred)

    def end(self) -> None:
        """Finish every queued and running task, collect all results, then stop the
        workers (LocalExecutor) or disconnect and close the LocalCluster this executor
        started (ClusterExecutor)."""
        if self._state == "new":
            self._state = "ended"
            return
        if self._state == "ended":
            return
        self.wait_until_done()
        self._shut_down()

    def wait_until_done(self, timeout: float | None = None) -> bool:
        """Drive the rounds until nothing is queued or in flight; False if ``timeout`` hit."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.sync()
        while self.has_work():
            remaining = 1.0 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sync(timeout=min(remaining, 1.0))
        return True

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None and not issubclass(exc_type, Exception):
            self.terminate()  # Ctrl-C, SystemExit: stop now
        else:
            self.end()

    def __del__(self) -> None:
        if getattr(self, "_state", None) == "started":
            with contextlib.suppress(Exception):
                self.terminate()

    def _expire(self) -> None:
        if not self._timed:
            return
        now = time.monotonic()
        for tid, t in list(self._timed.items()):
            if t.phase != RUNNING:
                del self._timed[tid]
            elif t.deadline is not None and now >= t.deadline:
                del self._timed[tid]
                self._time_out(t)

    def _deadline_bound(self, bound: float) -> float:
        """``bound``, or the time left to the nearest deadline of a started task if less."""
        if self._timed:
            now = time.monotonic()
            bound = min(
                [bound] + [t.deadline - now for t in self._timed.values() if t.deadline is not None]
            )
        return bound

    def _finish(
        self,
        t: Task,
        state: State,
        *,
        result: Any = None,
        exception: BaseException | None = None,
        pid: int | None = None,
    ) -> None:
        """Record a task's terminal event (the caller removes it from where it was)."""
        t.phase = DONE
        # Free memory early; a ClusterExecutor task's Dask future is the last reference to
        # it, so Dask forgets the key and its result.
        t.fn = t.args = t.kwargs = t.future = None
        if state is State.SUCCESS:
            self._stats["done"] += 1
        else:
            self._stats["failed"] += 1
        self._publish(Event(t.key, state, result, exception, pid), terminal=True)

    def _cancel_queued(self) -> None:
        """Fail every queued task with ``CancelledError``: the executor was terminated."""
        while self._queue:
            t = self._queue[0]
            self._finish(
                t,
                State.FAILED,
                exception=CancelledError(f"task {t.key!r} cancelled: executor terminated"),
            )
            self._queue.popleft()

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
