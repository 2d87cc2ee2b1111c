"""The errors that extend ``BrokenProcessPool``, public as ``pipepool.errors.*``.

Apart so that a worker process, which never raises them, does not import
``concurrent.futures.process`` (see ``errors``).
"""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

from .errors import signal_name


class WorkerLostError(BrokenProcessPool):
    """The worker running a task died; only that task fails, the pool goes on.

    ``exitcode`` is the process exit status, or minus the signal number when a signal
    killed it (as ``multiprocessing`` reports it); ``signal`` is the signal's name or None.
    ``cause`` says why, where the pool could tell: ``"oom"`` (the kernel's OOM killer:
    a count of OOM kills rose while it ran), ``"crash"`` (a fatal signal faulthandler
    reported, quoted in the message), ``"signal"`` (a signal from outside), ``"exit"``
    (the process exited mid-task); ``""`` otherwise.
    """

    __module__ = "pipepool.errors"

    def __init__(
        self, message: str, *, pid: int | None, exitcode: int | None, cause: str = ""
    ) -> None:
        super().__init__(message)
        self.pid = pid
        self.exitcode = exitcode
        self.signal = signal_name(exitcode)
        self.cause = cause

    def __reduce__(self):
        return (_rebuild_lost, (str(self), self.pid, self.exitcode, self.cause))


def _rebuild_lost(
    message: str, pid: int | None, exitcode: int | None, cause: str = ""
) -> WorkerLostError:
    return WorkerLostError(message, pid=pid, exitcode=exitcode, cause=cause)


class InitializerError(BrokenProcessPool):
    """The pool's initializer kept failing; queued work fails with this, its cause attached."""

    __module__ = "pipepool.errors"
