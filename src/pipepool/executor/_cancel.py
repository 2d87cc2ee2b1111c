"""LocalExecutor's stopping of tasks: cancel those not started, kill the workers of
those started (``kill``, a timeout).

Cancelling takes a task back where it is: out of the queue, claimed in memory shared with
its worker (docs/design.md, "Cancel claims"), or skipped by the worker on a CANCEL; a
task its worker started first runs on. Killing ends the worker (``_lifecycle.py``), which
is replaced, and the reap step reports its tasks.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Hashable, Iterable

from .. import _checks, _signals
from .._task import DONE as _DONE
from .._task import QUEUED as _QUEUED
from .._task import RUNNING as _RUNNING
from .._task import TaskT
from ..errors import TaskKilledError, TaskTimeoutError
from ..events import State
from ._collect import Collector, cancelled_error
from ._dispatch import Dispatcher
from ._state import _Worker

_FAILED = State.FAILED  # a plain name: events.py says why


class Canceller(Collector[TaskT], Dispatcher[TaskT]):
    """Cancel, kill and time out tasks: the collect step reads the start marks that
    decide which, the dispatch step writes the CANCEL a worker answers."""

    def kill(self, key: Hashable) -> int:
        """Kill the workers running started dispatches of ``key`` (every one started; the
        workers are replaced); those fail with ``TaskKilledError``. Dispatches of the key
        not started go on (``cancel`` those). Returns how many were killed."""
        self._require_started()
        _checks.hashable(key, "key")
        deferred = None
        try:
            deferred = _signals.defer()  # start marks, deadlines and kills change together
            self._read_marks(time.monotonic())  # one that began since the last round counts
            killed = 0
            for w in list(self._workers.values()):
                for t in w.in_flight.values():
                    if t.key == key and t.started and not w.killed:
                        self._kill_worker(w, TaskKilledError(f"task {key!r} was killed on request"))
                        killed += 1
            return killed
        finally:
            _signals.undefer(deferred)

    def cancel(self, key: Hashable) -> int:
        """Cancel every dispatch of ``key`` that has not started; returns how many are
        cancelled or being cancelled (0: all started, ended, or the key is unknown).
        Started dispatches of the key run on (``kill`` stops them).

        Queued: it fails with ``concurrent.futures.CancelledError`` now. Sent to a worker
        and not started (the adaptive depth sends tasks ahead): with the compiled loop it
        is claimed in memory shared with the worker, and fails with ``CancelledError``
        now, unless the worker decided to start it first (docs/design.md, "Cancel
        claims"); else (the pure loop, or a task sent too far ahead to be claimed) the
        worker is told to skip that task (CANCEL, at any ``prefetch``) and it fails with
        ``CancelledError`` once the worker confirms, a round or so later. Either way the
        tasks behind it stay on that worker, not sent again. (When every task a worker
        holds and has not started is cancelled, one REVOKE tells it, and nothing is sent
        again either.) A worker that started it first runs it on, and it reports as
        usual: started or cancelled, never both. Its event says which.
        """
        _checks.hashable(key, "key")
        deferred = None
        try:
            deferred = _signals.defer()
            return len(self._cancel((key,)))
        finally:
            _signals.undefer(deferred)

    def _cancel(self, keys: Iterable[Hashable], *, spare_next: bool = False) -> list[TaskT]:
        """``cancel`` for many keys in one pass, every dispatch of each (signals deferred
        by the caller); the dispatches cancelled now or being cancelled (``_cancel_tasks``)."""
        keys = set(keys)
        tasks = [t for t in self._queue if t.key in keys]
        tasks += [t for t in self._dispatched() if t.key in keys]
        return self._cancel_tasks(tasks, spare_next=spare_next)

    def _cancel_tasks(self, tasks: Iterable[TaskT], *, spare_next: bool = False) -> list[TaskT]:
        """Cancel these tasks (records way out: the face's own records; signals deferred
        by the caller) unless they started; the ones cancelled now (ended with
        CancelledError) or being cancelled (a REVOKE is out). ``spare_next`` (a pool's
        shutdown with cancel_futures) keeps one task per worker slot: the one a worker
        runs or starts next, as the standard library's call queue does."""
        spared = self._next_tasks() if spare_next else set()
        tasks = [t for t in tasks if t.phase != _DONE and t.tid not in spared]
        cancelling: list[TaskT] = []
        queued = {t.tid for t in tasks if t.phase == _QUEUED}
        if queued:
            queue = self._queue
            doomed = [t for t in queue if t.tid in queued]
            if doomed:
                kept = [t for t in queue if t.tid not in queued]
                queue.clear()
                queue.extend(kept)
                for t in doomed:
                    self._finish(t, _FAILED, exception=cancelled_error(t.key))
                    cancelling.append(t)
        sent = {t.tid for t in tasks if t.phase == _RUNNING}
        if sent and self._state == "started":
            self._read_marks(time.monotonic())  # a task that began since the last round runs
            for w in self._workers.values():
                doomed = [t for t in w.in_flight.values() if t.tid in sent and not t.started]
                if doomed and w.claims is not None:
                    doomed = self._claim(w, doomed, cancelling)
                if doomed:
                    for t in doomed:
                        t.cancelling = True
                    cancelling += doomed
                    self._send_cancels(w, doomed)
        return cancelling

    def _claim(self, w: _Worker[TaskT], tasks: list[TaskT], cancelled: list[TaskT]) -> list[TaskT]:
        """Cancel ``w``'s unstarted ``tasks`` by claiming them in shared memory, without
        asking ``w`` (docs/design.md, "Cancel claims"): each claimed one ends cancelled
        now (into ``cancelled``), as a CANCELLED answer would end it; one ``w`` decided
        to start first is left to run. Returns the rest, to cancel by asking ``w``."""
        claims = w.claims
        assert claims is not None
        rest = []
        for t in tasks:
            if t.cancelling or t.seq in w.asked:  # asked already: its answer decides
                rest.append(t)
                continue
            claimed = claims.claim(t.seq)
            if claimed is None:  # not decidable in memory (prefetched deep, or skipped)
                rest.append(t)
            elif claimed:  # it never runs: out of w's tasks, the ones behind stay
                self._take_back(w, t)
                self._finish(t, _FAILED, exception=cancelled_error(t.key))
                cancelled.append(t)
            # else w decided to start it: it runs (its start mark follows)
        return rest

    def _next_tasks(self) -> set[int]:
        """The task each worker slot runs or starts next: a busy worker's first, then as
        many queued tasks as slots hold nothing."""
        busy = [w for w in self._workers.values() if w.in_flight and not w.closing]
        nxt = {next(iter(w.in_flight.values())).tid for w in busy}
        free = max(0, self.parallelism - len(busy))
        nxt.update(t.tid for t in itertools.islice(self._queue, free))
        return nxt

    def _uncancel(self, t: TaskT) -> None:
        """Withdraw a ``cancel`` of task ``t`` still waiting for its worker's answer: if
        that worker skips the task, it runs elsewhere after all."""
        if t.phase == _RUNNING:
            t.cancelling = False

    def _time_out(self, t: TaskT) -> None:
        for w in self._workers.values():
            if w.in_flight.get(t.tid) is t and not w.killed:
                self._kill_worker(
                    w,
                    TaskTimeoutError(
                        f"task {t.key!r} timed out after {t.timeout} s; "
                        f"its worker pid {w.pid} was killed"
                    ),
                )
