"""ProcessPoolExecutor: ``concurrent.futures`` on top of a LocalExecutor.

Data flow (one driver thread per pool; only it touches the LocalExecutor)::

    submit() ─► _pending (deque) ─► feed ─► LocalExecutor.queue_call ─► workers
      │  user threads        wake() │  driver thread
      ▼                             ▼
    Future ◄── set_result / set_exception ◄── deliver ◄── get_event_buffer ◄── sync

A user thread appends a work item to ``_pending`` under the pool's lock and writes one
byte to the loop's wake-up pipe; the driver thread, which otherwise sleeps in the
loop's poll, wakes and runs one round of named steps: *feed* (move pending work into the
LocalExecutor while it holds fewer than its capacity, below), *sync*
(the LocalExecutor's own round: results, reaping and starting workers, dispatch) and
*deliver* (complete futures from the event buffer). Commands (``kill``) travel the
same way. The LocalExecutor is not thread-safe, so no other thread calls it.

Future states follow the standard library: a future is PENDING (cancellable) while it
waits in ``_pending`` and becomes RUNNING when the driver hands it to the LocalExecutor,
which happens at most ``max_workers + EXTRA_QUEUED`` tasks ahead of the workers (the
standard library's call queue holds ``max_workers + 1``), plus ``depth - 1`` per worker
while the LocalExecutor's adaptive dispatch depth is above 1 (tiny tasks: up to 63 more
per worker; tasks that take milliseconds or more: none).
A cancelled future's function therefore never runs. Done-callbacks run in
the driver thread (the stdlib runs them in its manager thread); they may submit more work.

Workers: under fork, all of them are started by the first ``submit`` from the calling
thread (as the stdlib does); later ones (replacing a dead or recycled worker) are forked
from the driver thread, which the usual fork-with-threads caveats apply to: prefer
forkserver or spawn for code that holds locks in other threads. Under spawn and
forkserver they start on demand. At interpreter exit, pools finish the work already
submitted (as the stdlib), unless the program is ending on KeyboardInterrupt; a worker
never outlives its parent (its lifeline pipe ends it).

Where it differs from the standard library, on purpose:

* A worker that dies fails only the task it was running (``WorkerLostError``, a
  ``BrokenProcessPool``); the pool starts a replacement and never becomes broken for it.
* Pickling failures fail only their future (``TaskPicklingError`` or
  ``TaskUnpicklingError``, ``.part`` says which part), an exception that cannot be
  unpickled included.
* An initializer that fails is retried with back-off (``executor.INIT_RETRIES``) before
  the pool becomes broken; then futures fail with ``InitializerError`` (a
  ``BrokenProcessPool``) and ``submit`` raises it.
* ``max_tasks_per_child`` is allowed with the fork start method (replacements are forked
  from the driver thread whatever the option, so it adds no new hazard), and values
  above 1 do not deadlock (CPython gh-115634, Python 3.11 to 3.13).
* ``shutdown(cancel_futures=True)`` cancels before it returns, even with ``wait=False``,
  and those futures notify ``wait()``/``as_completed()`` (the stdlib's do not).
* A future stopped by ``kill()`` or ``terminate_workers()`` after it was handed over
  fails with ``TaskKilledError`` (it is RUNNING and cannot turn CANCELLED).
* ``with_options(timeout=...)`` bounds single tasks and ``kill(future)`` stops one.
* KeyboardInterrupt leaving a ``with`` block, or ending the program, stops the workers
  at once instead of waiting for the queued work.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError, Executor, Future
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from . import _signals
from .errors import RemoteTraceback, TaskKilledError
from .events import State
from .executor import LocalExecutor

__all__ = ["ProcessPoolExecutor"]

EXTRA_QUEUED = None  # tasks handed to the LocalExecutor beyond one per worker; None means
# max_workers. More keeps every worker fed across a driver round (its next task is already
# queued when its result arrives); fewer keeps more futures cancellable (PENDING).
IDLE_WAIT = 1.0  # s the driver may sleep in the poll; the LocalExecutor shortens it
# to its own next deadline (worker reaping, task timeouts), and wake() cuts it short.
TERMINATE_JOIN = 30.0  # s the exit hook waits for a terminating driver (SIGKILL takes µs)

_SUBMIT_KILL = "kill"

# Drivers with a live thread, for the exit hook; a driver removes itself when it ends.
_live_drivers: set[_Driver] = set()
_global_shutdown = False


class _Driver:
    """State shared by a pool (user threads) and its driver thread.

    Fields under ``lock``: ``pending`` appends, ``shutdown``, ``terminate``, ``broken``,
    ``loop_closed``. ``running`` and ``kill_on_start`` belong to the driver thread only.
    Kept apart from the pool object so the thread does not keep the pool alive: a pool
    that is garbage collected shuts down like ``shutdown(wait=False)``.
    """

    def __init__(self, executor: LocalExecutor, capacity: int) -> None:
        self.executor = executor
        self.capacity = capacity  # handed over at most, at dispatch depth 1
        self.workers = executor.parallelism  # each gets depth - 1 more at a deeper depth
        # Re-entrant: a weakref callback (pool collected) may fire in any thread, the
        # driver included, while it holds the lock.
        self.lock = threading.RLock()
        self.pending: deque[tuple[int, Future, Callable, tuple, dict, float | None]] = deque()
        self.commands: deque[tuple[str, int]] = deque()
        self.keys = itertools.count()
        self.shutdown = False
        self.terminate = False
        self.broken: BaseException | None = None
        self.loop_closed = False
        self.thread: threading.Thread | None = None
        self.running: dict[int, Future] = {}  # handed to the LocalExecutor, not finished
        self.kill_on_start: set[int] = set()  # kill requested before the task started
        self.pids: tuple[int, ...] = ()  # live worker pids after the last round
        self.pool_ref: weakref.ref | None = None  # its callback shuts down a lost pool

    # -- called from any thread (lock held by the caller unless said otherwise) ---------

    def wake(self) -> None:
        """Cut the driver's poll short. Caller holds ``lock``, so the loop cannot be
        closed meanwhile: a write to a closed (perhaps reused) fd number is never made."""
        if not self.loop_closed and self.thread is not None:
            self.executor.wake()

    def request_shutdown(self, *, terminate: bool = False) -> None:
        with self.lock:
            self.shutdown = True
            self.terminate = self.terminate or terminate
            self.wake()

    def drain_pending(self) -> list[Future]:
        """Take every pending (never handed over) future out of the queue."""
        taken = []
        while True:
            try:
                taken.append(self.pending.popleft()[1])
            except IndexError:
                return taken

    # -- the driver thread ------------------------------------------------------------

    def run(self) -> None:
        """The driver thread: rounds of feed, sync and deliver until shut down."""
        _signals.block_all_in_this_thread()  # Ctrl-C belongs to the main thread
        ex = self.executor
        try:
            while True:
                busy = self._feed()
                self._sync(timeout=0.0 if busy else IDLE_WAIT)
                self._deliver()
                self.pids = tuple(ex.worker_pids())
                if self.terminate:
                    self._stop(terminate=True)
                    return
                with self.lock:
                    done = self.shutdown and not self.pending and not self.running
                    if done:
                        self.loop_closed = True  # from here on nobody writes to the loop
                if done:
                    self._stop(terminate=False)
                    return
        except BaseException as exc:  # the safety net: never strand a future
            self._crash(exc)
        finally:
            _live_drivers.discard(self)

    def _sync(self, timeout: float) -> None:
        """The LocalExecutor's round; at interpreter shutdown, do without new workers."""
        ex = self.executor
        try:
            ex.sync(timeout=timeout)
        except RuntimeError:
            # Python 3.12 refuses os.fork() once the interpreter is shutting down. The
            # exit hook still lets the pool finish its work: with the workers it has.
            alive = len(ex.worker_pids())
            if not (_global_shutdown and 0 < alive < ex.parallelism):
                raise
            ex.parallelism = alive  # a step that cannot repeat: each time there are fewer

    def _feed(self) -> bool:
        """Hand pending work to the LocalExecutor while it has room; run commands."""
        moved = False
        pending, running, ex = self.pending, self.running, self.executor
        capacity = self.capacity + self.workers * (ex.dispatch_depth - 1)
        while pending and len(running) < capacity:
            key, fut, fn, args, kwargs, timeout = pending.popleft()
            if not fut.set_running_or_notify_cancel():
                continue  # cancelled while pending: it never runs
            try:
                ex.queue_call(key, fn, args, kwargs, timeout=timeout)
            except Exception as exc:  # not callable: that future's error
                fut.set_exception(exc)
                continue
            running[key] = fut
            moved = True
        while self.commands:
            command, key = self.commands.popleft()
            moved = True
            # Running: kill its worker. Queued in the LocalExecutor: cancel it there.
            # Sent to a worker but not started: kill it when its RUNNING event comes.
            if (
                command == _SUBMIT_KILL
                and key in running
                and not ex.kill(key)
                and not ex.cancel(key)
            ):
                self.kill_on_start.add(key)
        return moved

    def _deliver(self) -> None:
        """Complete the futures of every terminal event; act on RUNNING ones."""
        ex = self.executor
        broken = ex.broken
        for key, event in ex.get_event_buffer().items():
            if not event.state.terminal:
                if event.state is State.RUNNING and key in self.kill_on_start:
                    self.kill_on_start.discard(key)
                    ex.kill(key)
                continue
            self.kill_on_start.discard(key)
            fut = self.running.pop(key, None)
            if fut is None:
                continue
            if event.state is State.SUCCESS:
                fut.set_result(event.result)
                continue
            error = event.exception
            if error is not None and error is broken:
                self._break(error)
            elif isinstance(error, CancelledError) and not isinstance(
                error.__cause__, RemoteTraceback
            ):  # (a task's own error has one)
                # The LocalExecutor cancelled a task that was queued in it: on kill()
                # before it started, or by terminate(). Its future is already RUNNING
                # (it cannot turn CANCELLED now), so it fails instead.
                error = TaskKilledError(
                    "the executor was terminated before the task started"
                    if self.terminate
                    else "the task was killed on request before it started"
                )
            fut.set_exception(error)  # type: ignore[arg-type]

    def _break(self, error: BaseException) -> None:
        """The initializer keeps failing: like the stdlib, the pool is broken for good."""
        with self.lock:
            if self.broken is None:
                self.broken = error
            self.shutdown = True
            doomed = self.drain_pending()
        for fut in doomed:
            if fut.set_running_or_notify_cancel():
                fut.set_exception(error)

    def _stop(self, *, terminate: bool) -> None:
        """Last step of the thread: stop the workers, fail or cancel what is left."""
        with self.lock:
            self.loop_closed = True
            doomed = self.drain_pending()
        _cancel(doomed)
        ex = self.executor
        if terminate:
            ex.terminate()  # running tasks fail with TaskKilledError, queued ones cancel
        else:
            ex.end()
        self._deliver()
        self.pids = ()
        self._fail_running(BrokenProcessPool("the pool stopped before the task finished"))

    def _crash(self, exc: BaseException) -> None:
        """An internal error in the driver: fail every future with it, never hang one."""
        error = BrokenProcessPool(
            f"the pipepool driver thread failed ({type(exc).__name__}: {exc}); "
            "the pool is not usable anymore"
        )
        error.__cause__ = exc
        with self.lock:
            self.broken = self.broken or error
            self.shutdown = True
            self.loop_closed = True
            doomed = self.drain_pending()
        for fut in doomed:
            if fut.set_running_or_notify_cancel():
                fut.set_exception(error)
        with contextlib.suppress(BaseException):  # best effort: the futures matter more
            self.executor.terminate()
        self.pids = ()
        self._fail_running(error)

    def _fail_running(self, error: BaseException) -> None:
        running, self.running = self.running, {}
        for fut in running.values():
            if not fut.done():
                fut.set_exception(error)


def _cancel(futures: list[Future]) -> None:
    """Cancel futures taken from the queue and tell their waiters (``wait()``,
    ``as_completed()``): ``cancel()`` alone leaves those waiting for the executor to."""
    for fut in futures:
        fut.cancel()
        fut.set_running_or_notify_cancel()


class ProcessPoolExecutor(Executor):
    """A drop-in ``concurrent.futures.ProcessPoolExecutor`` that survives its workers.

    Same constructor and methods as the standard library's; see the module docstring
    for where it differs. Extras: ``with_options(timeout=...)`` returns a view whose
    ``submit``/``map`` bound each task's run time, ``kill(future)`` stops one task, and
    ``worker_pids()`` lists the live workers.
    """

    def __init__(
        self,
        max_workers: int | None = None,
        mp_context: Any = None,
        initializer: Callable[..., object] | None = None,
        initargs: Iterable[Any] = (),
        *,
        max_tasks_per_child: int | None = None,
    ) -> None:
        if max_workers is None:
            cpu_count = getattr(os, "process_cpu_count", os.cpu_count)
            max_workers = cpu_count() or 1
        elif max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if mp_context is None:
            # As the stdlib: spawn when workers are recycled, the platform default else.
            mp_context = multiprocessing.get_context(
                "spawn" if max_tasks_per_child is not None else None
            )
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        if max_tasks_per_child is not None:
            if not isinstance(max_tasks_per_child, int):
                raise TypeError("max_tasks_per_child must be an integer")
            if max_tasks_per_child <= 0:
                raise ValueError("max_tasks_per_child must be >= 1")
        self._max_workers = max_workers
        self._mp_context = mp_context
        self._initializer = initializer
        self._initargs = tuple(initargs)
        self._max_tasks_per_child = max_tasks_per_child
        start_method = mp_context.get_start_method(allow_none=False)
        executor = LocalExecutor(
            max_workers,
            start_method=start_method,
            max_tasks_per_child=max_tasks_per_child,
            initializer=initializer,
            initargs=self._initargs,
            # Adaptive depth: tiny tasks stream many per worker (fewer round trips and
            # wake-ups), long ones go one per worker, and tasks sent behind a surprise
            # long one are revoked and run elsewhere (no head-of-line blocking).
            prefetch=None,
        )
        extra = max_workers if EXTRA_QUEUED is None else EXTRA_QUEUED
        self._driver = _Driver(executor, max_workers + extra)
        # Collected without shutdown(): finish the submitted work, then stop (stdlib too).
        # The weakref lives on the driver, not on the pool: a weakref that is garbage
        # together with its referent (a pool in a reference cycle) never calls back.
        self._driver.pool_ref = weakref.ref(self, lambda _, d=self._driver: d.request_shutdown())

    # -- the stdlib API -----------------------------------------------------------------

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Schedule ``fn(*args, **kwargs)``; return its Future."""
        return self._submit(fn, args, kwargs, None)

    submit.__doc__ = Executor.submit.__doc__

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = None,
    ) -> Iterator[Any]:
        """Like the builtin ``map(fn, *iterables)``, run in the pool, results in order.

        ``timeout`` (seconds, from this call) bounds the wait for each next result and
        raises ``TimeoutError``; ``chunksize`` sends that many calls per task;
        ``buffersize`` (as in Python 3.14, here on every version) reads the iterables
        lazily and keeps at most that many chunks in flight, so an endless iterable
        works and memory stays flat. Without it the iterables are read at once.
        """
        return _map(self._map_submitter(None), fn, iterables, timeout, chunksize, buffersize)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; finish what was submitted (or cancel the pending part with
        ``cancel_futures``) and stop the workers. ``wait`` joins the driver thread."""
        self._stop_taking_work(cancel_futures=cancel_futures, terminate=False)
        if wait:
            self._join()

    shutdown.__doc__ = Executor.shutdown.__doc__

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> bool:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            # Ctrl-C: the user wants out now, not after the queued work (the stdlib waits).
            self.terminate_workers()
        else:
            self.shutdown(wait=True)
        return False

    # -- extras -------------------------------------------------------------------------

    def with_options(self, *, timeout: float | None = None) -> _PoolView:
        """A view of this pool whose ``submit`` and ``map`` use per-task options.

        ``timeout``: seconds a task may run, counted from the moment a worker starts it
        (a ``map`` chunk counts as one task). Past it the worker is killed and replaced,
        and the future fails with ``TaskTimeoutError`` (a ``TimeoutError``).
        """
        if timeout is not None and not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds or None")
        return _PoolView(self, timeout)

    def kill(self, future: Future) -> bool:
        """Stop one task. Pending: cancel it (True). Started: kill its worker, which is
        replaced; the future fails with ``TaskKilledError`` unless it finishes first.
        Handed over but not started: it fails with ``TaskKilledError`` without running,
        or is killed as soon as it starts. False if it had already finished."""
        owner_key = getattr(future, "_pipepool", None)
        if owner_key is None or owner_key[0] is not self._driver:
            raise ValueError("this future does not belong to this pool")
        if future.cancel():
            return True
        if future.done():
            return False
        d = self._driver
        with d.lock:
            d.commands.append((_SUBMIT_KILL, owner_key[1]))
            d.wake()
        return True

    def terminate_workers(self) -> None:
        """Stop now (as Python 3.14's method of this name): cancel pending futures, kill
        the workers (SIGTERM, then SIGKILL after a grace period); running futures fail
        with ``TaskKilledError``. Waits for the driver thread to finish."""
        self._stop_taking_work(cancel_futures=True, terminate=True)
        self._join()

    kill_workers = terminate_workers

    def worker_pids(self) -> list[int]:
        """Pids of the live workers, as of the driver's last round."""
        return list(self._driver.pids)

    # -- internals ----------------------------------------------------------------------

    def _map_submitter(self, timeout: float | None) -> Callable[..., _MapItem]:
        """``submit`` for one ``map`` call: its items are ``_MapItem``s, not Futures."""
        batch = _MapBatch()

        def submit(fn: Callable[..., Any], /, *args: Any) -> _MapItem:
            return self._submit(fn, args, {}, timeout, _MapItem(batch))

        return submit

    def _submit(
        self,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        timeout: float | None,
        item: _MapItem | None = None,
    ) -> Any:
        d = self._driver
        with d.lock:
            if d.broken is not None:
                # A fresh exception each time, as the stdlib: the stored one is shared.
                raise type(d.broken)(*d.broken.args) from d.broken.__cause__
            if d.shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if _global_shutdown:
                raise RuntimeError("cannot schedule new futures after interpreter shutdown")
            if d.thread is None:
                self._start_driver()
            key = next(d.keys)
            if item is None:
                fut: Future | _MapItem = Future()
                fut._pipepool = (d, key)  # type: ignore[union-attr]  # for kill()
            else:
                fut = item
            d.pending.append((key, fut, fn, args, kwargs, timeout))
            # One wake per batch: a non-empty queue means the driver is already due to
            # look (a wake-up is unread) or is at capacity (a result will wake it).
            if len(d.pending) == 1:
                d.wake()
            return fut

    def _start_driver(self) -> None:
        """Start the LocalExecutor and its driver thread (caller holds the lock).

        Runs in the submitting thread, not the driver, so helper processes the start
        method needs (resource tracker, fork server) start with that thread's signal
        mask instead of the driver's all-blocked one.
        """
        d = self._driver
        ex = d.executor
        if ex.start_method != "fork":
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()
        ex.start()
        try:
            if ex.start_method == "fork":
                # As the stdlib does under fork: every worker now, from this thread, while
                # the driver thread does not exist yet (fork copies only the forking
                # thread; the fewer threads then, the fewer locks a child inherits held),
                # and before interpreter shutdown can forbid fork (3.12). Only
                # replacements are forked from the driver.
                with contextlib.suppress(Exception):  # the driver retries, futures report
                    ex.prestart()
        finally:
            thread = threading.Thread(
                target=d.run, name=f"pipepool-driver-{id(self):x}", daemon=True
            )
            d.thread = thread
            _live_drivers.add(d)
            thread.start()

    def _stop_taking_work(self, *, cancel_futures: bool, terminate: bool) -> None:
        d = self._driver
        # A Ctrl-C between taking pending futures out of the queue and cancelling them
        # would strand them PENDING forever: the handlers wait until both are done.
        deferred = None
        try:
            deferred = _signals.defer()
            with d.lock:
                d.shutdown = True
                d.terminate = d.terminate or terminate
                doomed = d.drain_pending() if cancel_futures else []
                d.wake()
            _cancel(doomed)  # outside the lock: done-callbacks may call back into the pool
        finally:
            _signals.undefer(deferred)

    def _join(self) -> None:
        thread = self._driver.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


class _PoolView:
    """``pool.with_options(...)``: ``submit`` and ``map`` with per-task options."""

    def __init__(self, pool: ProcessPoolExecutor, timeout: float | None) -> None:
        self._pool = pool
        self._timeout = timeout

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return self._pool._submit(fn, args, kwargs, self._timeout)

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = None,
    ) -> Iterator[Any]:
        return _map(
            self._pool._map_submitter(self._timeout), fn, iterables, timeout, chunksize, buffersize
        )


# -- map ---------------------------------------------------------------------------------


def _chunks(iterable: Iterable[Any], size: int) -> Iterator[tuple]:
    it = iter(iterable)
    while chunk := tuple(itertools.islice(it, size)):
        yield chunk


_PENDING, _RUNNING, _OK, _ERROR, _CANCELLED = range(5)  # a _MapItem's states, in order


class _MapBatch:
    """What the items of one ``map`` call share: one Condition, and the item its
    consumer waits for (the only one whose completion needs a wake-up)."""

    __slots__ = ("cond", "wanted")

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.wanted: _MapItem | None = None

    def notify(self, item: _MapItem) -> None:
        # The item's state is set before this reads ``wanted``; ``wait`` sets ``wanted``
        # before it reads the state: one of the two always sees the other.
        if self.wanted is item:
            with self.cond:
                self.cond.notify_all()

    def wait(self, item: _MapItem, timeout: float | None) -> None:
        end = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            self.wanted = item
            try:
                while item.state < _OK:
                    remaining = None if end is None else end - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError()
                    self.cond.wait(remaining)
            finally:
                self.wanted = None


class _MapItem:
    """One call of a ``map``: the part of a Future that map and the driver use, without
    the Condition and RLock a Future builds (and notifies) per call. Internal to the
    map's iterator, so no user code waits on it, adds callbacks or cancels it."""

    __slots__ = ("batch", "state", "value")

    def __init__(self, batch: _MapBatch) -> None:
        self.batch = batch
        self.state = _PENDING
        self.value: Any = None

    def set_running_or_notify_cancel(self) -> bool:
        if self.state == _CANCELLED:
            return False
        self.state = _RUNNING
        return True

    def set_result(self, value: Any) -> None:
        self.value = value
        self.state = _OK
        self.batch.notify(self)

    def set_exception(self, exc: BaseException) -> None:
        self.value = exc
        self.state = _ERROR
        self.batch.notify(self)

    def cancel(self) -> bool:
        if self.state == _PENDING:
            self.state = _CANCELLED
            self.batch.notify(self)
        return self.state == _CANCELLED

    def done(self) -> bool:
        return self.state >= _OK

    def result(self, timeout: float | None = None) -> Any:
        if self.state < _OK:
            self.batch.wait(self, timeout)
        if self.state == _OK:
            return self.value
        if self.state == _ERROR:
            raise self.value
        raise CancelledError()


def _map(
    submit: Callable[..., Any],
    fn: Callable[..., Any],
    iterables: tuple[Iterable[Any], ...],
    timeout: float | None,
    chunksize: int,
    buffersize: int | None,
) -> Iterator[Any]:
    """The stdlib's ``Executor.map`` (3.14, with ``buffersize``) over chunks."""
    if chunksize < 1:
        raise ValueError("chunksize must be >= 1.")
    if buffersize is not None and not isinstance(buffersize, int):
        raise TypeError("buffersize must be an integer or None")
    if buffersize is not None and buffersize < 1:
        raise ValueError("buffersize must be None or > 0")
    end_time = None if timeout is None else timeout + time.monotonic()
    if chunksize == 1:
        calls: Iterator[tuple] = zip(*iterables, strict=False)  # shortest, as map()
        task = fn
    else:
        calls = ((chunk,) for chunk in _chunks(zip(*iterables, strict=False), chunksize))
        task = _ChunkRunner(fn)
    if buffersize:
        fs: deque[_MapItem] = deque(
            submit(task, *args) for args in itertools.islice(calls, buffersize)
        )
    else:
        fs = deque(submit(task, *args) for args in calls)
    results = _results(fs, submit, task, calls if buffersize else None, end_time)
    return _flatten(results) if chunksize > 1 else results


class _ChunkRunner:
    """Runs one chunk of ``map`` in a worker; module level so it pickles by name, with a
    repr that reads well in error messages."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, chunk: tuple[tuple, ...]) -> list[Any]:
        fn = self.fn
        return [fn(*args) for args in chunk]

    def __reduce__(self):
        return (_ChunkRunner, (self.fn,))

    def __repr__(self) -> str:
        return f"<map chunk of {self.fn!r}>"


def _results(
    fs: deque[_MapItem],
    submit: Callable[..., _MapItem],
    task: Callable[..., Any],
    calls: Iterator[tuple] | None,
    end_time: float | None,
) -> Iterator[Any]:
    # A generator, so nothing waits until the first next(); the finally cancels what is
    # left when the consumer stops early, raises, or drops the iterator.
    try:
        while fs:
            if calls is not None:
                args = next(calls, None)
                if args is not None:
                    fs.append(submit(task, *args))  # refill before waiting: stay full
            fut = fs.popleft()
            try:
                if end_time is None:
                    yield fut.result()
                else:
                    yield fut.result(end_time - time.monotonic())
            finally:
                fut.cancel()
                del fut  # hold no reference to a result already handed out
    finally:
        for fut in fs:
            fut.cancel()


def _flatten(chunks: Iterator[list[Any]]) -> Iterator[Any]:
    for chunk in chunks:
        chunk.reverse()
        while chunk:
            yield chunk.pop()


# -- interpreter exit ----------------------------------------------------------------------


def _python_exit() -> None:
    """Before the interpreter finalizes: let every pool finish its submitted work, as the
    stdlib does, unless the program is ending on Ctrl-C: then stop the workers now."""
    global _global_shutdown
    if os.getpid() != _owner_pid:
        return  # a forked child (a worker, say) exiting: the parent's pools are not its own
    _global_shutdown = True
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    interrupted = isinstance(last, KeyboardInterrupt)
    drivers = list(_live_drivers)
    for d in drivers:
        d.request_shutdown(terminate=interrupted)
    try:
        for d in drivers:
            if d.thread is not None:
                d.thread.join()
    except KeyboardInterrupt:  # Ctrl-C while waiting for the work: stop it all now
        for d in drivers:
            d.request_shutdown(terminate=True)
        for d in drivers:
            if d.thread is not None:
                d.thread.join(TERMINATE_JOIN)


def _forget_pools_in_child() -> None:
    # A forked child inherits the pools' state, their locks perhaps held by a thread that
    # does not exist in it: it must never touch them (its exit hook would wait forever).
    global _owner_pid
    _owner_pid = os.getpid()
    _live_drivers.clear()


_owner_pid = os.getpid()
os.register_at_fork(after_in_child=_forget_pools_in_child)
threading._register_atexit(_python_exit)  # type: ignore[attr-defined]
