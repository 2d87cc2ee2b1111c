"""pipepool: a process pool whose parent never blocks on a pipe.

Public API: ``LocalExecutor`` (scheduler style: queue, sync, event buffer),
``ProcessPoolExecutor`` (a drop-in for the one in ``concurrent.futures``), ``Event`` and
``State`` (what it reports), the error types, and ``IMPLEMENTATION`` ("cython" when the
compiled hot loop is in use, "python" for its pure-Python twin).
"""

from ._impl import IMPLEMENTATION
from .errors import (
    FrameError,
    InitializerError,
    PipepoolError,
    RemoteTraceback,
    TaskKilledError,
    TaskPicklingError,
    TaskTimeoutError,
    TaskUnpicklingError,
    WorkerLostError,
)
from .events import Event, State
from .executor import LocalExecutor
from .futures import ProcessPoolExecutor

__version__ = "0.1.0"

__all__ = [
    "IMPLEMENTATION",
    "Event",
    "FrameError",
    "InitializerError",
    "LocalExecutor",
    "PipepoolError",
    "ProcessPoolExecutor",
    "RemoteTraceback",
    "State",
    "TaskKilledError",
    "TaskPicklingError",
    "TaskTimeoutError",
    "TaskUnpicklingError",
    "WorkerLostError",
    "__version__",
]
