"""joblib backend ``"pipepool"``: joblib's ``Parallel`` on pipepool's ProcessPoolExecutor.

Importing this module registers the backend (also in every worker, whatever the start
method: the first task a worker unpickles imports it)::

    import pipepool.joblib  # noqa: F401  (registers "pipepool")
    with joblib.parallel_config(backend="pipepool", n_jobs=4):
        Parallel()(delayed(f)(x) for x in data)

What it keeps from loky's backend: joblib's auto-batching, ``n_jobs`` semantics, the
``return_as`` modes, ``timeout``, ``pre_dispatch``, nested calls falling back to
threads, ``initializer``/``initargs``, one pool reused across ``Parallel`` calls, and
the wire: tasks are cloudpickled (lambdas, closures, ``__main__`` functions) with
joblib's memmapping reducers (arrays above ``max_nbytes`` travel as a memmapped file).

What it changes: a worker that dies fails only the batch it held, with
``WorkerCrashedError`` (a ``pipepool.errors.WorkerLostError`` *and* loky's
``TerminatedWorkerError``) naming the calls, the pid, the signal and the exit code;
aborting a call (first error, timeout, a dropped generator) kills only that call's
running tasks: the pool and its other workers stay, so the next call starts warm.
See docs/joblib.md.

This module is the backend joblib calls; ``_shared.py`` the pool every call shares and
one call's view of it (its futures, its memmapped arrays); ``_crash.py`` the error a lost
worker's batch gets; ``_wire.py`` the worker's side: what a batch and its results become
between the two.
"""

from __future__ import annotations

# Absolute imports only: this module is named ``pipepool.joblib``; ``joblib`` below is
# always the real one (no implicit relative imports in Python 3).
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import joblib  # type: ignore[import-untyped]  # noqa: F401  (the real joblib)
from joblib._parallel_backends import (  # type: ignore[import-untyped]
    AutoBatchingMixin,
    FallbackToBackend,
    ParallelBackendBase,
    SequentialBackend,
    inside_dask_worker,
)
from joblib.parallel import (  # type: ignore[import-untyped]
    cpu_count,
    register_parallel_backend,
)

from pipepool import _checks
from pipepool.joblib._crash import CALLS_SHOWN as CALLS_SHOWN  # re-exported: public names
from pipepool.joblib._crash import CAUSE_SAID as CAUSE_SAID
from pipepool.joblib._crash import WorkerCrashedError
from pipepool.joblib._crash import _rebuild_crashed as _rebuild_crashed  # earlier pickles
from pipepool.joblib._shared import _Session, _shared_pool, shutdown_pool
from pipepool.worker.bootstrap import WORKER_NAME

__all__ = ["BACKEND_NAME", "PipepoolBackend", "WorkerCrashedError", "shutdown_pool"]

BACKEND_NAME = "pipepool"
"""The name this module registers the backend under: ``parallel_config(backend=...)``."""


class PipepoolBackend(AutoBatchingMixin, ParallelBackendBase):
    """joblib's ``ParallelBackendBase`` on a shared pipepool ``ProcessPoolExecutor``."""

    supports_retrieve_callback = True  # so also timeout and return_as generators
    supports_inner_max_num_threads = True
    default_n_jobs = 1

    def __init__(
        self,
        nesting_level: int | None = None,
        inner_max_num_threads: int | None = None,
        **backend_kwargs: Any,
    ) -> None:
        super().__init__(
            nesting_level=nesting_level,
            inner_max_num_threads=inner_max_num_threads,
            **backend_kwargs,
        )
        self._workers: _Session | None = None

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        """As loky's: 0 is an error, None means 1, negative counts back from the CPUs;
        1 inside a daemonic process, inside a pipepool worker (docs/joblib.md, "Nested
        calls") or below threads of a nested call."""
        import multiprocessing

        if n_jobs is not None:  # an integer, as ProcessPoolExecutor's max_workers
            _checks.count(n_jobs, "n_jobs", minimum=-(2**63), none=True)
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is None:
            return 1
        process = multiprocessing.current_process()
        if process.daemon:
            if n_jobs != 1:
                where = "a Dask worker" if inside_dask_worker() else "a daemonic process"
                warnings.warn(
                    f"pipepool-backed parallel loops cannot run inside {where}, setting n_jobs=1",
                    stacklevel=3,
                )
            return 1
        if process.name.startswith(WORKER_NAME):
            # A pipepool worker may start a pool, but a call that each of n workers
            # runs would start n more: the nested call runs in the task, as documented.
            if n_jobs != 1:
                warnings.warn(
                    "pipepool-backed parallel loops do not nest inside a pipepool worker, "
                    "setting n_jobs=1",
                    stacklevel=3,
                )
            return 1
        if not (self.in_main_thread() or self.nesting_level == 0):
            if n_jobs != 1:
                warnings.warn(
                    "pipepool-backed parallel loops cannot be nested below threads, "
                    "setting n_jobs=1",
                    stacklevel=3,
                )
            return 1
        if n_jobs < 0:
            n_jobs = max(cpu_count() + 1 + n_jobs, 1)
        return n_jobs

    def configure(
        self,
        n_jobs: int = 1,
        parallel: Any = None,
        prefer: str | None = None,
        require: str | None = None,
        **kwargs: Any,
    ) -> int:
        n_jobs = self.effective_n_jobs(n_jobs)
        if n_jobs == 1:
            raise FallbackToBackend(SequentialBackend(nesting_level=self.nesting_level))
        kwargs = {**self.backend_kwargs, **kwargs}
        context = kwargs.pop("context", None)
        start_method = kwargs.pop("start_method", None) or (
            context.get_start_method() if context is not None else None
        )
        if start_method is None:
            import multiprocessing

            start_method = multiprocessing.get_start_method()
        # Checked here, by the pool's own rules: the pool gets a wrapper of them, so a
        # mistake would surface only in a worker.
        initializer = _checks.function(kwargs.pop("initializer", None), "initializer", none=True)
        initargs = _checks.positionals(kwargs.pop("initargs", ()), "initargs")
        kwargs.pop("idle_worker_timeout", None)  # loky's option: our workers stay
        env = self._prepare_worker_env(n_jobs=n_jobs)
        pool = _shared_pool(n_jobs, start_method, env, initializer, initargs)
        self.parallel = parallel
        self._workers = _Session(pool, getattr(parallel, "_id", "direct"), kwargs)
        return n_jobs

    def submit(self, func: Any, callback: Callable | None = None) -> Future:
        session = self._workers
        if session is None:
            raise RuntimeError("the pipepool backend was not configured (or was terminated)")
        return session.submit(func, callback)

    def retrieve_result_callback(self, future: Future) -> list:
        session = self._workers
        if session is None:  # terminated meanwhile: the plain outcome
            return future.result()
        return session.result(future)

    def abort_everything(self, ensure_ready: bool = True) -> None:
        session = self._workers
        self._workers = None
        if session is not None:
            session.abort()
            session.close()
        if ensure_ready:
            self.configure(
                n_jobs=self.parallel.n_jobs, parallel=self.parallel, **self.parallel._backend_kwargs
            )

    def terminate(self) -> None:
        """End of a call: free its memmapped arrays; the pool stays for the next one."""
        session = self._workers
        self._workers = None
        if session is not None:
            session.close()
        self.reset_batch_stats()


def _register() -> None:
    register_parallel_backend(BACKEND_NAME, PipepoolBackend)


_register()
