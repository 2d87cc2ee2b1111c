"""A job: one ``apply_async`` of the Celery worker, its callbacks, and how each outcome
the executor reports reaches them, in the order billiard's pool calls them.

The job is the executor's key (hashable by identity; its repr names the Celery task, so
the executor's messages do too) and what ``apply_async`` returns: Celery keeps a weak
reference and calls ``terminate(signum)`` on it to revoke a task not accepted yet.

Outcome to callbacks (Celery's ``Request`` is on the other side of each):

=======================================  ===============================================
the executor reports                      the callbacks, in order
=======================================  ===============================================
RUNNING (the child's start mark)         ``accept_callback(pid, time)``
SUCCESS ``(True, value)``                (accept if not yet), ``callback(value)``
SUCCESS ``(False, ExceptionInfo)``       (accept if not yet), ``error_callback(einfo)``
TaskTimeoutError (the hard limit)        ``error_callback(TimeLimitExceeded)``, then
                                         ``timeout_callback(soft=False, timeout=...)``
WorkerLostError of a terminated job      ``error_callback(Terminated(signum))``
WorkerLostError                          ``error_callback(WorkerLostError)``: billiard's
                                         class, its text the signal and the likely cause
CancelledError of a terminated job       accept (with this process's pid: nothing to
                                         kill), ``error_callback(Terminated(signum))``
any other failure                        ``error_callback(einfo)``
=======================================  ===============================================

A job Celery discarded before it started (``flush``: the connection went, or the worker
stops) and a job failed by the pool's own end (cold shutdown, a broken initializer) get
no callback: their messages are not acknowledged, so the broker delivers them again. A
discarded job that had started runs on and is reported as usual. Whatever its end, a job
releases the worker's semaphore once (``uses_semaphore``: a release missed stops the
worker consuming; Celery's own ``clear()`` after a lost connection makes any extra one
harmless, the semaphore being bounded).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import CancelledError
from typing import Any

from ..errors import InitializerError, TaskKilledError, TaskTimeoutError, WorkerLostError
from ..events import Event, State

log = logging.getLogger("pipepool.celery")

Callback = Callable[..., Any] | None


class Job:
    """One ``apply_async``: its call, limits and callbacks, and how far it got."""

    __slots__ = (
        "__weakref__",
        "accept_callback",
        "accepted_at",
        "callback",
        "callbacks_propagate",
        "correlation_id",
        "done",
        "error_callback",
        "name",
        "number",
        "on_terminate",
        "pid",
        "soft_timeout",
        "terminated",
        "timeout",
        "timeout_callback",
    )

    def __init__(
        self,
        number: int,
        name: str,
        *,
        callback: Callback,
        accept_callback: Callback,
        timeout_callback: Callback,
        error_callback: Callback,
        soft_timeout: float | None,
        timeout: float | None,
        correlation_id: str | None,
        callbacks_propagate: tuple[type[BaseException], ...],
        on_terminate: Callable[[Job], None],
    ) -> None:
        self.number = number  # the pool's own count of applies
        self.name = name  # the Celery task's name (its type), for messages
        self.callback = callback
        self.accept_callback = accept_callback
        self.timeout_callback = timeout_callback
        self.error_callback = error_callback
        self.soft_timeout = soft_timeout  # s from accept to SIGUSR1, or None
        self.timeout = timeout  # s from accept to the kill (the executor's task timeout)
        self.correlation_id = correlation_id  # the Celery task id
        self.callbacks_propagate = callbacks_propagate  # raised out of a callback as-is
        self.on_terminate = on_terminate  # the pool's: take it back from the executor
        self.pid: int | None = None  # the child running it, once accepted
        self.accepted_at: float | None = None  # time.monotonic() of the accept
        self.terminated: int | None = None  # the signal terminate() or terminate_job() sent
        self.done = False  # it ended (its callbacks called, or none due)

    def __repr__(self) -> str:
        return f"{self.name}[{self.correlation_id}]"

    # -- what Celery calls on the object apply_async returned ---------------------------

    def terminate(self, signum: int) -> None:
        """Celery's revoke of a task not accepted yet: it will not run (it ends with
        ``Terminated``); once accepted, Celery calls ``terminate_job`` instead."""
        self.terminated = signum
        if not self.done:
            self.on_terminate(self)

    def accepted(self) -> bool:
        return self.accepted_at is not None

    def ready(self) -> bool:
        return self.done

    def worker_pids(self) -> list[int]:
        return [self.pid] if self.pid is not None else []

    # -- the callbacks -----------------------------------------------------------------

    def _call(self, fn: Callback, *args: Any, **kwargs: Any) -> None:
        """A callback, as billiard calls it: its error is logged, not raised (but
        ``MemoryError`` and the worker's ``callbacks_propagate``)."""
        if fn is None:
            return
        try:
            fn(*args, **kwargs)
        except MemoryError:
            raise
        except self.callbacks_propagate:
            raise
        except Exception as exc:
            log.error("Pool callback raised exception: %r", exc, exc_info=True)

    def accept(self, pid: int | None, when: float | None = None) -> None:
        """The child began it (``when``: ``time.monotonic()``, now if not given)."""
        if self.accepted_at is not None:
            return
        self.pid = pid
        self.accepted_at = time.monotonic() if when is None else when
        self._call(self.accept_callback, pid, self.accepted_at)

    def soft_limit_reached(self) -> None:
        """Tell Celery the soft limit is up (it logs); the pool signals the child."""
        self._call(self.timeout_callback, soft=True, timeout=self.soft_timeout)

    def finish(self, event: Event) -> bool:
        """Call the callbacks for ``event``, a terminal one of this job; False if it gets
        none (flushed, or failed by the pool's own end: the broker delivers it again)."""
        self.done = True
        if event.state is State.SUCCESS:
            self.accept(event.pid)
            ok, value = event.result
            self._call(self.callback if ok else self.error_callback, value)
            return True
        exc = event.exception or RuntimeError(f"{self!r} failed without a cause")
        if isinstance(exc, InitializerError | TaskKilledError):
            return False  # the pool broke or was terminated: never run, or cut short
        if isinstance(exc, CancelledError):
            if self.terminated is None:
                return False  # cancelled by the pool's end (cold shutdown, flush)
            self.accept(os.getpid())  # billiard's too: Celery's terminate is then a no-op
            self._call(self.error_callback, _einfo(_terminated(self.terminated)))
            return True
        self.accept(event.pid)  # it ran: billiard's ACK always comes before the outcome
        if isinstance(exc, TaskTimeoutError):
            from billiard.exceptions import TimeLimitExceeded

            self._call(self.error_callback, _einfo(TimeLimitExceeded(self.timeout)))
            self._call(self.timeout_callback, soft=False, timeout=self.timeout)
            return True
        if isinstance(exc, WorkerLostError):
            if self.terminated is not None:
                error: BaseException = _terminated(self.terminated)
            else:
                error = _lost(self, exc)
            self._call(self.error_callback, _einfo(error))
            return True
        self._call(self.error_callback, _einfo(exc))  # unpicklable arguments, and such
        return True


def _terminated(signum: int) -> BaseException:
    from billiard.exceptions import Terminated

    return Terminated(-signum)


def _lost(job: Job, exc: WorkerLostError) -> BaseException:
    """billiard's WorkerLostError (the class Celery's ``reject_on_worker_lost`` and
    ``retry_on_worker_lost`` look for), with billiard's words first and pipepool's
    account of the death after: the signal, and whether the OOM killer sent it."""
    from billiard.common import human_status
    from billiard.exceptions import WorkerLostError as BilliardWorkerLostError

    status = human_status(exc.exitcode) if exc.exitcode is not None else "exit status unknown"
    return BilliardWorkerLostError(f"Worker exited prematurely: {status} Job: {job.number}. {exc}")


def _einfo(exc: BaseException) -> Any:
    """billiard's ExceptionInfo of ``exc``, raised here so that it has a traceback."""
    from billiard.einfo import ExceptionInfo

    try:
        raise exc
    except BaseException:
        return ExceptionInfo()
