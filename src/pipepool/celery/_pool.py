"""The pool's core: one LocalExecutor, the jobs Celery applied, and the step that turns
the executor's events into Celery's callbacks (``_jobs``), soft time limits into SIGUSR1,
and a broken initializer into the worker's shutdown.

One thread drives it at a time (the hub's, or the driver thread: ``_drive``), and only
``step(wait)`` waits. A step is the executor's round, then the delivery of its events
with Python's signal handlers deferred (Celery's cold shutdown runs from a signal
handler, and would otherwise run the pool's shutdown inside a callback); callbacks that
apply more jobs (the worker's semaphore hands a free slot to the next request at once)
get them dispatched in the same step.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import math
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from .. import _signals
from ..events import Event, State
from ..executor import LocalExecutor
from . import _child
from ._jobs import Job

log = logging.getLogger("pipepool.celery")

DELIVERY_ROUNDS = 8  # a step dispatches what its callbacks applied this many times at
# most: each time is a round of the executor; a burst beyond waits for the next step
EX_BROKEN = 1  # the Celery worker's exit status when its pool cannot start workers


class PoolCore:
    """The executor, the jobs, and the step."""

    def __init__(
        self,
        limit: int,
        *,
        app: Any,
        hostname: str | None,
        start_method: str,
        max_tasks_per_child: int | None,
        max_memory_per_child: int | None,
        soft_timeout: float | None,
        timeout: float | None,
        semaphore: Any,
        loop_impl: str | None = None,
    ) -> None:
        self.soft_timeout = soft_timeout or None  # the worker's defaults, in s
        self.timeout = timeout or None
        self.max_memory = max_memory_per_child or None  # KiB, checked in the child
        self.semaphore = semaphore  # released once per job that ends (uses_semaphore)
        self.executor = LocalExecutor(
            max(1, limit),
            start_method=start_method,
            max_tasks_per_child=max_tasks_per_child or None,
            initializer=_child.init,
            initargs=(app, hostname, start_method),
            loop_impl=loop_impl,
        )
        self.executor.parallelism = limit  # 0 too: an autoscaled worker may start empty
        self.executor.keep_warm = True  # prefork's children are up before any task
        self.jobs: dict[Job, None] = {}  # not ended, in apply order
        self.closing = False  # close() or stop(): no more applies
        self.delivering = False  # in a delivery: a terminate waits until it is over
        self._numbers = itertools.count(1)
        self._applied = 0  # jobs queued ever: did a delivery's callbacks apply more?
        self._soft: list[tuple[float, int, Job]] = []  # (deadline, number, job): a heap
        self._to_cancel: list[Job] = []  # terminated during a delivery, cancelled after it
        self._undelivered: dict[Any, Event] = {}  # left by a callback that raised
        self._broken_said = False

    # -- jobs in -------------------------------------------------------------------------

    def make_job(
        self,
        args: Any,
        on_terminate: Callable[[Job], None],
        *,
        callback: Any = None,
        accept_callback: Any = None,
        timeout_callback: Any = None,
        error_callback: Any = None,
        soft_timeout: float | None = None,
        timeout: float | None = None,
        correlation_id: str | None = None,
        callbacks_propagate: tuple[type[BaseException], ...] = (),
        **_: Any,
    ) -> Job:
        """The record of one apply (any thread may make it; ``enqueue`` queues it).
        The keywords are Celery's (``waitforslot`` and others it passes are ignored)."""
        name = str(args[0]) if args else "job"  # a trace's first argument: the task name
        return Job(
            next(self._numbers),
            name,
            callback=callback,
            accept_callback=accept_callback,
            timeout_callback=timeout_callback,
            error_callback=error_callback,
            soft_timeout=soft_timeout or self.soft_timeout,
            timeout=timeout or self.timeout,
            correlation_id=correlation_id,
            callbacks_propagate=tuple(callbacks_propagate or ()),
            on_terminate=on_terminate,
        )

    def enqueue(self, job: Job, target: Callable[..., Any], args: Any, kwargs: Any) -> None:
        """Queue ``job``'s call in the executor; the next round dispatches it."""
        call = (target, tuple(args or ()), dict(kwargs or {}), job.soft_timeout, self.max_memory)
        self.executor.queue_call(job, _child.run, call, timeout=job.timeout)
        self.jobs[job] = None
        self._applied += 1

    def cancel(self, job: Job) -> None:
        """``job.terminate()``: take it back unless it started (its outcome says which)."""
        if self.delivering:  # the executor's verbs defer signals too: not inside ours
            self._to_cancel.append(job)
        elif not job.done:
            self.executor.cancel(job)

    def flush(self) -> None:
        """Celery's flush (its connection is gone, or it stops): take back every job not
        accepted yet. They end with no callback, and the broker delivers them again; one
        that had started runs on and reports as usual."""
        for job in list(self.jobs):
            if job.accepted_at is None:
                self.executor.cancel(job)

    def terminate_job(self, pid: int, signum: int) -> None:
        """Signal the child ``pid`` for the job it runs (revoke with terminate): only if
        it still runs that job (the start mark read now says so), as billiard kills it."""
        job = next((j for j in self.jobs if j.pid == pid and not j.done), None)
        if job is None or self.executor.running_on(pid) is not job:
            return
        job.terminated = signum
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    # -- the step ------------------------------------------------------------------------

    def step(self, wait: float = 0.0, ready: Callable[[], bool] | None = None) -> None:
        """A round (waiting up to ``wait`` s if it found nothing, unless ``ready()``),
        the delivery of its events, the soft limits due, and the check for a broken pool."""
        ex = self.executor
        ex.sync(wait, ready)
        for _ in range(DELIVERY_ROUNDS):
            applied = self._applied
            self._deliver()
            while self._to_cancel:
                self.cancel(self._to_cancel.pop())
            if self._applied == applied:
                break
            ex.sync()  # what the callbacks applied goes out now, not a step later
        self._fire_soft_limits()
        if ex.broken is not None and not self._broken_said:
            self._broken_said = True
            self._stop_the_worker(ex.broken)

    def next_deadline(self) -> float:
        """When ``step`` must run even if no fd is ready: the executor's, or a soft limit."""
        deadline = self.executor.next_deadline()
        if self._soft:
            deadline = min(deadline, self._soft[0][0])
        return deadline

    def _deliver(self) -> None:
        """Hand the round's events to the jobs' callbacks, signals deferred around them."""
        events = self._undelivered or self.executor.get_event_buffer()
        self._undelivered = {}
        if not events:
            return
        deferred = None
        left = iter(list(events.items()))
        try:
            deferred = _signals.defer()
            self.delivering = True
            for job, event in left:
                if event.state is State.RUNNING:
                    if not job.done:
                        job.accept(event.pid)
                        self._arm_soft_limit(job)
                    continue
                self.jobs.pop(job, None)
                job.finish(event)
                self._release()
        except BaseException:
            self._undelivered = dict(left)  # a callback raised: the rest, next step
            raise
        finally:
            self.delivering = False
            _signals.undefer(deferred)

    def _release(self) -> None:
        if self.semaphore is not None:
            self.semaphore.release()

    def _arm_soft_limit(self, job: Job) -> None:
        if job.soft_timeout and job.accepted_at is not None:
            heapq.heappush(self._soft, (job.accepted_at + job.soft_timeout, job.number, job))

    def _fire_soft_limits(self) -> None:
        """At a job's soft limit: tell Celery, then SIGUSR1 its child (which raises
        ``SoftTimeLimitExceeded`` in the task only if that task has run its limit)."""
        soft = self._soft
        now = time.monotonic()
        while soft and soft[0][0] <= now:
            _, _, job = heapq.heappop(soft)
            if job.done or job.pid is None or self.executor.running_on(job.pid) is not job:
                continue
            job.soft_limit_reached()
            with contextlib.suppress(ProcessLookupError):
                os.kill(job.pid, _child.SOFT_LIMIT_SIGNAL)

    def _stop_the_worker(self, error: BaseException) -> None:
        """The initializer kept failing: no child can run a task. The Celery worker stops
        (warm shutdown, exit status 1); its queued tasks are not acknowledged, so the
        broker delivers them again elsewhere."""
        from celery.worker import state

        log.critical("pipepool: %s; stopping this worker", error)
        state.should_stop = EX_BROKEN

    # -- the end -------------------------------------------------------------------------

    def drain(self, wait: float, running: Callable[[], bool] = lambda: True) -> None:
        """Step until every job has ended (warm shutdown), while ``running()``."""
        while self.jobs and running():
            self.step(min(wait, max(0.0, self.next_deadline() - time.monotonic())))

    def terminate(self) -> None:
        """Cold: every child ends now (SIGTERM, SIGKILL after a second); what had ended
        is delivered, the rest gets no callback (the broker delivers it again)."""
        self.closing = True
        ex = self.executor
        ex.terminate()
        self._deliver()
        self.jobs.clear()

    def end(self) -> None:
        """After ``drain``: stop the children (their pipes close; they exit)."""
        self.closing = True
        ex = self.executor
        for job in list(self.jobs):  # none, unless the drain was cut short
            ex.cancel(job)
        ex.end()
        self._deliver()


def signal_number(signum: int | str | None) -> int:
    """A signal Celery names (a number, or a name such as "SIGTERM"; None: SIGTERM)."""
    if signum is None:
        return int(signal.SIGTERM)
    if isinstance(signum, str):
        name = signum.upper()
        return int(getattr(signal, name if name.startswith("SIG") else f"SIG{name}"))
    return int(signum)


INFINITY = math.inf
