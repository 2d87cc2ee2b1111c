"""Driving LocalExecutor from an event loop that is not its own (kombu's hub in a Celery
worker, asyncio, a ``selectors`` loop): what to watch, when to step, and workers kept
warm for a service that wants them up before its first task.

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

from ._state import LocalState


class OutsideLoop(LocalState):
    """The public verbs of an outside loop's driver, and workers kept warm."""

    def watched_fds(self) -> tuple[list[int], list[int]]:
        """The fds an outside event loop should watch for this executor now, as
        ``(readable, writable)``, each sorted: when one is ready, or at
        ``next_deadline()``, call ``sync()``, then ask again (the sets change as workers
        start and exit, and as writes wait for room). The readable ones include the
        wake-up pipe that ``wake()`` writes to."""
        self._require_started()
        assert self._loop is not None
        return self._loop.watched()

    def next_deadline(self) -> float:
        """The ``time.monotonic()`` by which ``sync()`` must run again even if no watched
        fd is ready: a task's timeout, a start to notice, the periodic check of worker
        exits, the initializer's back-off. Never more than a quarter of a second ahead
        while the executor is started (the exit check); ask again after each ``sync()``."""
        self._require_started()
        return time.monotonic() + self._wait_bound()

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

    def _wait_bound(self) -> float:
        """How long a wait may last before a step has work to do (LocalExecutor's)."""
        raise NotImplementedError
