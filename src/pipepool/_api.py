"""The scheduler API that LocalExecutor and ClusterExecutor share (``SchedulerAPI``): the
verbs a scheduler uses (``queue``, ``get_event_buffer``, ``cancel``, ``end``, ...), built
on the steps each executor provides (``sync``, ``has_work``, ...), so both keep one
contract.

It comes in two layers, split where a task record is made: ``SchedulerCore`` holds every
verb but ``queue`` and ``queue_call``, generic in the record type it keeps
(``pipepool._task.TaskT``); ``SchedulerAPI`` is that core over ``Task`` plus the two verbs
that make a ``Task`` from a call. A face that builds its own records (``RecordExecutor``,
whose face hands them over) is built on the core over its record type, so the type
checker follows each record from the face that hands it over to the face that takes it back.

The bookkeeping under those verbs (the state, a key's dispatches, the two ways out of an
outcome) is ``pipepool._bookkeeping``'s, the class ``SchedulerCore`` derives from.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import CancelledError
from typing import Any, Self

from . import _checks, _signals
from ._bookkeeping import Bookkeeping
from ._task import NO_KWARGS, Task, TaskT
from .errors import DuplicateKeyError
from .events import _TERMINAL, Event, State

_FAILED = State.FAILED  # a plain name: events.py says why

_INF = math.inf
IDLE_SYNC = 60.0  # s a wait_until_done() round may sleep: each step's own deadline
# (``_wait_bound``) and every outcome end it sooner, so this only bounds the wake-ups of
# a wait on tasks that take long (one a minute), as the stdlib's blocking wait has none

_WHERE = {
    "queued": "queued",
    "running": "running",
    "reported": "reported and its terminal event not yet read by get_event_buffer()",
}


class SchedulerCore(Bookkeeping[TaskT]):
    """Base of every executor: the verbs built on the state they share (``Bookkeeping``)
    and on the steps each one provides (``start``, ``sync``, ``has_work``,
    ``terminate``, ``_shut_down``, ``_dispatched``, ``_time_out``); all but the two that
    make tasks (``SchedulerAPI``), so it is generic in the record type ``TaskT``."""

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

    def _dispatched(self) -> Iterable[TaskT]:
        """Every task dispatched (to a worker, or to the cluster) and not reported."""
        raise NotImplementedError

    # -- the verbs a scheduler uses -------------------------------------------------------

    def heartbeat(self, timeout: float = 0.0) -> None:
        """The same as ``sync``: the name Airflow's executors use for one round."""
        self.sync(timeout)

    def get_event_buffer(self, keys: Iterable[Hashable] | None = None) -> dict[Hashable, Event]:
        """Pop and return ``{key: event}``, for all keys or only ``keys`` (an iterable of
        keys: a list, a set; one key goes in a list of its own).

        The newest event of one dispatch per key: a key's events of a later dispatch
        (``Event.dispatch``), RUNNING ones included, wait for the next calls, one
        dispatch per call, in order; none is replaced by another dispatch's or dropped."""
        if keys is not None:
            keys = _key_list(keys)
        if self._later:
            deferred = None
            try:
                deferred = _signals.defer()  # two pieces of bookkeeping: _events, _later
                return self._pop_events(keys)
            finally:
                _signals.undefer(deferred)
        return self._pop_events(keys)

    @property
    def queued(self) -> set[Hashable]:
        """Keys with a dispatch not yet handed over (to a worker, or to the cluster)."""
        return {t.key for t in self._queue}

    @property
    def running(self) -> set[Hashable]:
        """Keys with a dispatch handed over and not ended (started or not), and keys
        queued again (dispatch 2 on) until that dispatch ends: a key stays here until
        its last dispatch ends."""
        keys = {t.key for t in self._dispatched()}
        keys.update(t.key for t in self._queue if t.dispatch > 1)
        return keys

    def running_counts(self) -> dict[Hashable, int]:
        """``{key: dispatches not yet ended}`` for each key in ``running``: its dispatches
        handed over, plus its queued ones. A key whose only dispatch is queued (never
        handed over) is not running, so not here: it is in ``queued``."""
        counts: dict[Hashable, int] = {}
        for t in self._dispatched():
            counts[t.key] = counts.get(t.key, 0) + 1
        queued: dict[Hashable, int] = {}
        again = set()  # keys queued again: running until that dispatch ends
        for t in self._queue:
            queued[t.key] = queued.get(t.key, 0) + 1
            if t.dispatch > 1:
                again.add(t.key)
        for key in again.union(counts):
            counts[key] = counts.get(key, 0) + queued.get(key, 0)
        return counts

    def _holding(self, key: Hashable) -> str:
        """Why ``key`` is held ("running", "queued", "reported"), or "" if it is free:
        a dispatch of it handed over, one queued, or an unread terminal event of it.

        Computed from where tasks are, so it is the truth (``_held`` may name a
        dispatch whose queue() a Ctrl-C cut short); for ``exclusive``, off the hot path."""
        if any(t.key == key for t in self._dispatched()):
            return "running"
        if any(t.key == key for t in self._queue):
            return "queued"
        unread = [self._events[key]] if key in self._events else []
        unread += self._later.get(key, [])
        return "reported" if any(e.state in _TERMINAL for e in unread) else ""

    def cancel(self, key: Hashable) -> int:
        """Cancel every queued (never handed over) dispatch of ``key``; returns how many.

        Each gets a FAILED event with ``concurrent.futures.CancelledError``; dispatches
        of the key handed over already run on (``kill`` stops started ones).
        """
        deferred = None
        try:
            deferred = _signals.defer()
            return self._cancel_queued_key(key)
        finally:
            _signals.undefer(deferred)

    def _cancel_queued_key(self, key: Hashable) -> int:
        """``cancel`` of the queued dispatches of ``key`` (signals deferred by the caller)."""
        doomed = [t for t in self._queue if t.key == key]
        if doomed:
            self._queue = deque(t for t in self._queue if t.key != key)
            for t in doomed:
                self._finish(t, _FAILED, exception=CancelledError(f"task {key!r} cancelled"))
        return len(doomed)

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
        """Drive the rounds until nothing is queued or in flight; False if ``timeout``
        (seconds, or None for no limit) passed first. Between rounds it sleeps until
        something happens (``sync``): no periodic wake-up of its own."""
        if timeout is not None:
            timeout = _checks.seconds(timeout, "timeout", none=True)
        deadline = None if timeout is None else time.monotonic() + timeout
        self.sync()
        while self.has_work():
            remaining = IDLE_SYNC if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sync(timeout=min(remaining, IDLE_SYNC))
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

    def _require_started(self) -> None:
        if self._state != "started":
            name = type(self).__name__
            raise RuntimeError(
                f"{name} is not running: call start() first"
                if self._state == "new"
                else f"{name} has ended"
            )


class SchedulerAPI(SchedulerCore[Task]):
    """The scheduler API of LocalExecutor and ClusterExecutor: the core over plain
    ``Task`` records, and the verbs that make one from a call (``queue``, ``queue_call``)."""

    def queue_call(
        self,
        key: Hashable,
        fn: Callable[..., Any],
        args: tuple = (),
        kwargs: dict | None = None,
        *,
        timeout: float | None = None,
        exclusive: bool = False,
    ) -> None:
        """Like ``queue`` with the call spelled out, plus options.

        ``args``: a tuple (or list) of positional arguments; ``kwargs``: a mapping of
        keyword arguments, or None. Both are checked here (``pipepool._checks``), not in
        the worker.

        ``timeout``: seconds (a finite number > 0, or None for none), counted from the
        moment a worker starts the task; past it the task fails with ``TaskTimeoutError``
        (what happens to its worker: see the executor's class doc).

        ``exclusive``: refuse the key while it has a dispatch outstanding (queued,
        running, or ended with its terminal event unread) with ``DuplicateKeyError``,
        leaving that dispatch untouched. By default such a key is accepted as one more
        dispatch of it (``Event.dispatch`` tells them apart)."""
        if self._state == "ended":
            raise RuntimeError(f"cannot queue on an ended {type(self).__name__}")
        if not callable(fn):
            _checks.function(fn, "fn")
        # The common case in two type tests; the rest (and every error) in _checks.
        if type(args) is not tuple:
            args = _checks.positionals(args, "args")
        if kwargs is None:
            kwargs = NO_KWARGS
        elif kwargs or type(kwargs) is not dict:
            kwargs = _checks.keywords(kwargs, "kwargs")
        if timeout is not None:
            timeout = _checks.seconds(timeout, "timeout", positive=True, none=True)
        task = Task(next(self._tids), key, fn, args, kwargs, timeout)
        try:  # (costs nothing unless it catches)
            if key not in self._held and key not in self._events:
                # Nothing outstanding: dispatch 1, the hot path's two stores (see ``queue``).
                self._held[key] = task
                self._queue.append(task)
                return
        except TypeError:
            _checks.hashable(key, "key")  # an unhashable key, named
            raise
        deferred = None
        try:
            deferred = _signals.defer()
            if exclusive and (where := self._holding(key)):
                raise DuplicateKeyError(
                    f"key {key!r} is already {_WHERE[where]}: queued with exclusive=True, "
                    "a key takes one dispatch at a time, from queue() until "
                    "get_event_buffer() hands out its terminal event (the dispatch under it "
                    "is untouched)",
                    key=key,
                    where=where,
                )
            self._count(task)
        finally:
            _signals.undefer(deferred)

    def queue(self, key: Hashable, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        """Queue ``fn(*args, **kwargs)`` under ``key``; pickled when it is dispatched.

        Every keyword argument goes to ``fn``: options (a ``timeout``, refusing a key
        already outstanding) are ``queue_call``'s. A key queued again while an earlier
        dispatch of it is outstanding is one more dispatch of it: each ends with its own
        terminal event, marked with its number (``Event.dispatch``)."""
        held = self._held
        try:  # (costs nothing unless it catches)
            if key in held or key in self._events or self._state != "started" or not callable(fn):
                self.queue_call(key, fn, args, kwargs)  # the checks, their errors, a held key
                return
        except TypeError:
            _checks.hashable(key, "key")  # an unhashable key, named; else the error as it was
            raise
        # The last lines of queue_call, inlined: a scheduler's hot path, one call less.
        # Two stores, no deferral: cut short between them, ``_count`` notices.
        task = Task(next(self._tids), key, fn, args, kwargs, None)
        held[key] = task
        self._queue.append(task)


def wait_timeout(timeout: float) -> float:
    """``sync``'s ``timeout`` (seconds to wait at most, a finite number >= 0), checked by
    the rule of its kind (``_checks.seconds``) on every face. A round's call: a caller
    tests the common case (a float in range) inline and calls this for the rest."""
    if type(timeout) is float and 0.0 <= timeout < _INF:
        return timeout
    return _checks.seconds(timeout, "timeout")


def _key_list(keys: Any) -> list[Hashable]:
    """``get_event_buffer``'s ``keys`` as a list, or a TypeError naming it: a string (one
    key where keys were meant) or a non-iterable."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise TypeError(
            "keys must be an iterable of keys (a list or set; one key in a list of its "
            f"own) or None, got {keys!r}"
        )
    return list(keys)
