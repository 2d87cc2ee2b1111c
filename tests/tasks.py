"""Task functions for executor tests: importable by name, so spawn and forkserver work."""

from __future__ import annotations

import os
import signal
import time


def echo(x):
    return x


def pad(key, arg: bytes, size: int) -> tuple:
    """Return the key, a digest of the argument and ``size`` bytes derived from the key."""
    return key, len(arg), arg[:8], (str(key).encode() * (size // max(1, len(str(key))) + 1))[:size]


def record(log: str, key, sleep: float = 0.0, result=None):
    """Append one line to ``log`` (O_APPEND: atomic per line) so tests count real runs."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key}\n".encode())
    finally:
        os.close(fd)
    if sleep:
        time.sleep(sleep)
    return key if result is None else result


def wait_for(path: str, key=None, arg: bytes = b"", limit: float = 60.0):
    """Block until ``path`` exists (a test's release switch); bounded so nothing hangs."""
    deadline = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)
    return key, len(arg)


def raise_value_error(msg: str):
    raise ValueError(msg)


class CustomError(Exception):
    def __init__(self, msg: str, code: int) -> None:
        super().__init__(msg, code)
        self.code = code


def raise_custom(code: int):
    raise CustomError("custom", code)


def exit_process(code: int):
    os._exit(code)


def kill_self(sig: int = signal.SIGKILL):
    os.kill(os.getpid(), sig)
    time.sleep(10)


def sleep(seconds: float, result=None):
    time.sleep(seconds)
    return result


def pid_of_worker(_=None) -> int:
    return os.getpid()


def fail_init():
    raise RuntimeError("initializer says no")


_initialized = {}


def set_flag(value) -> None:
    _initialized["flag"] = value


def get_flag():
    return _initialized.get("flag")


class Unpicklable:
    def __reduce__(self):
        raise TypeError("this object refuses to be pickled")


def return_unpicklable():
    return Unpicklable()


def _rebuild_fails():
    raise RuntimeError("refuses to be unpickled")


class UnpicklableInParent:
    def __reduce__(self):
        return (_rebuild_fails, ())


def return_unpicklable_in_parent():
    return UnpicklableInParent()


class BadException(Exception):
    """Pickles fine in the worker, fails to unpickle in the parent (wrong init args)."""

    def __init__(self, a, b):
        super().__init__(a)
        self.b = b


def raise_bad_exception():
    raise BadException("x", "y")


def exit_via_sys(code: int):
    import sys

    sys.exit(code)


class CustomBaseException(BaseException):
    pass


def raise_base_exception():
    raise CustomBaseException("not an Exception")
