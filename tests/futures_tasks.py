"""Task functions for test_futures: importable by name, so spawn and forkserver work."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

_initialized: object = None


def square(x):
    return x * x


def add(a, b):
    return a + b


def pid_of(_=None):
    return os.getpid()


def slow_pid(seconds):
    time.sleep(seconds)
    return os.getpid()


def sleep_return(seconds, value=None):
    time.sleep(seconds)
    return seconds if value is None else value


def wait_for_file(path, value=None, limit=30.0):
    """Block until ``path`` exists (the test's go signal), then return ``value``."""
    deadline = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)
    return value


def announce_and_sleep(path, seconds):
    """Write our pid to ``path`` (atomically, by rename), then sleep: a task to kill."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, path)
    time.sleep(seconds)
    return "slept"


class TaskError(Exception):
    """An exception with an attribute, raised by ``fail``."""

    def __init__(self, message, code):
        super().__init__(message, code)
        self.code = code


def fail(code):
    raise TaskError("task failed on purpose", code)  # the line the tests look for


def fail_if(x, bad):
    if x == bad:
        raise ValueError(f"bad item {x}")
    return x * x


def init_set(value):
    global _initialized
    _initialized = value


def init_fail(_=None):
    raise RuntimeError("initializer failed on purpose")


def get_initialized(_=None):
    return _initialized


# -- pickling failures ----------------------------------------------------------------------


def return_lock():
    """A result that cannot be pickled in the worker."""
    return threading.Lock()


class Unloadable:
    """Pickles fine, but loading it raises: a result or argument the other side cannot
    unpickle."""

    def __reduce__(self):
        return (_refuse_to_load, ())


def _refuse_to_load():
    raise RuntimeError("this object refuses to be unpickled")


def return_unloadable():
    return Unloadable()


def identity(x):
    return x


class TwoArgError(Exception):
    """Pickles (args hold one value) but cannot be rebuilt: __init__ needs two."""

    def __init__(self, a, b):
        super().__init__(a)
        self.b = b


def raise_two_arg_error():
    raise TwoArgError("a", "b")


# -- worker deaths --------------------------------------------------------------------------


def die_by_signal(signum):
    os.kill(os.getpid(), signum)
    time.sleep(10)


def die_by_exit(code):
    os._exit(code)


def die_by_segfault():
    ctypes.string_at(0)


def sigkill_self():
    die_by_signal(signal.SIGKILL)


def sleep_then_touch(path, seconds):
    """Sleep, then create ``path``: proof that the task ran to its end."""
    time.sleep(seconds)
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    return path


def sleep_then_sigkill(seconds):
    """Die by SIGKILL after ``seconds``: a worker lost while the program is exiting."""
    time.sleep(seconds)
    sigkill_self()


def raise_cancelled():
    """A task whose own exception is a CancelledError: it must come back as itself."""
    from concurrent.futures import CancelledError

    raise CancelledError("raised by the task itself")


class Payload:
    """A result object a test can hold a weak reference to (bytes and ints cannot)."""

    def __init__(self, n):
        self.n = n


def make_payload(n):
    return Payload(n)
