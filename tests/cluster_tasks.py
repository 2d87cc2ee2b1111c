"""Task functions for the tests shared by both executors and for the cluster's own tests:
importable by name, so LocalExecutor workers and Dask worker processes both find them."""

from __future__ import annotations

import os
import time


def _rebuild_fails(*_):
    raise RuntimeError("refuses to be unpickled")


class UnpicklableInParentError(Exception):
    """Pickles in the worker, fails to unpickle in the parent, whatever the process's
    exception pickling: importing distributed installs tblib's reducer for every
    exception class, which rebuilds a plain exception with a custom __init__ fine (so
    tasks.BadException round-trips there) but still calls a class's own __reduce__."""

    def __reduce__(self):
        return (_rebuild_fails, (str(self),))


def raise_unpicklable_in_parent():
    raise UnpicklableInParentError("x")


def where(seconds: float = 0.0):
    """(pid, the Dask worker's address or None), after ``seconds``."""
    if seconds:
        time.sleep(seconds)
    try:
        from distributed import get_worker

        address = get_worker().address
    except (ImportError, ValueError):
        address = None
    return os.getpid(), address
