"""Encode a task's failure where it ran: the one home of the rule both the local worker
(``worker.py``) and the Dask side (``_cluster_remote.py``) follow.

A failure travels as ``(traceback text, pickled exception)``: the traceback outside the
exception's own pickle, so the parent still has it when the exception itself cannot be
unpickled there. An exception that cannot be pickled is replaced by a
``TaskPicklingError`` that names it. The parent's side, decoding, is ``_unpickle.py``.
"""

from __future__ import annotations

import copyreg
import io
import pickle
import traceback
from collections import ChainMap
from typing import Any

from .errors import TaskPicklingError
from .frames import PICKLE_PROTOCOL


def encode_failure(exc: BaseException, pickler: type = pickle.Pickler) -> tuple[str, bytes]:
    """``(traceback text, exception pickled by ``pickler``)``; never raises for ``exc``."""
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
