"""What LocalExecutor and ClusterExecutor share: the event buffer, the verbs a scheduler
builds on ``sync`` and ``has_work``, and the bookkeeping of queued, timed and finished
tasks (``_task.Task``), so both keep one contract.

Two ways out. A task's outcome leaves through one door, ``_finish`` (``_succeed`` for many
successes at once), and reaches its reader in one of two ways, chosen when the executor
is built:

* the event buffer (the scheduler API, the default): ``get_event_buffer()`` hands out the
  newest ``Event`` per key;
* the records (``records=True``, for a face that keeps the task records themselves: a
  ProcessPoolExecutor's futures *are* its tasks): the face queues records it built
  (``_queue_tasks``), and ``_take_records()`` hands back, per round and in bulk, the ones
  that ended (their outcome in ``failed`` and ``value``) and the ones seen started. No
  ``Event``, no key look-up and no held key per task: one object per task, end to end.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import CancelledError
from typing import Any, Self

from . import _signals
from ._task import DONE, RUNNING, Task
from .errors import DuplicateKeyError
from .events import _TERMINAL, Event, State

_SUCCESS, _FAILED = State.SUCCESS, State.FAILED  # plain names: events.py says why
_new = tuple.__new__  # Event(...) through its own __new__ costs twice as much

_WHERE = {
    "queued": "queued",
    "running": "running",
    "reported": "reported and its terminal event not yet read by get_event_buffer()",
}


class SchedulerAPI:
    """Base of both executors: the state they share, declared here once, and the verbs
    built on the steps each one provides (``start``, ``sync``, ``has_work``,
    ``terminate``, ``_shut_down``, ``_dispatched``, ``_time_out``)."""

    def __init__(self, counters: Iterable[str], *, records: bool = False) -> None:
        self._state = "new"  # new -> started -> ended
        self._queue: deque[Task] = deque()  # queued tasks, in dispatch order
        self._timed: dict[int, Task] = {}  # tid -> started task with a deadline
        self._events: dict[Hashable, Event] = {}  # key -> newest event, until read
        self._published = 0  # events published so far: did a round produce any?
        self._tids = itertools.count(1)  # task ids, unique per executor
        self._held: dict[Hashable, Task] = {}  # key -> its task, from queue() until it
        # ends; then its unread terminal event in _events holds the key (a key takes one
        # task at a time). A hint: see _holding()
        self._stats = dict.fromkeys(counters, 0)  # counters stats() reports
        self._last_progress = time.monotonic()  # when a task last ended (stats())
        # The records way out (module docstring), or None for the event buffer:
        self._settled: list[Task] | None = [] if records else None  # ended, not yet taken
        self._began: list[Task] = []  # records: seen started since the last _take_records()

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
        if self._settled is not None:
            raise RuntimeError("this executor takes task records (_queue_tasks), not calls")
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")
        held = self._held
        if (key in held or key in self._events) and (where := self._holding(key)):
            raise DuplicateKeyError(
                f"key {key!r} is already {_WHERE[where]}: a key takes one task at a time, "
                "from queue() until get_event_buffer() hands out its terminal event "
                "(the task under it is untouched)",
                key=key,
                where=where,
            )
        args = args if type(args) is tuple else tuple(args)
        task = Task(next(self._tids), key, fn, args, {} if kwargs is None else kwargs, timeout)
        held[key] = task  # first: interrupted before the append, the key is held by
        # nothing that exists, and _holding() says so the next time it is queued
        self._queue.append(task)  # one atomic append: queued, or (if interrupted) not at all

    def _queue_tasks(self, tasks: Sequence[Task]) -> None:
        """Queue task records a face built (records way out; each ``tid`` unique here: the
        face numbers them, and nothing else queues on this executor), in order."""
        if self._state == "ended":
            raise RuntimeError(f"cannot queue on an ended {type(self).__name__}")
        self._queue.extend(tasks)  # one atomic extend: all queued, or (interrupted) none

    def _take_records(self) -> tuple[list[Task], list[Task]]:
        """The records way out: the tasks that ended and those seen started since the
        last call, each list in the order it happened."""
        settled, began = self._settled, self._began
        assert settled is not None, "an executor of the event buffer keeps no records"
        self._settled, self._began = [], []
        return settled, began

    def queue(self, key: Hashable, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        """Queue ``fn(*args, **kwargs)`` under ``key``; pickled when it is dispatched.

        A key takes one task at a time: from here until ``get_event_buffer()`` hands out
        its terminal event, queueing it again raises ``DuplicateKeyError`` (a
        ``ValueError``) and leaves the first task untouched. Once that event is read, the
        key is free again (a scheduler's retry under the same key, say)."""
        held = self._held
        if (
            key in held
            or key in self._events
            or self._state != "started"
            or self._settled is not None
            or not callable(fn)
        ):
            self.queue_call(key, fn, args, kwargs)  # the checks, their errors, a held key
            return
        # The last lines of queue_call, inlined: a scheduler's hot path, one call less.
        task = Task(next(self._tids), key, fn, args, kwargs, None)
        held[key] = task
        self._queue.append(task)

    def heartbeat(self, timeout: float = 0.0) -> None:
        """The same as ``sync``: the name Airflow's executors use for one round."""
        self.sync(timeout)

    def get_event_buffer(self, keys: Iterable[Hashable] | None = None) -> dict[Hashable, Event]:
        """Pop and return ``{key: newest event}``, for all keys or only ``keys``."""
        if keys is None:
            events, self._events = self._events, {}
        else:
            events = {k: self._events.pop(k) for k in list(keys) if k in self._events}
        return events  # (a terminal one read: its key is free for a new task)

    @property
    def queued(self) -> set[Hashable]:
        """Keys with a task not yet dispatched (to a worker, or to the cluster)."""
        return {t.key for t in self._queue}

    @property
    def running(self) -> set[Hashable]:
        """Keys with at least one task dispatched and not reported (started or not)."""
        return {t.key for t in self._dispatched()}

    def running_counts(self) -> dict[Hashable, int]:
        """``{key: tasks dispatched and not reported}``: 1 for each key in ``running``
        (a key takes one task at a time); kept for callers written when it could be more."""
        counts: dict[Hashable, int] = {}
        for t in self._dispatched():
            counts[t.key] = counts.get(t.key, 0) + 1
        return counts

    def _holding(self, key: Hashable) -> str:
        """Why ``key`` is held ("queued", "running", "reported"), or "" if it is free.

        Computed from where tasks are, so it is the truth: ``_held`` only says which keys
        to ask about (it may name a key whose queue() a Ctrl-C cut short)."""
        t = self._held.get(key)
        if t is None or t.phase == DONE:  # ended: held while its terminal event is unread
            event = self._events.get(key)
            return "reported" if event is not None and event.state in _TERMINAL else ""
        if t.phase == RUNNING:
            return "running"
        return "queued" if any(q is t for q in self._queue) else ""

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
                    self._finish(t, _FAILED, exception=CancelledError(f"task {key!r} cancelled"))
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
        """Record a task's terminal outcome (the caller removes it from where it was):
        the one door every outcome leaves by (``_succeed``: many successes at once)."""
        t.phase = DONE
        # Free memory early; a ClusterExecutor task's Dask future is the last reference to
        # it, so Dask forgets the key and its result.
        t.fn = t.args = t.kwargs = t.future = None
        settled = self._settled
        if state is _SUCCESS:
            self._stats["done"] += 1
            if settled is not None:
                t.failed = False
                t.value = result
        else:
            self._stats["failed"] += 1
            if settled is not None:
                t.failed = True
                t.value = exception
        if settled is None:
            self._held.pop(t.key, None)  # its unread terminal event holds the key now
            self._publish(_new(Event, (t.key, state, result, exception, pid)), terminal=True)
        else:
            settled.append(t)
            self._published += 1

    def _succeed(self, tasks: list[Task], results: list[Any], pid: int | None) -> None:
        """``_finish`` of many successes on one worker (``pid``), in order, in one pass:
        the path of most outcomes (the caller removed each task from where it was)."""
        settled = self._settled
        if settled is None:
            events, unhold = self._events, self._held.pop
            success = _SUCCESS
            for t, result in zip(tasks, results, strict=True):
                t.phase = DONE
                t.fn = t.args = t.kwargs = None  # (no Dask future: LocalExecutor's path)
                key = t.key
                unhold(key, None)  # its unread terminal event holds the key now
                events[key] = _new(Event, (key, success, result, None, pid))
        else:
            for t, result in zip(tasks, results, strict=True):
                t.phase = DONE
                t.fn = t.args = t.kwargs = None
                t.failed = False
                t.value = result
            settled += tasks
        self._stats["done"] += len(tasks)
        self._published += len(tasks)

    def _cancel_queued(self) -> None:
        """Fail every queued task with ``CancelledError``: the executor was terminated."""
        while self._queue:
            t = self._queue[0]
            self._finish(
                t,
                _FAILED,
                exception=CancelledError(f"task {t.key!r} cancelled: executor terminated"),
            )
            self._queue.popleft()

    def _publish(self, event: Event, *, terminal: bool) -> None:
        # Newest event per key, except that a RUNNING event never hides an unread
        # terminal one (a defence: a key takes one task at a time, so none should follow).
        if not terminal:
            old = self._events.get(event.key)
            if old is not None and old.state in _TERMINAL:
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
