"""LocalExecutor: its public API and the round.

Both are ``LocalCore``'s, generic in the task record type it keeps (``pipepool._task.TaskT``):
``LocalExecutor`` is that core over plain ``Task`` records plus the scheduler's verbs that
make them (``queue``, ``queue_call``: ``pipepool._api.SchedulerAPI``), and
``RecordExecutor`` (``_records.py``) is it over a face's own records.

The steps of a round live beside it, as methods of the same object (one owner of the
bookkeeping, its state declared once in ``_state.py``): ``_collect.py`` (collect),
``_reap.py`` (reap and retire workers), ``_lifecycle.py`` (start, kill and stop them),
``_dispatch.py`` (dispatch and revoke), ``_cancel.py`` (cancel, kill and time out tasks),
``pipepool._bookkeeping`` (expire, and the rest ClusterExecutor shares); the adaptive
depth and revocation policy is ``_depth.py``; ``_outside.py`` holds the verbs of an event loop
that drives it from outside (what to watch, when to step).

Data flow (one pipe pair per worker, whose parent ends only the PipeLoop touches; plus a
control pipe per worker that carries nothing but REVOKE and CANCEL, written by the
dispatch step)::

    queue(key, fn, *args) ─► _queue ─► dispatch ─► PipeLoop.send ─► activity pipe ─► worker
                                                                                       │
    get_event_buffer() ◄── _events ◄── collect ◄── PipeLoop.pump ◄── result pipe ◄─────┘

``sync()`` is one round of named steps: collect (frames and closed channels), reap
(retire workers that exited), expire (kill tasks past their timeout), start workers
(while work is outstanding and fewer than ``parallelism`` are alive), revoke (at the
adaptive depth, take back the tasks sent behind one that overruns) and dispatch (give
each worker with room the next task). It never blocks on a pipe: the loop writes what fits
and keeps the rest.

Bookkeeping is exact because every step that mutates it runs with Python's signal
handlers deferred (``_signals``): a KeyboardInterrupt lands between steps, never inside
one, so each task is at every return to user code in exactly one place: ``_queue``
(queued), a worker's ``in_flight`` (running), or reported (its terminal event is in
``_events``, or in ``_later`` behind another dispatch's of its key). Nothing is counted
separately but a key's dispatches (``pipepool._bookkeeping``, changed under deferral), so no
count can drift or go negative.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any

from .. import _checks, _signals
from .._api import SchedulerAPI, wait_timeout
from .._cpus import available_cpus
from .._task import Task, TaskT
from ..errors import InitializerError, TaskKilledError
from ..worker import signal_group
from ._cancel import Canceller
from ._lifecycle import _signal_process
from ._outside import OutsideLoop
from ._reap import REAP_INTERVAL, Reaper

_INF = float("inf")
TERM_GRACE = 1.0  # s between SIGTERM and SIGKILL in terminate()
START_POLL = 0.002  # s a wait may last while a worker holds tasks and none is known to
# run: no frame says "started" (start marks do, without a wake-up), so timeouts, RUNNING
# events and revocation learn of a start at most this late. Tiny tasks never wait this
# long (their outcomes wake us); long ones are seen started within it and stop the polling.
STARTUP_POLL = 0.01  # s, the same for a worker still starting up (nothing heard from it
# yet): a spawned one takes ~50 ms, and waking every 2 ms meanwhile took CPU from the
# very worker being waited for. Its first task's start is seen at most this late.


class LocalCore(Reaper[TaskT], Canceller[TaskT], OutsideLoop[TaskT]):
    """LocalExecutor's body, generic in the task record type it keeps: its arguments,
    public API and round, all but ``queue`` and ``queue_call`` (``SchedulerAPI``'s, which
    make plain ``Task`` records). ``LocalExecutor`` is this over ``Task``;
    ``RecordExecutor`` is this over the records its face builds and hands over."""

    def __init__(
        self,
        parallelism: int | None = None,
        *,
        start_method: str | None = None,
        prefetch: int | None = None,
        pipe_size: int | None = None,
        max_tasks_per_child: int | None = None,
        initializer: Callable[..., object] | None = None,
        initargs: Iterable[Any] = (),
        loop_impl: str | None = None,
        preload: Iterable[str] = (),
    ) -> None:
        parallelism = _checks.count(parallelism, "parallelism", none=True)
        prefetch = _checks.count(prefetch, "prefetch", none=True)
        pipe_size = _checks.count(pipe_size, "pipe_size", none=True)
        max_tasks_per_child = _checks.count(max_tasks_per_child, "max_tasks_per_child", none=True)
        initializer = _checks.function(initializer, "initializer", none=True)
        initargs = _checks.positionals(initargs, "initargs")
        loop_impl = _checks.choice(loop_impl, "loop_impl", ("cython", "python"))
        preload = _checks.module_names(preload, "preload")
        if start_method is not None and not isinstance(start_method, str):
            _checks.choice(start_method, "start_method", ("fork", "spawn", "forkserver"))
        self.parallelism_reason = f"{parallelism} given"
        if parallelism is None:
            parallelism, self.parallelism_reason = available_cpus()  # see pipepool._cpus
        super().__init__(
            parallelism,
            start_method=_standard_start_method(start_method),
            prefetch=prefetch,
            pipe_size=pipe_size,
            max_tasks_per_child=max_tasks_per_child,
            initializer=initializer,
            initargs=initargs,
            loop_impl=loop_impl,
            preload=preload,
        )

    # -- public API -------------------------------------------------------------------

    def start(self) -> None:
        """Create the loop and the lifeline; workers start as soon as work is queued."""
        if self._state != "new":
            raise RuntimeError(f"LocalExecutor already {self._state}")
        self._open()
        self._state = "started"

    def sync(self, timeout: float = 0.0, ready: Callable[[], bool] | None = None) -> None:
        """One round: collect results, reap and start workers, dispatch what fits.

        Never blocks on a pipe. With ``timeout`` > 0, a round that produced no event
        waits up to that long for something to happen (a result, room in a pipe, a
        worker exit) and runs once more: work queued just before is dispatched first,
        not after the wait. ``timeout`` is a finite number of seconds >= 0. ``ready``
        (for a caller woken by other threads) is asked after the first round, which
        drained the wake-up pipe: true skips the wait. A thread that changes what
        ``ready`` reads and then calls ``wake()`` is never missed.
        """
        if self._state != "started":
            self._require_started()
        if type(timeout) is not float or not 0.0 <= timeout < _INF:
            timeout = wait_timeout(timeout)  # an int, or an error: a float costs no call
        if ready is not None and not callable(ready):
            _checks.function(ready, "ready", none=True)
        published = self._published
        self._round()
        if timeout > 0 and self._published == published and not (ready and ready()):
            self._idle(timeout)
            self._round()

    def _idle(self, timeout: float, *, poll_first: bool = True) -> None:
        """Wait, never deferred, until a worker writes, ``wake()``, ``timeout`` or the
        nearest deadline of a step (``_wait_bound``): the wait between two rounds.

        An outcome due within microseconds (a worker holds a task, and tasks have been
        shorter than a spin) is polled for first, for a bounded time and only while a
        core is free (``_spin``): no wake-up to pay when it comes. ``poll_first=False``:
        a waiter nobody waits on (a pool's driver thread) sleeps at once."""
        loop = self._loop
        assert loop is not None
        spin = self._spin
        if (
            poll_first
            and spin is not None
            and timeout > 0
            and self._depth.task_time < spin.limit
            and any(w.in_flight for w in self._workers.values())
            and spin.wait(lambda: loop.wait(0), timeout)
        ):
            return
        loop.wait(min(timeout, self._wait_bound()))

    def _round(self) -> None:
        deferred = None
        try:
            deferred = _signals.defer()
            self._steps()
        finally:
            _signals.undefer(deferred)

    def _steps(self) -> None:
        """The steps of a round, for a caller whose own step defers signals around them
        (a face that feeds, runs the round and delivers under one deferral)."""
        self._collect()
        self._reap()
        if self._retiring:  # recycle(): stop the retiring workers that hold nothing now
            self._stop_drained()
        self._expire()
        self._start_workers()
        self._revoke_trapped()
        self._dispatch()
        if self._zygote_due and self._workers:  # fork: first workers up, their tasks sent
            self._fork_due_zygote()

    def _dispatched(self) -> Iterable[TaskT]:
        return (t for w in self._workers.values() for t in w.in_flight.values())

    def has_work(self) -> bool:
        """True while any task is queued or in flight."""
        return bool(self._queue) or any(w.in_flight for w in self._workers.values())

    def _shut_down(self) -> None:
        self._stop_workers()

    def terminate(self) -> None:
        """Stop now: SIGTERM the workers, SIGKILL after a bound. Tasks a worker had
        started fail with ``TaskKilledError``; every other one (queued, or sent to a
        worker that had not started it, by its final start mark) fails with
        ``CancelledError``, as a cancelled task does."""
        if self._state != "started":
            self._state = "ended"
            return
        for w in self._workers.values():
            _signal_process(w.proc, "terminate")
        deadline = time.monotonic() + TERM_GRACE
        for w in self._workers.values():
            w.proc.join(max(0.0, deadline - time.monotonic()))
            if w.proc.exitcode is None:
                _signal_process(w.proc, "kill")
            signal_group(w.pid, signal.SIGKILL)  # what outlived SIGTERM, if it did
        deferred = None
        try:
            deferred = _signals.defer()
            self._collect()  # results that made it out before the signal still count
            for w in list(self._workers.values()):
                w.proc.join()
                w.kill_reason = w.kill_reason or TaskKilledError("the executor was terminated")
                self._retire(w, w.proc.exitcode, requeue=False)
            self._cancel_queued()
        finally:
            _signals.undefer(deferred)
        self._close()

    def stats(self) -> dict[str, Any]:
        """Counters from the parent's own state (no IPC): workers and tasks. Of the
        workers that ended, ``worker_crashes`` died on their own (or were killed for
        misbehaving), ``workers_killed`` were killed on purpose (``kill()``, a timeout,
        ``terminate()``), ``worker_recycles`` exited cleanly."""
        busy = sum(1 for w in self._workers.values() if w.in_flight and not w.closing)
        alive = sum(1 for w in self._workers.values() if not w.closing)
        return {
            "workers_alive": alive,
            "workers_busy": busy,
            "workers_idle": alive - busy,
            "tasks_queued": len(self._queue),
            "tasks_running": sum(len(w.in_flight) for w in self._workers.values()),
            "tasks_done": self._stats["done"],
            "tasks_failed": self._stats["failed"],
            "tasks_lost": self._stats["lost"],
            "worker_crashes": self._stats["crashes"],
            "workers_killed": self._stats["killed"],
            "worker_recycles": self._stats["recycles"],
            "workers_started": self._stats["started_workers"],
            "tasks_revoked": self._stats["revoked"],
            "dispatch_depth": self.dispatch_depth,
            "last_progress": self._last_progress,
        }

    def worker_pids(self) -> list[int]:
        """Pids of the live workers (one that exited, say recycled, and is not retired
        yet is not listed: multiprocessing may have reaped it, and its pid be free)."""
        return [
            w.pid
            for w in self._workers.values()
            if w.pid is not None and not w.closing and w.proc.exitcode is None
        ]

    @property
    def broken(self) -> InitializerError | None:
        """The error queued work now fails with (the initializer kept failing), or None."""
        return self._broken

    def wake(self) -> None:
        """Make a ``sync(timeout=...)`` waiting in another thread return now. The one
        method safe to call from another thread; not after ``end()``/``terminate()``."""
        assert self._loop is not None
        self._loop.wake()

    def prestart(self) -> None:
        """Start every missing worker now, work or not (``sync`` starts them only while
        work is outstanding), from the calling thread: a fork from a thread of the
        caller's choosing, and before anything can forbid it (interpreter shutdown).
        Work already queued is sent to them at once; then, under fork, the pool's zygote
        is forked (docs/design.md, "The zygote"), before the caller starts a thread."""
        self._require_started()
        deferred = None
        try:
            deferred = _signals.defer()
            alive = sum(1 for w in self._workers.values() if not w.closing)
            self._start_batch(self.parallelism - alive)
            self._dispatch()
            self._fork_due_zygote()
        finally:
            _signals.undefer(deferred)

    # -- helpers ----------------------------------------------------------------------------

    @property
    def prefetch(self) -> int | None:
        """Tasks a worker may hold ahead, or None: the adaptive depth (``_depth``)."""
        return self._depth.prefetch

    @property
    def dispatch_depth(self) -> int:
        """Tasks a worker may hold ahead now: ``prefetch``, or the adaptive depth."""
        return self._depth.depth()

    def _wait_bound(self) -> float:
        """How long a wait may last before a step in this object has work to do.

        No bound of its own while nothing is due: every worker's exit wakes the loop (its
        pipe's EOF, or its exit fd when a child holds that pipe open), outcomes do, and
        ``wake()`` does. Only a worker with no exit fd (no pidfd here) needs the periodic
        reap to look for an exit nothing would wake us for (``REAP_INTERVAL``)."""
        bound = _INF
        if any(w.closing for w in self._workers.values()):
            bound = 0.001  # an exit code is due any moment
        else:  # a start mark may move without waking us
            for w in self._workers.values():
                if w.exit_fd < 0:
                    bound = min(bound, REAP_INTERVAL)
                if w.in_flight and w.current is None:
                    if w.heard:
                        bound = START_POLL
                        break
                    bound = min(bound, STARTUP_POLL)
        bound = self._deadline_bound(bound)
        bound = self._depth.wait_bound(self._workers.values(), bound)
        if self._queue and self._init_retry_at > time.monotonic():
            bound = min(bound, self._init_retry_at - time.monotonic())
        return max(bound, 0.0)


class LocalExecutor(LocalCore[Task], SchedulerAPI):
    """Run callables in a pool of local worker processes, scheduler style.

    ``queue`` work under a key, call ``sync`` (or ``heartbeat``) regularly, read outcomes
    from ``get_event_buffer``. Every queued task ends with exactly one terminal event.
    A task past its ``timeout`` (``queue_call``) has its worker killed and replaced.

    ``parallelism`` is how many workers it runs; ``parallelism_reason`` says why that many
    ("4 given", or for ``parallelism=None`` the limit that decided: the affinity mask or a
    cgroup CPU quota, ``pipepool._cpus``).

    ``loop_impl`` picks the parent's loop: "cython", "python" (its pure-Python twin), or
    None for the compiled one if it was built (tests and benchmarks compare the two).

    ``preload`` names modules to import once, where workers are made from, so that no
    worker imports them again, a replacement after ``max_tasks_per_child`` or a crash
    included: under fork this process imports them at ``start()`` (workers are copies of
    it); under spawn and forkserver ``start()`` makes the pool's zygote with that start
    method, which imports them (and the main module, as every such child does) and
    forks every worker. A module that fails makes ``start()`` raise ``PreloadError``
    naming it and why, with nothing left running (docs/design.md, "The zygote").

    Every argument is checked here, by the rule of its kind (``pipepool._checks``):
    ``parallelism``, ``prefetch``, ``pipe_size`` (bytes) and ``max_tasks_per_child`` are
    integers >= 1 (or None), ``initializer`` a callable (or None), ``initargs`` a tuple
    or list, ``preload`` module names; a TypeError or ValueError names the one that is not.
    """


def _standard_start_method(name: str | None) -> str | None:
    """The start method to use for ``name``: one of the standard three, or None.

    A library may register its own start method with ``multiprocessing`` and make it the
    default: inside a loky worker (joblib's default backend) the default context is
    named "loky". Neither spawn nor forkserver can start a child there (the child's
    preparation sets the parent's default start method before it can import loky, and
    fails), so pipepool forks. A name nobody registered is still an error.
    """
    if name is None:
        # Resolves (and, as get_context(None) would, fixes) the default start method.
        name = multiprocessing.get_start_method()
        if name in ("fork", "spawn", "forkserver"):
            return None
    elif name in ("fork", "spawn", "forkserver"):
        return name
    try:
        multiprocessing.get_context(name)
    except ValueError:
        raise ValueError(
            "start_method must be 'fork', 'spawn', 'forkserver' (or another start method "
            f"multiprocessing knows) or None, got {name!r}"
        ) from None
    logging.getLogger("pipepool").debug(
        "pipepool: start method %r is not a standard one; forking instead", name
    )
    return "fork"
