"""A task's outcome on its way back: encoded where the task ran, decoded in the parent.

One home for both sides of the encoding: the local worker (``worker/``) and the Dask side
(``cluster/_remote.py``) encode, ``LocalExecutor`` and ``ClusterExecutor`` decode.

Encoding. A failure travels as ``(traceback text, pickled exception)``: the traceback
outside the exception's own pickle, so the parent still has it when the exception itself
cannot be unpickled there. An exception that cannot be pickled is replaced by a
``TaskPicklingError`` that names it.

Decoding: whatever the bytes do, only their task fails. Unpickling runs code the pickled
data names (a ``__reduce__`` callable, ``__setstate__``), and that code can raise
anything: ``(sys.exit, (3,))`` as a reducer raises ``SystemExit`` in the parent. The
worker already treats any ``BaseException`` of a task as its outcome; so does the parent:
anything raised while unpickling a task's result or exception fails that task with
``TaskUnpicklingError``, and the step goes on with every other frame.

KeyboardInterrupt is no exception to that rule, and Ctrl-C is not affected by it: every
decoding call runs inside a bookkeeping step, whose Python signal handlers are deferred
(``_signals.defer``), or off the main thread, where no handler ever runs. A real SIGINT
arriving meanwhile is only recorded and raises KeyboardInterrupt right after the step,
between steps as always. So a KeyboardInterrupt that comes out of ``pickle.loads`` here
was raised by the pickled data, never by the user, and it is that task's failure.
"""

from __future__ import annotations

import copyreg
import io
import pickle
from collections import ChainMap
from collections.abc import Hashable
from typing import Any

from .errors import FrameError, RemoteTraceback, TaskPicklingError, TaskUnpicklingError
from .frames import PICKLE_PROTOCOL


def encode_failure(exc: BaseException, pickler: type = pickle.Pickler) -> tuple[str, bytes]:
    """``(traceback text, exception pickled by ``pickler``)``; never raises for ``exc``."""
    import traceback  # here, not at the top: a worker imports this module as it starts,
    # and traceback (with linecache, tokenize, textwrap) only matters once a task fails

    tb = "".join(traceback.format_exception(exc))
    try:
        exc_bytes = dumps_exception(exc, pickler)
    except BaseException as pickling_exc:  # whatever the failure, the answer is the substitute
        substitute = TaskPicklingError(
            f"the task raised {type(exc).__qualname__}: {safe_repr(exc)}, "
            f"which could not be pickled ({type(pickling_exc).__name__}: {pickling_exc})",
            part="exception",
        )
        exc_bytes = dumps_exception(substitute, pickler)
    return tb, exc_bytes


def unsendable_result(result: object, exc: BaseException) -> TaskPicklingError:
    """The error of a task whose result cannot go back to the parent, where it ran (a
    local worker, a Dask worker): ``exc`` is what pickling it, or framing the pickle,
    raised. It names the result's type with its module ("a _thread.lock object") and
    why it had to be pickled."""
    kind = type(result)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    article = "an" if name[:1].lower() in "aeiou" else "a"
    if isinstance(exc, FrameError):
        why = f"its pickle is too big for a frame ({exc})"
    else:
        why = f"a result goes back pickled, and pickling it raised {type(exc).__name__}: {exc}"
    return TaskPicklingError(
        f"the task returned {article} {name} object, which cannot be sent back to the "
        f"parent: {why}",
        part="result",
    )


def dumps_exception(exc: BaseException, pickler: type = pickle.Pickler) -> bytes:
    """Pickle an exception the standard way, whatever reducers the process registered.

    Importing Dask's distributed installs tblib's reducer for every exception class in
    ``copyreg``; a forked worker inherits it, and exceptions then lose attributes such
    as ``SystemExit.code`` on the way back. Reducers from tblib are left out here; the
    table is built afresh each time, since distributed registers more classes as it
    meets their exceptions. ``pickler`` may bring its own table (cloudpickle's is a
    ChainMap over ``copyreg``'s): that stays, in front of the filtered one.
    """
    if any(is_tblib(reducer) for reducer in copyreg.dispatch_table.values()):
        plain = {
            cls: reducer for cls, reducer in copyreg.dispatch_table.items() if not is_tblib(reducer)
        }
        own = getattr(pickler, "dispatch_table", None)
        own_maps = own.maps if isinstance(own, ChainMap) else []
        maps = [m for m in own_maps if m is not copyreg.dispatch_table]
        # On the class, not the instance: the pickler reads its table when it is built,
        # and a Python subclass's own class attribute would hide an instance's setting.
        pickler = type(
            "Pickler", (pickler,), {"dispatch_table": ChainMap(*maps, plain) if maps else plain}
        )
    buffer = io.BytesIO()
    pickler(buffer, PICKLE_PROTOCOL).dump(exc)
    return buffer.getvalue()


def is_tblib(reducer: Any) -> bool:
    reducer = getattr(reducer, "func", reducer)  # tblib may register functools.partials
    return (getattr(reducer, "__module__", None) or "").startswith("tblib")


def safe_repr(obj: object) -> str:
    try:
        return repr(obj)[:500]
    except BaseException:
        return f"<{type(obj).__qualname__} with a failing repr>"


# -- in the parent: decoding ------------------------------------------------------------


def load_result(key: Hashable, data: bytes | memoryview, where: str) -> tuple[bool, Any]:
    """``(True, result)``, or ``(False, TaskUnpicklingError)`` with what unpickling raised
    as its ``__cause__``. ``where`` says where this runs ("in the parent", "here")."""
    try:
        return True, pickle.loads(data)
    except BaseException as exc:  # the task's failure, not ours (see above)
        return False, _unpickling_error(key, "result", where, exc)


def result_error(key: Hashable, exc: BaseException, where: str) -> TaskUnpicklingError:
    """What ``load_result`` reports when unpickling a result raised ``exc`` (for a caller
    that unpickled it itself)."""
    return _unpickling_error(key, "result", where, exc)


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


def load_failure(
    key: Hashable, payload: bytes | bytearray | memoryview, where: str
) -> BaseException:
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
