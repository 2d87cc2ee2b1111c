"""Why a worker died, in words that tell the causes apart: the kernel's OOM killer, a
crash (with the frames faulthandler wrote), a signal from outside, an exit.

The executor knows, when it retires a worker that died on its own: the exit status
(``multiprocessing``'s: minus the signal number for a signal), faulthandler's report of a
fatal signal (``worker._fault``; a crash writes one, a signal from outside does not,
SIGKILL never), and whether a count of OOM kills rose while the worker ran (``_oom``).
``describe`` turns those into the ``WorkerLostError`` message and its ``cause`` (a
public ``DeathCause``), which the faces pass on (``pipepool run``, the futures face, the
Airflow executor, the joblib backend).
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
    repr), or during start-up (None). ``crash_report`` is ``_fault.note_crash``'s text ("" if none);
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
    if -exitcode == signal.SIGKILL:
        if oom_rise is not None:
            return DeathCause.OOM, (
                f"{who} was killed by the kernel's OOM killer {during} (out of memory: "
                f"{oom_rise} while it ran); give it more memory, or run fewer at once"
            )
        if not oom_counted:
            return DeathCause.SIGNAL, (
                f"{who} was killed by SIGKILL {during}: from outside (kill -9) or by the "
                "OOM killer; this system does not count OOM kills"
            )
        return DeathCause.SIGNAL, (
            f"{who} was killed by SIGKILL from outside {during} (kill -9, a supervisor; "
            "the kernel counted no OOM kill meanwhile)"
        )
    if -exitcode in _FAULTS:
        return DeathCause.SIGNAL, (
            f"{who} was killed by {name} {during}: a fault that left no report, or a "
            "signal from outside"
        )
    return DeathCause.SIGNAL, f"{who} was killed by {name} from outside {during}"
