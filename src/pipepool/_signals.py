"""Defer signal handlers (and so KeyboardInterrupt) across a bookkeeping step.

Python runs signal handlers in the main thread between bytecodes, so a KeyboardInterrupt
can land between "bytes handed to the pipe" and "task marked running" and leave a task
counted nowhere, or sent twice. Blocking signals for the whole step (not around each
system call, which costs 10-30%) makes the step atomic: a signal that arrives meanwhile
stays pending in the kernel and its handler runs right after ``restore``.

Only the main thread runs handlers, so elsewhere these calls are free no-ops. Limit: a
signal the kernel delivers to another thread of the process that does not block it still
trips the main thread's handler; threads pipepool starts block every signal for that reason.
"""

from __future__ import annotations

import signal
import threading

_ALL = signal.valid_signals()
_main_ident = threading.main_thread().ident


def current_mask() -> set[signal.Signals] | None:
    """The main thread's signal mask, or None when called from another thread."""
    if threading.get_ident() != _main_ident:
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, ())


def block() -> None:
    """Block every signal in the main thread; pair with ``restore(current_mask())``."""
    if threading.get_ident() == _main_ident:
        signal.pthread_sigmask(signal.SIG_BLOCK, _ALL)


def restore(mask: set[signal.Signals] | None) -> None:
    """Put back a mask from ``current_mask``; pending handlers run right after."""
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def block_all_in_this_thread() -> None:
    """For helper threads: never take a process-directed signal meant for the main thread."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _ALL)
