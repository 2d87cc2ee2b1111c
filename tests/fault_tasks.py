"""Tasks for tests/worker/test_containment.py: outcomes that misbehave in the parent, process
trees, crashes. Importable by module name, so spawn and forkserver workers find them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


class ExitsWhenUnpickled:
    """Pickles fine; unpickling calls ``sys.exit(code)`` wherever it happens."""

    def __init__(self, code: int) -> None:
        self.code = code

    def __reduce__(self):
        return (sys.exit, (self.code,))


def _interrupt() -> None:
    raise KeyboardInterrupt("raised by the pickled data")


class InterruptsWhenUnpickled:
    def __reduce__(self):
        return (_interrupt, ())


def _raise_base_exception() -> None:
    raise GeneratorExit("a BaseException from a reducer")


class RaisesBaseExceptionWhenUnpickled:
    def __reduce__(self):
        return (_raise_base_exception, ())


class ExceptionThatExitsWhenUnpickled(Exception):
    def __reduce__(self):
        return (sys.exit, (4,))


def _send_sigint() -> None:
    """A real SIGINT to the unpickling process, as a Ctrl-C would arrive, mid-unpickling."""
    signal.raise_signal(signal.SIGINT)


class SignalsWhenUnpickled:
    def __reduce__(self):
        return (_send_sigint, ())


def return_exiting(code: int = 3) -> ExitsWhenUnpickled:
    return ExitsWhenUnpickled(code)


def return_interrupting() -> InterruptsWhenUnpickled:
    return InterruptsWhenUnpickled()


def return_base_exception_raising() -> RaisesBaseExceptionWhenUnpickled:
    return RaisesBaseExceptionWhenUnpickled()


def raise_exiting_exception() -> None:
    raise ExceptionThatExitsWhenUnpickled("pickles fine, exits when unpickled")


def return_signalling() -> SignalsWhenUnpickled:
    return SignalsWhenUnpickled()


def square(x: int) -> int:
    return x * x


# -- process trees -------------------------------------------------------------------------


def spawn_tree(marker: str, then: str = "wait") -> None:
    """Start ``sh -c 'sleep 1000 & sleep 1000'`` carrying ``marker`` in its environment,
    then wait for it (a task stuck on its children) or, with ``then="die"``, kill the
    worker once the tree is up (a task that crashed and left its children behind)."""
    env = dict(os.environ, PIPEPOOL_TREE_MARKER=marker)
    proc = subprocess.Popen(["sh", "-c", "sleep 1000 & sleep 1000"], env=env)
    if then == "die":
        _wait_for_marked(marker, 3)
        os.kill(os.getpid(), signal.SIGKILL)
    proc.wait()


def stdin_is_a_tty() -> bool:
    return os.isatty(0)


def marked(marker: str) -> set[int]:
    """Live processes (zombies left out) whose environment carries ``marker``."""
    import proc_table  # beside this file: a worker finds it where it found this module

    return proc_table.with_environ(f"PIPEPOOL_TREE_MARKER={marker}")


def _wait_for_marked(marker: str, count: int, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while len(marked(marker)) < count and time.monotonic() < deadline:
        time.sleep(0.01)


# -- crashes -------------------------------------------------------------------------------


def segfault_in_named_frame() -> None:
    """A real segmentation fault (a read of address 0), from a frame with a telling name."""
    import ctypes

    def crash_here_for_the_report() -> None:
        ctypes.string_at(0)

    crash_here_for_the_report()


# -- results that cannot go back ------------------------------------------------------------


def return_lock():
    import threading

    return threading.Lock()


def return_dict_holding_a_lock():
    import threading

    return {"lock": threading.Lock()}


def return_lambda():
    return lambda: None
