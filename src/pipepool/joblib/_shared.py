"""The process-wide pool every ``Parallel`` call shares, and one call's view of it.

``_shared_pool`` keeps one ``ProcessPoolExecutor`` while its arguments stay the same (as
loky's reusable executor); a ``_Session`` is what one call owns in it: its futures (so
that an abort stops only its tasks) and its memmapped arrays, whose files a background
thread (``_CleanupThread``) removes once the call ends.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from typing import Any

from joblib._memmapping_reducer import (  # type: ignore[import-untyped]
    TemporaryResourcesManager,
    get_memmapping_reducers,
)

from pipepool.errors import WorkerLostError
from pipepool.futures import ProcessPoolExecutor
from pipepool.joblib._crash import _crashed
from pipepool.joblib._wire import _Cloudpickled, _Job, _worker_init, np

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
