"""Unpickle a worker's outcome in the parent: whatever the bytes do, only their task fails.

Shared by ``LocalExecutor`` and ``ClusterExecutor`` (one rule, one home). Unpickling runs
code the pickled data names (a ``__reduce__`` callable, ``__setstate__``), and that code
can raise anything: ``(sys.exit, (3,))`` as a reducer raises ``SystemExit`` in the
parent. The worker already treats any ``BaseException`` of a task as its outcome; so does
the parent: anything raised while unpickling a task's result or exception fails that
task with ``TaskUnpicklingError``, and the step goes on with every other frame.

KeyboardInterrupt is no exception to that rule, and Ctrl-C is not affected by it: every
call here runs inside a bookkeeping step, whose Python signal handlers are deferred
(``_signals.defer``), or off the main thread, where no handler ever runs. A real SIGINT
arriving meanwhile is only recorded and raises KeyboardInterrupt right after the step,
between steps as always. So a KeyboardInterrupt that comes out of ``pickle.loads`` here
was raised by the pickled data, never by the user, and it is that task's failure.
"""

from __future__ import annotations

import pickle
from collections.abc import Hashable
from typing import Any

from .errors import RemoteTraceback, TaskUnpicklingError


def load_result(key: Hashable, data: bytes | memoryview, where: str) -> tuple[bool, Any]:
    """``(True, result)``, or ``(False, TaskUnpicklingError)`` with what unpickling raised
    as its ``__cause__``. ``where`` says where this runs ("in the parent", "here")."""
    try:
        return True, pickle.loads(data)
    except BaseException as exc:  # the task's failure, not ours (see above)
        return False, _unpickling_error(key, "result", where, exc)


def load_exception(key: Hashable, tb: str, exc_bytes: bytes, where: str) -> BaseException:
    """The task's exception with the worker's traceback ``tb`` as ``__cause__``; if it
    cannot be unpickled, a ``TaskUnpicklingError`` with that same cause, and what
    unpickling raised as its ``__context__``."""
    try:
        exc = pickle.loads(exc_bytes)
    except BaseException as unpickling:  # the task's failure (see above)
        exc = TaskUnpicklingError(
            f"task {key!r} raised an exception that could not be unpickled {where} "
            f"({type(unpickling).__name__}: {unpickling})",
            part="exception",
        )
        exc.__context__ = unpickling
    if not isinstance(exc, BaseException):  # forged or corrupt bytes that unpickled fine
        exc = TaskUnpicklingError(
            f"task {key!r}: its exception unpickled {where} as {type(exc).__qualname__}, "
            "not an exception",
            part="exception",
        )
    exc.__cause__ = RemoteTraceback(tb)
    return exc


def load_failure(key: Hashable, payload: bytes, where: str) -> BaseException:
    """``load_exception`` of a RAISED or INIT_FAILED payload, ``pickle((tb, exc_bytes))``."""
    try:
        tb, exc_bytes = pickle.loads(payload)
    except BaseException as exc:  # the task's failure (see above)
        return _unpickling_error(key, "failure report", where, exc)
    return load_exception(key, tb, exc_bytes, where)


def _unpickling_error(
    key: Hashable, what: str, where: str, exc: BaseException
) -> TaskUnpicklingError:
    """``TaskUnpicklingError`` for a task whose ``what`` ("result", "failure report")
    could not be unpickled, with what unpickling raised as its ``__cause__``."""
    error = TaskUnpicklingError(
        f"task {key!r}: its {what} could not be unpickled {where} ({type(exc).__name__}: {exc})",
        part="result" if what == "result" else "exception",
    )
    error.__cause__ = exc
    return error
