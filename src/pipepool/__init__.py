"""pipepool: a process pool whose parent never blocks on a pipe.

Public API: ``LocalExecutor`` (scheduler style: queue, sync, event buffer),
``ClusterExecutor`` (the same interface on a Dask cluster; the ``dask`` extra),
``ProcessPoolExecutor`` (a drop-in for the one in ``concurrent.futures``), ``Event`` and
``State`` (what they report), the error types, and ``IMPLEMENTATION`` ("cython" when
the compiled hot loop is in use, "python" for its pure-Python twin).
"""

# First of all: a worker or fork server that multiprocessing is starting watches for its
# parent's death from here on, while it imports the rest (_startup_watch).
from . import _startup_watch

_startup_watch.start()

from typing import TYPE_CHECKING  # noqa: E402

from . import _lazy  # noqa: E402
from .errors import (  # noqa: E402
    DuplicateKeyError,
    FrameError,
    PipepoolError,
    PreloadError,
    RemoteTraceback,
    TaskKilledError,
    TaskPicklingError,
    TaskTimeoutError,
    TaskUnpicklingError,
)
from .loop import IMPLEMENTATION  # noqa: E402

if TYPE_CHECKING:  # what __getattr__ loads at run time, as the type checker sees it
    from ._broken_pool import DeathCause, InitializerError, WorkerLostError
    from .cluster import ClusterExecutor, ClusterWorkerLostError
    from .events import Event, State
    from .executor import LocalExecutor
    from .futures import ProcessPoolExecutor

__version__ = "0.1.0"
"""pipepool's version: its one source (pyproject.toml reads it from here)."""

# The executors, and the events they report, load on first use. Every worker process
# imports this package (for pipepool.worker): keeping them out of that import saves
# start-up time (the events alone, an enum and a named tuple, cost ~1 ms). Dask is
# an optional extra: ``import pipepool`` and ``from pipepool import ClusterExecutor``
# never import distributed; creating a ClusterExecutor does.
_LAZY = {
    "Event": "events",
    "State": "events",
    "WorkerLostError": "errors",  # these two extend BrokenProcessPool: see errors
    "InitializerError": "errors",
    "DeathCause": "errors",  # the cause a WorkerLostError carries, beside it
    "LocalExecutor": "executor",
    "ProcessPoolExecutor": "futures",
    "ClusterExecutor": "cluster",
    "ClusterWorkerLostError": "cluster",
}


if not TYPE_CHECKING:  # the type checker reads the names imported above, not this hook
    __getattr__, __dir__ = _lazy.exports(globals(), _LAZY)


__all__ = [
    "IMPLEMENTATION",
    "ClusterExecutor",
    "ClusterWorkerLostError",
    "DeathCause",
    "DuplicateKeyError",
    "Event",
    "FrameError",
    "InitializerError",
    "LocalExecutor",
    "PipepoolError",
    "PreloadError",
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
