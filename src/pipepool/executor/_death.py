"""Why a worker died, in words that tell the causes apart: the kernel's OOM killer, a
crash (with the frames faulthandler wrote), a signal, an exit.

The executor knows, when it retires a worker that died on its own: the exit status
(``multiprocessing``'s: minus the signal number for a signal), faulthandler's report of a
fatal signal (``worker._fault``; a crash writes one, a signal sent to the worker does
not, SIGKILL never), whether a count of OOM kills rose while the worker ran (``_oom``),
and, by its final start mark, whether a task was running. ``describe`` turns those into
the ``WorkerLostError`` message and its ``cause`` (a public ``DeathCause``), which the
faces pass on (``pipepool run``, the futures face, the Airflow executor, the joblib
backend).

Who sent a signal, it does not know, and the words do not guess. The kernel tells a
parent only the signal that killed its child (``waitpid``'s status; ``waitid``'s
``CLD_KILLED`` siginfo carries the child's own pid, not the sender's), and SIGKILL
cannot be caught to look. A task that signals its own worker (``os.kill(os.getpid(),
...)``, a shell's ``kill -9 $PPID``) and ``kill -9`` from a terminal look the same.
"""

from __future__ import annotations

import signal

from ..errors import DeathCause, signal_name

# Signals a fault raises in the process itself; without a report they may still be one.
_FAULTS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT}


def describe(
    pid: int | None,
    exitcode: int | None,
    task: str | None,
    *,
    crash_report: str = "",
    oom_rise: str | None = None,
    oom_counted: bool = True,
) -> tuple[DeathCause, str]:
    """``(cause, message)`` for a worker that died while running ``task`` (its key's
    repr), or during start-up (None). ``crash_report`` is ``worker.note_crash``'s text ("" if none);
    ``oom_rise`` says how a count of OOM kills rose meanwhile, None if none did;
    ``oom_counted`` is False where the kernel counts no OOM kills (``_oom.counters()``
    is empty)."""
    who = f"worker pid {pid}"
    if task is None:
        during = "during start-up, before running any task"
    else:
        during = f"while running task {task}"
    if exitcode is None:
        return DeathCause.SIGNAL, f"{who} ended {during} (exit status unknown)"
    if exitcode >= 0 and task is None:
        return DeathCause.EXIT, (
            f"{who} exited with code {exitcode} {during}: it could not get ready (its "
            "error is on stderr; with spawn or forkserver, can it import the main module, "
            "and does that start its pool under if __name__ == '__main__'?)"
        )
    if exitcode >= 0:
        return DeathCause.EXIT, (
            f"{who} exited with code {exitcode} {during}: the process ended itself "
            "(os._exit(), or exit() in native code)"
        )
    name = signal_name(exitcode)
    if crash_report:
        return DeathCause.CRASH, (
            f"{who} crashed {during}, killed by {name}: a fault brought the interpreter "
            f"down (in native code, ctypes or a C extension){crash_report}"
        )
    sent = _sent_by(task, -exitcode == signal.SIGKILL)
    if -exitcode == signal.SIGKILL:
        if oom_rise is not None:
            return DeathCause.OOM, (
                f"{who} was killed by the kernel's OOM killer {during} (out of memory: "
                f"{oom_rise} while it ran); give it more memory, or run fewer at once"
            )
        if not oom_counted:
            return DeathCause.SIGNAL, (
                f"{who} was killed by SIGKILL {during}: by the OOM killer, or {sent} (this "
                "system does not count OOM kills)"
            )
        return DeathCause.SIGNAL, (
            f"{who} was killed by SIGKILL {during}, {sent}, and counted no OOM kill meanwhile"
        )
    if -exitcode in _FAULTS:
        return DeathCause.SIGNAL, (
            f"{who} was killed by {name} {during}: a fault that left no report, or a signal {sent}"
        )
    return DeathCause.SIGNAL, f"{who} was killed by {name} {during}, {sent}"


def _sent_by(task: str | None, sigkill: bool) -> str:
    """Who may have sent the signal, without a guess: the kernel does not say."""
    own = "the task itself" if task is not None else "its own start-up code (an initializer)"
    outside = "from outside (kill -9, a supervisor)" if sigkill else "from outside"
    return f"sent by {own} or {outside}; the kernel does not say which"
