"""The errors that extend ``BrokenProcessPool``, and the ``DeathCause`` one of them
carries, public as ``pipepool.errors.*``.

Apart so that a worker process, which never raises them, does not import
``concurrent.futures.process`` nor build the enum (see ``errors``).
"""

from __future__ import annotations

import enum
from concurrent.futures.process import BrokenProcessPool

from .errors import signal_name


class DeathCause(enum.StrEnum):
    """Why a worker died, as ``WorkerLostError.cause`` names it (from its exit status,
    faulthandler's report and the kernel's counts of OOM kills).

    A ``str``: a member equals its value (``error.cause == "oom"``), prints as it and is
    written as it in JSON, so code that compares or logs the plain strings keeps working.
    """

    __module__ = "pipepool.errors"

    OOM = "oom"
    """SIGKILL while a count of OOM kills rose: the kernel's OOM killer."""
    CRASH = "crash"
    """A fatal signal faulthandler reported: the task brought the interpreter down."""
    SIGNAL = "signal"
    """Another signal, or SIGKILL with no OOM kill counted: sent by the task itself or
    from outside (the kernel does not tell the parent which)."""
    EXIT = "exit"
    """The process exited mid-task (``os._exit()``, ``exit()`` in native code)."""
    UNKNOWN = ""
    """The pool could not tell (a worker that sent a frame it could not trust, a Dask
    worker): the empty string, so ``if error.cause:`` asks whether a cause is known."""


class WorkerLostError(BrokenProcessPool):
    """The worker running a task died; only that task fails, the pool goes on.

    ``exitcode`` is the process exit status, or minus the signal number when a signal
    killed it (as ``multiprocessing`` reports it); ``signal`` is the signal's name or None.
    ``cause`` (a ``DeathCause``, a ``str``) says why, where the pool could tell: ``"oom"``
    (the kernel's OOM killer: a count of OOM kills rose while it ran), ``"crash"`` (a
    fatal signal faulthandler reported, quoted in the message), ``"signal"`` (a signal,
    sent by the task itself or from outside), ``"exit"`` (the process exited mid-task);
    ``""`` otherwise.
    """

    __module__ = "pipepool.errors"

    def __init__(
        self,
        message: str,
        *,
        pid: int | None,
        exitcode: int | None,
        cause: DeathCause = DeathCause.UNKNOWN,
    ) -> None:
        super().__init__(message)
        self.pid = pid
        self.exitcode = exitcode
        self.signal = signal_name(exitcode)
        self.cause = DeathCause(cause)  # a plain "oom" from untyped code becomes the member

    def __reduce__(self):
        return (_rebuild_lost, (str(self), self.pid, self.exitcode, self.cause))


def _rebuild_lost(
    message: str, pid: int | None, exitcode: int | None, cause: DeathCause = DeathCause.UNKNOWN
) -> WorkerLostError:
    return WorkerLostError(message, pid=pid, exitcode=exitcode, cause=cause)


class InitializerError(BrokenProcessPool):
    """The pool's initializer kept failing; queued work fails with this, its cause attached."""

    __module__ = "pipepool.errors"
