"""What ``ClusterExecutor`` runs on the Dask workers: the task wrapper, the kill and the
SIGINT plugin. Dask pickles these by reference, so this module (and pipepool) must be
installed on every worker; the client side is ``pipepool.cluster``.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from typing import Any

from .._outcome import encode_failure, unsendable_result
from ..errors import TaskUnpicklingError
from ..frames import PICKLE_PROTOCOL

EXIT_DELAY = 0.02  # s between a worker's reply to the kill request and its death
STARTED_TOPIC = "pipepool-started"  # one topic for every executor (the scheduler keeps
# each topic it ever saw); a message carries its executor's token


def _run_task(tid: int, payload: bytes, token: str | None) -> tuple:
    """Run one pickled call in a Dask worker; never raises (every outcome is a value).

    Returns ``("done", pickled result, address, pid)`` or ``("raised", traceback text,
    pickled exception, address, pid)``. The outcome is pickled here, not by Dask, so that
    a result that cannot travel fails its task only, with the same errors as LocalExecutor.
    """
    import cloudpickle
    from distributed import get_worker

    worker = get_worker()
    address, pid = worker.address, os.getpid()
    if token is not None:
        # Before the call: were the worker to die in it, the client knows it had started.
        worker.log_event(STARTED_TOPIC, [token, tid, address, pid])
    try:
        fn, args, kwargs = pickle.loads(payload)
    except BaseException as exc:
        error = TaskUnpicklingError(
            f"the Dask worker {address} could not unpickle the task "
            f"({type(exc).__name__}: {exc}); is the function's module (and pipepool) "
            "installed on every worker?",
            part="task",
        )
        error.__cause__ = exc
        return _raised(error, address, pid)
    del payload
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # SystemExit and friends are outcomes too
        return _raised(exc, address, pid)
    finally:
        del fn, args, kwargs
    try:
        data = cloudpickle.dumps(result, PICKLE_PROTOCOL)
    except BaseException as exc:
        return _raised(unsendable_result(result, exc), address, pid)
    return ("done", data, address, pid)


def _raised(exc: BaseException, address: str, pid: int) -> tuple:
    import cloudpickle

    tb, exc_bytes = encode_failure(exc, cloudpickle.Pickler)
    return ("raised", tb, exc_bytes, address, pid)


def _ignore_sigint_plugin() -> Any:
    from distributed import WorkerPlugin

    class IgnoreSigint(WorkerPlugin):
        name = "pipepool-ignore-sigint"

        def setup(self, worker: Any) -> None:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, signal.SIG_IGN)

    return IgnoreSigint()


def _exit_worker() -> None:
    """Run by ``Client.run`` in a worker: die at once, like a LocalExecutor worker that is
    killed; its nanny (if any) starts a fresh one, and what it ran stops with it. A few
    ms late, so that the reply to ``Client.run`` still leaves (the scheduler logs an error
    for a worker that dies in the middle of one)."""
    threading.Timer(EXIT_DELAY, os.kill, (os.getpid(), signal.SIGKILL)).start()
