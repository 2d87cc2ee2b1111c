"""Defer Python signal handlers (and so KeyboardInterrupt) across a bookkeeping step.

Python runs signal handlers in the main thread between bytecodes, so a KeyboardInterrupt
can land between "bytes handed to the pipe" and "task marked running" and leave a task
counted nowhere, or sent twice, or a pipe's write offset behind the bytes really written.

Blocking the signal with ``pthread_sigmask`` is not enough: the mask is per thread, and
in a process with any other thread (a scheduler's, pytest-timeout's) the kernel delivers
the signal there and the main thread still runs the handler mid-step. So for the length
of a step (never around a wait) every Python-level handler is swapped for a recorder; at
the end the real handlers go back and each recorded signal is raised again, so its
handler runs right after the step with Python's usual semantics. About 4 µs per step:
one C-level ``getsignal`` per signal number, a swap only where a Python handler is installed.

Only the main thread runs handlers, so elsewhere ``defer`` is a free no-op.
"""

from __future__ import annotations

import _signal  # the C functions behind ``signal``: no enum conversion, ~10x cheaper here
import signal
import threading
from collections.abc import Callable
from typing import Any

_main_ident = threading.main_thread().ident
_SIGNALS = tuple(
    int(s) for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)
)

Handler = Callable[[int, Any], Any]


class _Recorder:
    """Stands in for the real handlers during a step; forwards once the step is over."""

    __slots__ = ("done", "originals", "pending")

    def __init__(self) -> None:
        self.originals: dict[int, Handler] = {}
        self.pending: list[int] = []
        self.done = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.done:  # a restore was cut short: behave exactly like the real handler
            self.originals[signum](signum, frame)
        else:
            self.pending.append(signum)


def defer() -> _Recorder | None:
    """Swap every Python signal handler for a recorder; pair with ``undefer``."""
    if threading.get_ident() != _main_ident:
        return None
    recorder = _Recorder()
    getsignal = _signal.getsignal
    try:
        for signum in _SIGNALS:
            handler = getsignal(signum)
            if handler.__class__ is int or handler is None:
                continue  # SIG_DFL, SIG_IGN, or not set from Python: nothing runs in Python
            if isinstance(handler, _Recorder):
                # Left behind by a restore that a handler cut short: it only forwards.
                handler = handler.originals.get(signum, _signal.SIG_DFL)
                if handler.__class__ is int:
                    continue
            recorder.originals[signum] = handler
            _signal.signal(signum, recorder)
    except BaseException:
        undefer(recorder)
        raise
    return recorder


def undefer(recorder: _Recorder | None) -> None:
    """Put the real handlers back, then raise again every signal that came meanwhile.

    A real handler may run (and raise) part way through; every handler not yet restored
    is then a recorder that forwards, and the next ``defer`` replaces it.
    """
    if recorder is None:
        return
    recorder.done = True
    restore = list(recorder.originals.items())
    try:
        while restore:
            signum, handler = restore.pop()
            if _signal.getsignal(signum) is recorder:
                _signal.signal(signum, handler)
    finally:
        pending, recorder.pending = recorder.pending, []
        for signum in dict.fromkeys(pending):  # Python coalesces repeats too
            signal.raise_signal(signum)


def reset_in_child() -> None:
    """In a forked worker: reinstate the real handlers a step had swapped out."""
    getsignal = _signal.getsignal  # not signal's: an enum member per signal, 0.2 ms a start
    for signum in _SIGNALS:
        handler = getsignal(signum)
        if isinstance(handler, _Recorder):
            _signal.signal(signum, handler.originals.get(signum, _signal.SIG_DFL))


def unblock_all_in_this_thread() -> None:
    """For a new worker, started by a thread that may have had every signal blocked."""
    _signal.pthread_sigmask(_signal.SIG_SETMASK, ())  # no enum members built, see below


def block_all_in_this_thread() -> None:
    """For helper threads: leave process-directed signals to the threads that want them."""
    # The C functions: ``signal``'s wrappers turn both sets into enum members, ~60 of
    # them per call, a third of a millisecond at every pool's start.
    _signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals())
