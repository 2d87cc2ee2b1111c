"""Driving LocalExecutor from an event loop that is not its own (kombu's hub in a Celery
worker, asyncio, a ``selectors`` loop): what to watch, when to step; and what a
long-running service asks of its pool besides work: workers kept warm before the first
task, a size that changes (grow, shrink), every worker replaced (recycle), and which
task a worker runs now (before signalling it for that task's sake).

``sync()`` is the step: one round that never blocks. ``sync(timeout)`` waits in the
executor's own poll; a caller whose thread already waits in another loop asks instead
what that loop should watch, and steps when it fires::

    readable, writable = ex.watched_fds()   # register these with the outside loop
    deadline = ex.next_deadline()            # and a timer at this time.monotonic()
    # ... the loop reports an fd ready, or the timer fires:
    ex.sync()                                # then ask both again: they change

Both answers change with every round: a worker started or retired adds or removes its
pipe, a write the pipe did not take adds a writable fd until it is flushed, a task that
starts or gets a timeout moves the deadline. The wake-up pipe is always among the
readable fds, so ``wake()`` from another thread (or from the loop's own thread, to have a
step run from the loop instead of inline) makes the loop call ``sync()``.

Nothing here waits, and nothing here changes the bookkeeping: the round is the same
``sync()`` that the executor's own waiting runs (docs/guides/scheduler.md, "Driving it
from your event loop"; docs/design.md, "An outside event loop").
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from .. import _signals
from .._task import TaskT
from ._dispatch import Dispatcher
from ._state import LocalState, _Worker

# s the deadline is ahead at most when nothing is due: every worker's exit (its pipe or
# exit fd), each outcome and ``wake()`` arrive on a watched fd; a finite time for loops
# whose timers take no infinity (selectors, kombu's hub). The futures driver parks as long.
IDLE_STEP = 60.0


class OutsideLoop(LocalState[TaskT]):
    """The public verbs of an outside loop's driver, and workers kept warm."""

    def watched_fds(self) -> tuple[list[int], list[int]]:
        """The fds an outside event loop should watch for this executor now, as
        ``(readable, writable)``, each sorted: when one is ready, or at
        ``next_deadline()``, call ``sync()``, then ask again (the sets change as workers
        start and exit, and as writes wait for room). The readable ones include the
        wake-up pipe that ``wake()`` writes to. A number may come back naming another
        pipe (a replacement worker's): tell them apart by what they name
        (``os.fstat(fd).st_ino``), not by number alone."""
        self._require_started()
        assert self._loop is not None
        return self._loop.watched()

    def next_deadline(self) -> float:
        """The ``time.monotonic()`` by which ``sync()`` must run again even if no watched
        fd is ready: a task's timeout, a start to notice, the initializer's back-off, the
        periodic check of exits of workers without an exit fd (no pidfd: macOS, old
        kernels). Now, when work queued since the last round can be handed out or a
        worker started for it (``queue`` does not step). With nothing due, ``IDLE_STEP``
        (a minute) ahead: always finite. Ask again after each ``sync()``."""
        self._require_started()
        now = time.monotonic()
        if self._queue and self._round_would_dispatch(now):
            return now
        return now + min(self._wait_bound(), IDLE_STEP)

    def _round_would_dispatch(self, now: float) -> bool:
        """Whether a round now would start a worker for queued work or hand some out:
        after a round, queued work waits only for room (or the initializer's back-off)."""
        alive = sum(1 for w in self._workers.values() if not w.closing)
        probing = self._init_failures and alive  # (one worker at a time after failures)
        if alive < self.parallelism and now >= self._init_retry_at and not probing:
            return True
        return bool(self._open_workers(self._depth.depth()))

    @property
    def keep_warm(self) -> bool:
        """Keep ``parallelism`` workers running even with no work (False by default:
        workers start while work is outstanding). For a service whose first task should
        find a worker up, or whose workers set themselves up at start (a Celery pool's
        ``worker_process_init``): each round replaces a worker that exited, within the
        initializer's back-off, as it would for work. Set it before ``start()``."""
        return self._keep_warm

    @keep_warm.setter
    def keep_warm(self, value: bool) -> None:
        if self._state != "new":
            # Its workers say when they are up (UP), so that one that dies idle is not
            # taken for a failed start-up: a fork pool's zygote holds the setting from
            # start() on, so it is fixed then.
            raise RuntimeError("keep_warm is set before start()")
        self._keep_warm = bool(value)

    def running_on(self, pid: int) -> Hashable | None:
        """The key of the task the worker ``pid`` runs now, by its start mark read now;
        None if it runs none of the tasks sent to it (idle, or the outcome of its last is
        in its pipe) or is no live worker of this pool. Ask before signalling a worker for
        one task's sake: one that ended that task and began the next since the last round
        names the next one."""
        self._require_started()
        assert self._marks is not None
        for w in self._workers.values():
            if w.pid == pid and not w.closing:
                mark = self._marks.read(w.slot)
                for t in w.in_flight.values():
                    if t.seq == mark:
                        return t.key
                return None
        return None

    def grow(self, count: int = 1) -> None:
        """Run ``count`` more workers (``parallelism`` grows by ``count``): the next
        rounds start them, as they start any (for work, or at once with ``keep_warm``)."""
        if count < 1:
            raise ValueError("grow() takes a count of at least 1")
        self.parallelism += count

    def shrink(self, count: int = 1) -> int:
        """Stop up to ``count`` idle workers now and run that many fewer (``parallelism``
        shrinks by as many, down to 0 at least). Idle: up and holding no task; each reads
        the end of its task pipe, exits and counts as recycled. Returns how many: 0 when
        every worker is busy (ask again later, as Celery's autoscaler does)."""
        if count < 1:
            raise ValueError("shrink() takes a count of at least 1")
        self._require_started()
        deferred = None
        try:
            deferred = _signals.defer()
            idle = [w for w in self._workers.values() if self._stoppable(w)][:count]
            for w in idle:
                self._stop_idle(w)
            self.parallelism = max(0, self.parallelism - len(idle))
            return len(idle)
        finally:
            _signals.undefer(deferred)

    def recycle(self) -> None:
        """Replace every worker: an idle one now, a busy one once its task ends (it is
        sent nothing more, and what it holds and has not started goes to the others).
        Replacements start as any worker does: for work, or at once with ``keep_warm``.
        (A Celery worker's ``pool_restart``: the new ones import the code anew.)"""
        self._require_started()
        deferred = None
        try:
            deferred = _signals.defer()
            for w in self._workers.values():
                if w.closing or w.retiring:
                    continue
                w.retiring = True
                self._retiring.add(w.wid)
                if any(not t.started for t in w.in_flight.values()):
                    Dispatcher._send_revoke(w)  # its answer queues them again
            self._stop_drained()
        finally:
            _signals.undefer(deferred)

    # -- the parts (signals deferred by the caller) ----------------------------------------

    def _stoppable(self, w: _Worker[TaskT]) -> bool:
        """``w`` may be stopped now: it holds no task and is not going already, and it is
        up (a warm pool's worker still starting would write UP into a closed pipe)."""
        return (
            not w.in_flight
            and not w.closing
            and not w.retiring
            and (w.heard or not self._keep_warm)
        )

    def _stop_idle(self, w: _Worker[TaskT]) -> None:
        """Close ``w``'s pipes: it reads EOF and exits; the reap step retires it, as it
        does a worker whose pipe closed (checked every round, killed past EXIT_GRACE)."""
        self._remove_channel(w)
        w.closing = True
        w.closed_at = time.monotonic()

    def _stop_drained(self) -> None:
        """Stop each retiring worker that holds nothing now (a step of the round while
        ``recycle()`` has workers to retire)."""
        for wid in list(self._retiring):
            w = self._workers.get(wid)
            if w is None or w.closing:  # exited or stopped meanwhile
                self._retiring.discard(wid)
            elif not w.in_flight and (w.heard or not self._keep_warm):
                self._retiring.discard(wid)
                self._stop_idle(w)

    def _remove_channel(self, w: _Worker[TaskT]) -> list[tuple[int, int, bytes]]:
        """Close a worker's parent ends (WorkerLifecycle's)."""
        raise NotImplementedError

    def _wait_bound(self) -> float:
        """How long a wait may last before a step has work to do (LocalExecutor's)."""
        raise NotImplementedError
