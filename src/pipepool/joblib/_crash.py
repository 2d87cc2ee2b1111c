"""The error a joblib call gets when a worker dies under its batch, and its words.

``WorkerCrashedError`` is both pipepool's ``WorkerLostError`` and loky's
``TerminatedWorkerError``; ``_crashed`` turns the pool's ``WorkerLostError`` into one that
names the batch's calls and the likely cause (``_Session.result`` in ``_shared``).
"""

from __future__ import annotations

import reprlib
from typing import Any

from joblib.externals.loky.process_executor import (  # type: ignore[import-untyped]
    TerminatedWorkerError,
)

from pipepool.errors import DeathCause, WorkerLostError, describe_exit

CALLS_SHOWN = 3  # calls of a lost batch named in the error; the rest are counted


class WorkerCrashedError(WorkerLostError, TerminatedWorkerError):
    """A worker died (segfault, OOM killer, ``kill -9``) while running a joblib batch.

    Only that batch failed; the pool replaced the worker. Catch it as pipepool's
    ``WorkerLostError``, as loky's ``TerminatedWorkerError`` (code written for joblib's
    default backend keeps working) or as ``BrokenProcessPool``. ``pid``, ``exitcode``,
    ``signal`` (e.g. ``"SIGKILL"``), ``cause`` (``WorkerLostError.cause``, a
    ``DeathCause``: ``"oom"``, ``"crash"``, ``"signal"``, ``"exit"``) and ``calls`` (reprs
    of the batch's calls) say which.
    """

    __module__ = "pipepool.joblib"  # where users import it, and tracebacks name it

    def __init__(
        self,
        message: str,
        *,
        pid: int | None,
        exitcode: int | None,
        calls: tuple = (),
        cause: DeathCause = DeathCause.UNKNOWN,
    ) -> None:
        super().__init__(message, pid=pid, exitcode=exitcode, cause=cause)
        self.calls = calls

    def __reduce__(self):
        return (
            _rebuild_crashed,
            (str(self), self.pid, self.exitcode, self.calls, self.cause),
        )


def _rebuild_crashed(
    message: str,
    pid: int | None,
    exitcode: int | None,
    calls: tuple,
    cause: DeathCause = DeathCause.UNKNOWN,
) -> WorkerCrashedError:
    return WorkerCrashedError(message, pid=pid, exitcode=exitcode, calls=calls, cause=cause)


# What the error says of each cause the pool can tell; the WorkerLostError it is raised
# from has the details (how the OOM count rose, the crash's stack, where no count exists).
CAUSE_SAID = {
    DeathCause.OOM: "Cause: the kernel's OOM killer (a count of OOM kills rose while it ran).",
    DeathCause.CRASH: "Cause: a crash in native code (a fatal signal, its stack reported).",
    DeathCause.SIGNAL: (
        "Cause: a signal, sent by the task itself or from outside the pool (kill -9, a supervisor)."
    ),
    DeathCause.EXIT: "Cause: the process ended itself (os._exit(), or exit() in native code).",
}


def _crashed(lost: WorkerLostError, batch: Any) -> WorkerCrashedError:
    items = list(getattr(batch, "items", ()))
    shown = items if len(items) <= CALLS_SHOWN + 1 else [*items[:CALLS_SHOWN], items[-1]]
    calls = tuple(_describe_call(*item) for item in shown)
    if len(items) > len(shown):
        listed = f"{', '.join(calls[:-1])}, ... {calls[-1]}"
    else:
        listed = ", ".join(calls)
    return WorkerCrashedError(
        f"worker pid {lost.pid} {describe_exit(lost.exitcode)} (exit code {lost.exitcode}) "
        f"while running a batch of {len(items)} joblib task(s): {listed}. Only this batch "
        "failed; the pool replaced the worker. "
        + CAUSE_SAID.get(
            lost.cause,
            "Likely cause: a crash in native code (segfault), the OOM killer, or a "
            "signal (sent by the task itself or from outside).",
        ),
        pid=lost.pid,
        exitcode=lost.exitcode,
        calls=calls,
        cause=lost.cause,
    )


_short = reprlib.Repr()
_short.maxstring = _short.maxother = 40


def _describe_call(func: Any, args: tuple, kwargs: dict) -> str:
    name = getattr(func, "__qualname__", None) or repr(func)
    parts = [_short.repr(a) for a in args] + [f"{k}={_short.repr(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"
