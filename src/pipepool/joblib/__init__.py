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

This module is the parent's side (the backend); ``_wire.py`` the worker's: what a
batch and its results become between the two.
"""

from __future__ import annotations

# Absolute imports only: this module is named ``pipepool.joblib``; ``joblib`` below is
# always the real one (no implicit relative imports in Python 3).
import logging
import os
import queue
import reprlib
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from typing import Any

import joblib  # type: ignore[import-untyped]  # noqa: F401  (the real joblib)
from joblib._memmapping_reducer import (  # type: ignore[import-untyped]
    TemporaryResourcesManager,
    get_memmapping_reducers,
)
from joblib._parallel_backends import (  # type: ignore[import-untyped]
    AutoBatchingMixin,
    FallbackToBackend,
    ParallelBackendBase,
    SequentialBackend,
    inside_dask_worker,
)
from joblib.externals.loky.process_executor import (  # type: ignore[import-untyped]
    TerminatedWorkerError,
)
from joblib.parallel import (  # type: ignore[import-untyped]
    cpu_count,
    register_parallel_backend,
)

from pipepool import _checks
from pipepool.errors import DeathCause, WorkerLostError, describe_exit
from pipepool.futures import ProcessPoolExecutor
from pipepool.joblib._wire import _Cloudpickled, _Job, _worker_init, np
from pipepool.worker.bootstrap import WORKER_NAME

__all__ = ["BACKEND_NAME", "PipepoolBackend", "WorkerCrashedError", "shutdown_pool"]

BACKEND_NAME = "pipepool"
"""The name this module registers the backend under: ``parallel_config(backend=...)``."""
CALLS_SHOWN = 3  # calls of a lost batch named in the error; the rest are counted


class WorkerCrashedError(WorkerLostError, TerminatedWorkerError):
    """A worker died (segfault, OOM killer, ``kill -9``) while running a joblib batch.

    Only that batch failed; the pool replaced the worker. Catch it as pipepool's
    ``WorkerLostError``, as loky's ``TerminatedWorkerError`` (code written for joblib's
    default backend keeps working) or as ``BrokenProcessPool``. ``pid``, ``exitcode``,
    ``signal`` (e.g. ``"SIGKILL"``), ``cause`` (``WorkerLostError.cause``, a
    ``DeathCause``: ``"oom"``, ``"crash"``, ``"signal"``, ``"exit"``) and ``calls`` (reprs
    of the batch's calls) say which.
    """

    def __init__(
        self,
        message: str,
        *,
        pid: int | None,
        exitcode: int | None,
        calls: tuple = (),
        cause: DeathCause = DeathCause.UNKNOWN,
    ) -> None:
        super().__init__(message, pid=pid, exitcode=exitcode, cause=cause)
        self.calls = calls

    def __reduce__(self):
        return (
            _rebuild_crashed,
            (str(self), self.pid, self.exitcode, self.calls, self.cause),
        )


def _rebuild_crashed(
    message: str,
    pid: int | None,
    exitcode: int | None,
    calls: tuple,
    cause: DeathCause = DeathCause.UNKNOWN,
) -> WorkerCrashedError:
    return WorkerCrashedError(message, pid=pid, exitcode=exitcode, calls=calls, cause=cause)


# What the error says of each cause the pool can tell; the WorkerLostError it is raised
# from has the details (how the OOM count rose, the crash's stack, where no count exists).
CAUSE_SAID = {
    DeathCause.OOM: "Cause: the kernel's OOM killer (a count of OOM kills rose while it ran).",
    DeathCause.CRASH: "Cause: a crash in native code (a fatal signal, its stack reported).",
    DeathCause.SIGNAL: (
        "Cause: a signal, sent by the task itself or from outside the pool (kill -9, a supervisor)."
    ),
    DeathCause.EXIT: "Cause: the process ended itself (os._exit(), or exit() in native code).",
}


# -- the shared pool ------------------------------------------------------------------------

_pool_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_pool_args: tuple | None = None


def _shared_pool(
    n_jobs: int, start_method: str, env: dict, initializer: Callable | None, initargs: tuple
) -> ProcessPoolExecutor:
    """The process-wide pool, reused while its arguments are the same (as loky's
    reusable executor); other arguments replace it (its queued work still finishes)."""
    global _pool, _pool_args
    args = (n_jobs, start_method, env, initializer, initargs)
    with _pool_lock:
        pool = _pool
        if pool is not None and _pool_args == args:
            return pool
        if pool is not None:
            pool.shutdown(wait=False)
        import multiprocessing

        pool = ProcessPoolExecutor(
            n_jobs,
            mp_context=multiprocessing.get_context(start_method),
            initializer=_worker_init,
            initargs=(env, None if initializer is None else _Cloudpickled(initializer), initargs),
        )
        _pool, _pool_args = pool, args
        return pool


def _discard_pool(pool: ProcessPoolExecutor) -> None:
    """A pool that refuses work (its initializer keeps failing) is not shared anymore:
    the next call starts a new one, as loky replaces a broken executor."""
    global _pool, _pool_args
    with _pool_lock:
        if _pool is pool:
            _pool, _pool_args = None, None
    pool.shutdown(wait=False)


def shutdown_pool(wait: bool = True) -> None:
    """Stop the shared pool's workers (a later ``Parallel`` call starts a new pool)."""
    global _pool, _pool_args
    with _pool_lock:
        pool, _pool, _pool_args = _pool, None, None
    if pool is not None:
        pool.shutdown(wait=wait)


class _CleanupThread:
    """Removes ended calls' memmapped files off the caller's clock, as loky's resource
    tracker does (about 6 ms per 100 MB array); joblib's own exit hook still covers an
    interpreter that exits first. Started on first use; a forked child gets a new one."""

    def __init__(self, name: str = "pipepool-joblib-cleanup") -> None:
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.name = name

    def submit(self, callback: Callable[[Any], Any], arg: Any) -> None:
        if self.thread is None:
            with self.lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                    self.thread.start()
        self.queue.put((callback, arg))

    def _run(self) -> None:
        get = self.queue.get
        while True:
            callback, arg = get()
            try:
                callback(arg)
            except BaseException:  # log, never kill the thread
                logging.getLogger("pipepool").exception("joblib clean-up failed")
            del callback, arg


_cleanup = _CleanupThread()


def _forget_cleanup_thread() -> None:
    global _cleanup
    _cleanup = _CleanupThread()  # a forked child has the object, not the thread


os.register_at_fork(after_in_child=_forget_cleanup_thread)


# -- one Parallel call's view of the pool ---------------------------------------------------


class _Session:
    """What one ``Parallel`` call (or ``with Parallel(...)`` block) owns in the shared
    pool: its futures, so that abort stops only its own tasks, and its folder of
    memmapped arrays, removed once it ends."""

    def __init__(self, pool: ProcessPoolExecutor, context_id: str, memmap: dict) -> None:
        self.pool = pool
        self.futures: set[Future] = set()
        self.batches: dict[Future, Any] = {}
        self.aborted = False  # abort() ran: joblib hears nothing more of these futures
        self.context_id = context_id
        self.temp = None
        self.reducers = None
        if np is not None and memmap.get("max_nbytes") is not None:
            self.temp = TemporaryResourcesManager(memmap.get("temp_folder"), context_id)
            # unlink_on_gc_collect=False: the files live until the call ends. Freeing
            # them as workers drop them needs a resource tracker shared with every
            # worker, which loky's fork+exec provides and pipepool's start methods not.
            self.reducers, _ = get_memmapping_reducers(
                temp_folder_resolver=self.temp.resolve_temp_folder_name,
                max_nbytes=memmap["max_nbytes"],
                mmap_mode=memmap.get("mmap_mode", "r"),
                verbose=memmap.get("verbose", 0),
                unlink_on_gc_collect=False,
            )

    def submit(self, batch: Any, callback: Callable | None) -> Future:
        try:
            future = self.pool.submit(_Job(batch, self.reducers))
        except BrokenProcessPool:
            _discard_pool(self.pool)
            raise
        self.futures.add(future)
        self.batches[future] = batch
        future.add_done_callback(self._forget)
        if callback is not None:
            # joblib's completion callback (it dispatches the next batch) runs in the
            # thread that settles the future: the pool's driver, or a caller driving it.
            # The batch it submits then goes out in that thread's next round, with no
            # thread hop on the way (loky hands results to a thread of its own, and so
            # did this backend: a third of its overhead over joblib's sequential run).
            future.add_done_callback(partial(self._complete, callback))
        return future

    def _complete(self, callback: Callable, future: Future) -> None:
        """joblib's completion callback, unless this call was aborted: a future of it
        settled later (cancelled by abort(), its tasks killed) would otherwise reach
        joblib during the caller's next call with the same ``Parallel`` object, and its
        error would abort that call (joblib's flag is the object's, reset per call)."""
        if not self.aborted:
            callback(future)

    def _forget(self, future: Future) -> None:
        self.futures.discard(future)

    def result(self, future: Future) -> list:
        batch = self.batches.pop(future, None)
        try:
            return future.result()
        except WorkerLostError as lost:
            if type(lost) is not WorkerLostError:
                raise  # already ours
            raise _crashed(lost, batch) from lost
        except BrokenProcessPool:  # the initializer keeps failing: broken for good
            _discard_pool(self.pool)
            raise

    def abort(self) -> None:
        """Cancel this call's queued tasks and kill the workers running its others
        (the pool replaces them); nothing of the call is left running, and joblib hears
        no more of it (``_complete``)."""
        self.aborted = True
        for future in list(self.futures):
            self.pool.kill(future)
        self.batches.clear()

    def close(self) -> None:
        """The call ended: its memmapped arrays' files go, off the caller's clock (as
        loky's resource tracker removes them): unlinking 100 MB of them takes
        milliseconds the caller need not wait for. joblib's own exit hook removes a
        folder still there when the interpreter exits."""
        if self.temp is not None:
            _cleanup.submit(_remove_files, (self.temp, self.context_id))
            self.temp = None


def _remove_files(what: tuple[TemporaryResourcesManager, str]) -> None:
    temp, context_id = what
    # force: our workers never decrement the files' counts (see _Session.__init__).
    temp._clean_temporary_resources(context_id=context_id, force=True, allow_non_empty=True)


def _crashed(lost: WorkerLostError, batch: Any) -> WorkerCrashedError:
    items = list(getattr(batch, "items", ()))
    shown = items if len(items) <= CALLS_SHOWN + 1 else [*items[:CALLS_SHOWN], items[-1]]
    calls = tuple(_describe_call(*item) for item in shown)
    if len(items) > len(shown):
        listed = f"{', '.join(calls[:-1])}, ... {calls[-1]}"
    else:
        listed = ", ".join(calls)
    return WorkerCrashedError(
        f"worker pid {lost.pid} {describe_exit(lost.exitcode)} (exit code {lost.exitcode}) "
        f"while running a batch of {len(items)} joblib task(s): {listed}. Only this batch "
        "failed; the pool replaced the worker. "
        + CAUSE_SAID.get(
            lost.cause,
            "Likely cause: a crash in native code (segfault), the OOM killer, or a "
            "signal (sent by the task itself or from outside).",
        ),
        pid=lost.pid,
        exitcode=lost.exitcode,
        calls=calls,
        cause=lost.cause,
    )


_short = reprlib.Repr()
_short.maxstring = _short.maxother = 40


def _describe_call(func: Any, args: tuple, kwargs: dict) -> str:
    name = getattr(func, "__qualname__", None) or repr(func)
    parts = [_short.repr(a) for a in args] + [f"{k}={_short.repr(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


# -- the backend ----------------------------------------------------------------------------


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
