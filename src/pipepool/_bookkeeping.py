"""The bookkeeping beneath the scheduler API (``pipepool._api``), which LocalExecutor
and ClusterExecutor share: where each task is (queued, timed), a key's dispatches, and
the one door every outcome leaves by, with the event buffer behind it.

Two ways out. A task's outcome leaves through one door, ``_finish`` (``_succeed`` for many
successes at once), and reaches its reader in one of two ways, chosen by the executor's
class:

* the event buffer (the scheduler API, the default): ``get_event_buffer()`` hands out the
  newest ``Event`` per key, one dispatch of a key per call ("A key's dispatches" below);
* the records (``executor.RecordExecutor``, for a face that keeps the task records
  themselves: a ProcessPoolExecutor's futures *are* its tasks): the face queues records
  it built (its ``hand_over``), and ``take_records()`` hands back, per
  round and in bulk, the ones that ended (their outcome in ``failed`` and ``value``) and
  the ones seen started. No ``Event``, no key look-up and no held key per task: one
  object per task, end to end, typed as the face's record class all the way (this class
  is generic in it: ``TaskT``), so the type checker proves the face takes back what it
  handed over. That class overrides this one's ``_finish`` (sharing its
  first half, ``_end``) and ``_succeed`` (and the collect step's ``_publish_starting``):
  the choice is the class, not a flag tested on the hot path.

A key's dispatches. A scheduler may queue a key again while an earlier dispatch of it is
outstanding (queued, running, or ended with its terminal event unread), as it does for a
retry; each such ``queue()`` is one more dispatch of the key, numbered (``Task.dispatch``,
``Event.dispatch``: 1 for a key that had nothing outstanding, then 2, 3, ...). The count is
kept in three places, all changed under signal deferral but one: ``_held`` names each
key's newest dispatch (the hot path's one store: a key queued with nothing outstanding),
``_outstanding`` counts the not yet ended dispatches of a key that has more than one, and
``_later`` keeps the events that wait for a ``get_event_buffer()`` call because an event
of another dispatch of their key is unread (``_events`` holds one event per key, so two
dispatches' outcomes never share a call and neither replaces the other).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Hashable, Iterable
from concurrent.futures import CancelledError
from typing import Any, Generic

from ._task import DONE, QUEUED, RUNNING, Task, TaskT
from .events import _TERMINAL, Event, State

_SUCCESS, _FAILED = State.SUCCESS, State.FAILED  # plain names: events.py says why
_new = tuple.__new__  # Event(...) through its own __new__ costs twice as much


class Bookkeeping(Generic[TaskT]):
    """The state both executors share, declared here once, and the steps that keep it:
    queue a key's next dispatch, expire timed tasks, finish tasks and publish their
    events. ``SchedulerAPI`` builds the public verbs on it.

    Generic in the record type ``TaskT`` it keeps (``pipepool._task``): ``Task`` for the
    event buffer's executors, a face's own subclass for the records way out."""

    def __init__(self, counters: Iterable[str]) -> None:
        self._state = "new"  # new -> started -> ended
        self._queue: deque[TaskT] = deque()  # queued tasks, in dispatch order
        self._timed: dict[int, TaskT] = {}  # tid -> started task with a deadline
        self._events: dict[Hashable, Event] = {}  # key -> newest event, until read
        self._later: dict[Hashable, list[Event]] = {}  # key -> events of its later
        # dispatches, in order, waiting until _events has none of the key unread
        self._published = 0  # events published so far: did a round produce any?
        self._tids = itertools.count(1)  # task ids, unique per executor
        self._held: dict[Hashable, TaskT] = {}  # key -> its newest dispatch, from queue()
        # until the key's last dispatch ends (may name one a Ctrl-C cut short: _count)
        self._outstanding: dict[Hashable, int] = {}  # key -> its dispatches not yet ended,
        # for a key with more than one (a key with one has no entry: the hot path's case)
        self._stats = dict.fromkeys(counters, 0)  # counters stats() reports
        self._last_progress = time.monotonic()  # when a task last ended (stats())

    # -- what each executor provides ------------------------------------------------------

    def _time_out(self, t: TaskT) -> None:
        """Stop task ``t``, past its deadline, and report it."""
        raise NotImplementedError

    # -- a key's dispatches ---------------------------------------------------------------

    def _count(self, task: TaskT) -> None:
        """Queue ``task`` as the next dispatch of its key, which has one outstanding or an
        event unread (signals deferred by the caller: four pieces of bookkeeping)."""
        key = task.key
        held = self._held
        newest = held.get(key)
        if newest is not None and newest.phase == QUEUED and newest not in self._queue:
            # The hot path's queue() cut short between its two stores: never queued.
            del held[key]
            newest = None
        if newest is not None:  # the key has a dispatch not yet ended: one more
            task.dispatch = newest.dispatch + 1
            self._outstanding[key] = self._outstanding.get(key, 1) + 1
        else:  # all ended: numbering goes on after the newest unread event, if any
            events = self._events
            unread = self._later.get(key) or ([events[key]] if key in events else [])
            task.dispatch = unread[-1].dispatch + 1 if unread else 1
        held[key] = task
        self._queue.append(task)

    def _release(self, key: Hashable) -> None:
        """One dispatch of ``key`` ended (signals deferred by the caller)."""
        left = self._outstanding.get(key)
        if left is None:  # its last: the key's unread events hold it from now on
            self._held.pop(key, None)
        elif left > 2:
            self._outstanding[key] = left - 1
        else:
            del self._outstanding[key]  # one left; _held keeps naming the newest

    # -- timed tasks ----------------------------------------------------------------------

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

    # -- the ways out ---------------------------------------------------------------------

    def _finish(
        self,
        t: TaskT,
        state: State,
        *,
        result: Any = None,
        exception: BaseException | None = None,
        pid: int | None = None,
    ) -> None:
        """Record a task's terminal outcome (the caller removes it from where it was):
        the one door every outcome leaves by (``_succeed``: many successes at once)."""
        self._end(t, state)
        self._release(t.key)
        event = _new(Event, (t.key, state, result, exception, pid, t.dispatch))
        self._publish(event, terminal=True)

    def _end(self, t: Task, state: State) -> None:
        """``_finish``'s half that both ways out share: the task is done, its call freed,
        its outcome counted (``stats()``)."""
        t.phase = DONE
        # Free memory early; a ClusterExecutor task's Dask future is the last reference to
        # it, so Dask forgets the key and its result.
        t.fn = t.args = t.kwargs = t.future = None
        if state is _SUCCESS:
            self._stats["done"] += 1
        else:
            self._stats["failed"] += 1

    def _succeed(self, tasks: list[TaskT], results: list[Any], pid: int | None) -> None:
        """``_finish`` of many successes on one worker (``pid``), in order, in one pass:
        the path of most outcomes (the caller removed each task from where it was)."""
        events, unhold, outstanding = self._events, self._held.pop, self._outstanding
        add = events.setdefault  # one look-up for a key with no unread event: most
        success = _SUCCESS
        for t, result in zip(tasks, results, strict=True):
            t.phase = DONE
            t.fn = t.args = t.kwargs = None  # (no Dask future: LocalExecutor's path)
            key = t.key
            if outstanding and key in outstanding:
                self._release(key)
            else:
                unhold(key, None)  # its last dispatch: its unread events hold the key
            event = _new(Event, (key, success, result, None, pid, t.dispatch))
            old = add(key, event)
            if old is not event:  # an unread event of the key: its dispatch's, or not
                if old[5] == event[5]:
                    events[key] = event
                else:
                    self._wait_turn(event)
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
        # The newest event of a dispatch replaces that dispatch's unread one (a RUNNING
        # event never hides an unread terminal one: a defence, none should follow);
        # another dispatch's waits its turn (``_later``).
        old = self._events.get(event.key)
        if old is None or old.dispatch == event.dispatch:
            if not terminal and old is not None and old.state in _TERMINAL:
                return
            self._events[event.key] = event
        else:
            self._wait_turn(event)
        self._published += 1  # lets sync() tell whether a round produced anything

    def _wait_turn(self, event: Event) -> None:
        """Keep ``event`` until its key's unread event of another dispatch is handed out:
        after the key's waiting events, or in place of its own dispatch's one."""
        waiting = self._later.setdefault(event.key, [])
        for i, other in enumerate(waiting):
            if other.dispatch == event.dispatch:
                if event.state in _TERMINAL or other.state not in _TERMINAL:
                    waiting[i] = event
                return
        waiting.append(event)

    def _pop_events(self, keys: list[Hashable] | None) -> dict[Hashable, Event]:
        if keys is None:
            events, self._events = self._events, {}
        else:
            events = {k: self._events.pop(k) for k in keys if k in self._events}
        later = self._later
        if later:  # each key handed out moves on to its next dispatch's event
            for key in [k for k in later if k in events]:
                waiting = later[key]
                self._events[key] = waiting.pop(0)
                if not waiting:
                    del later[key]
        return events
