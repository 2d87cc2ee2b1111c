"""ProcessPoolExecutor: ``concurrent.futures`` on top of a LocalExecutor.

Data flow (one token holder at a time touches the LocalExecutor)::

    submit() ─► pending (deque) ─► feed ─► RecordExecutor.hand_over ─► workers
                                    │  token holder: a caller blocked in result(),
                                    ▼  map, wait(), as_completed(); else the driver thread
    Future ◄── settle (one lock per round) ◄── deliver ◄── _take_records ◄── the round

A future is the LocalExecutor's task record itself (``_item.Record``): one object per
call from ``submit`` to its outcome, handed over and handed back in bulk (the records
way out, ``pipepool._bookkeeping``). A user thread appends it to ``pending`` under the pool's
lock; the first of a batch wakes whoever holds the token (or the driver thread, if
nobody does). A thread that then waits for a result takes the token itself when it is
free and runs the turns (``_driver``): the worker's result wakes the waiting thread's
own poll, no thread hop in between. The driver thread holds the token only while work
is outstanding and no caller wants it: fire-and-forget work, done-callbacks, shutdown.
Commands (``kill``) travel the same way. Futures share their pool's lock, so a round's
results complete under one lock and one notify.

Future states follow the start marks: a future is PENDING (cancellable) until its worker
starts it, and RUNNING from then on (``running()`` is true only then). The driver hands
futures to the LocalExecutor at most ``max_workers + EXTRA_QUEUED`` tasks ahead of the
workers, plus ``depth - 1`` per worker while the adaptive dispatch depth is above 1
(tiny tasks: up to 63 more per worker), and the LocalExecutor sends them ahead to the
workers. ``cancel()`` of a future still waiting in ``_pending`` is immediate; of one
handed over, the LocalExecutor cancels it (queued there), claims it in memory shared
with its worker (the compiled loop: no answer to wait for), or asks the worker, and
``cancel()`` waits for the answer (``CANCEL_WAIT`` at most): started or cancelled,
never both. A cancelled future's function therefore never runs.
Done-callbacks run in the thread
that holds the token when the result comes in, the driver or a waiting caller (the
stdlib runs them in its manager thread); they may submit more work, and wait for it.

Workers start on demand, the first one from the first ``submit``'s thread, which sends
it the call before the driver thread exists. Under fork it then forks the pool's zygote;
every later worker (more for more work, replacements of a dead or recycled one) is
forked by the zygote, a single-threaded copy of the program as it was then
(docs/design.md, "The zygote"), never from this multi-threaded process. At interpreter
exit, pools finish the work already submitted (as the stdlib), unless the program is
ending on KeyboardInterrupt; a worker never outlives its parent (its lifeline pipe ends
it).

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
* ``shutdown(cancel_futures=True)`` cancels every future not started but each
  worker's next one, the ones already handed to the workers included (the stdlib's
  call queue keeps ``max_workers + 1`` it cannot cancel; CPython's own
  ``test_cancel_futures`` expects some to finish), before it returns, even with
  ``wait=False``, and those futures notify ``wait()``/``as_completed()`` (the stdlib's
  do not).
* One cancellation rule: a future that had not started when ``cancel()``, ``kill()``,
  ``shutdown(cancel_futures=True)`` or ``terminate_workers()`` ended it is CANCELLED
  (handed to a worker or not); one that had started fails with the error that stopped
  it (``TaskKilledError``).
* ``with_options(timeout=...)`` bounds single tasks and ``kill(future)`` stops one.
* KeyboardInterrupt leaving a ``with`` block, or ending the program, stops the workers
  at once instead of waiting for the queued work.

This module is the pool; ``_item`` its records (futures and map items), ``_map`` the
``map`` algorithm, ``_state`` the state the driver shares, ``_driver`` who holds the
token, ``_round`` what the token holder does, ``_seam`` every verb of the executor
this face uses, declared.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import multiprocessing
import os
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from concurrent.futures._base import FINISHED
from typing import Any, Literal

from .. import _checks, _signals
from .._task import NO_KWARGS
from ..executor import RecordExecutor
from ..worker.zygote import preload_here
from ._driver import BURST, Driver
from ._item import PoolFuture, Record
from ._map import MapCalls, MapItem, map_calls
from ._round import SUBMIT_KILL
from ._state import OPEN, Shared

__all__ = ["ProcessPoolExecutor"]

EXTRA_QUEUED = None  # tasks handed to the LocalExecutor beyond one per worker; None means
# max_workers. More keeps every worker fed across a round (its next task is already
# queued when its result arrives); fewer keeps more futures cancellable (PENDING).
TERMINATE_JOIN = 30.0  # s the exit hook waits for a terminating driver (SIGKILL takes µs)


class ProcessPoolExecutor(Executor):
    """A drop-in ``concurrent.futures.ProcessPoolExecutor`` that survives its workers.

    Same constructor and methods as the standard library's; see the module docstring
    for where it differs. Extras: ``with_options(timeout=...)`` returns a view whose
    ``submit``/``map`` bound each task's run time, ``kill(future)`` stops one task, and
    ``worker_pids()`` lists the live workers.

    ``preload`` names modules imported once where workers are made from, so that no
    worker imports them again (a replacement after ``max_tasks_per_child`` or a crash
    included); a module that fails raises ``PreloadError`` here, naming it and why,
    with nothing left running. Under fork this process imports them; under spawn and
    forkserver the pool starts now, with a zygote made with that start method that
    imports them and forks every worker (docs/guides/futures.md, "Imports paid once").
    """

    def __init__(
        self,
        max_workers: int | None = None,
        mp_context: Any = None,
        initializer: Callable[..., object] | None = None,
        initargs: Iterable[Any] = (),
        *,
        max_tasks_per_child: int | None = None,
        preload: Iterable[str] = (),
    ) -> None:
        # Each by the rule of its kind (``pipepool._checks``), in the stdlib's error
        # types; where the stdlib's own tests match its words, the message starts so.
        max_workers = _checks.count(
            max_workers, "max_workers", none=True, says=(None, "max_workers must be greater than 0")
        )
        max_tasks_per_child = _checks.count(max_tasks_per_child, "max_tasks_per_child", none=True)
        initializer = _checks.function(initializer, "initializer", none=True)
        initargs = _checks.positionals(initargs, "initargs")
        if mp_context is None:
            # As the stdlib: spawn when workers are recycled, the platform default else.
            mp_context = multiprocessing.get_context(
                "spawn" if max_tasks_per_child is not None else None
            )
        elif not callable(getattr(mp_context, "get_start_method", None)):
            raise TypeError(
                "mp_context must be a multiprocessing context (such as "
                f"multiprocessing.get_context('spawn')) or None, got {mp_context!r}"
            )
        self._mp_context = mp_context
        self._initializer = initializer
        self._initargs = tuple(initargs)
        self._max_tasks_per_child = max_tasks_per_child
        start_method = mp_context.get_start_method(allow_none=False)
        executor: RecordExecutor[Record] = RecordExecutor(
            max_workers,  # None: the CPUs this process may use (pipepool._cpus), not the stdlib's
            start_method=start_method,
            max_tasks_per_child=max_tasks_per_child,
            initializer=initializer,
            initargs=self._initargs,
            # Adaptive depth: tiny tasks stream many per worker (fewer round trips and
            # wake-ups), long ones go one per worker, and tasks sent behind a surprise
            # long one are revoked and run elsewhere (no head-of-line blocking).
            prefetch=None,
            preload=preload,
        )
        max_workers = self._max_workers = executor.parallelism
        # Why max_workers workers: "4 given", or the limit that decided (pipepool._cpus).
        self.max_workers_reason: str = executor.parallelism_reason
        extra = max_workers if EXTRA_QUEUED is None else EXTRA_QUEUED
        self._driver = Driver(executor, max_workers + extra)
        # Collected without shutdown(): finish the submitted work, then stop (stdlib too).
        # The weakref lives on the driver, not on the pool: a weakref that is garbage
        # together with its referent (a pool in a reference cycle) never calls back.
        driver = self._driver
        self._driver.pool_ref = weakref.ref(self, lambda _: driver.request_shutdown())
        if executor.preload:
            # A module that cannot be preloaded fails here, not at the first submit.
            if start_method == "fork":
                preload_here(executor.preload)  # the pool starts at the first submit
            else:
                with driver.lock:
                    self._start_driver(None)  # its zygote imports them now

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
        raises ``TimeoutError``; ``chunksize`` sends that many calls per task (raise it
        for many tiny calls: a chunk runs in C on both sides, and an item that raises
        ends its chunk after the results before it are yielded); ``buffersize`` (as in
        Python 3.14, here on every version) reads the iterables lazily and keeps at
        most that many chunks in flight, so an endless iterable works and memory stays
        flat. Without it the iterables are read at once. A chunk is one task for
        ``with_options(timeout=)``, ``max_tasks_per_child`` and cancellation.
        """
        return self._map(
            None, fn, iterables, timeout=timeout, chunksize=chunksize, buffersize=buffersize
        )

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; finish what was submitted (or cancel the pending part with
        ``cancel_futures``) and stop the workers. ``wait`` joins the driver thread."""
        self._stop_taking_work(cancel_futures=cancel_futures, terminate=False)
        if wait:
            self._join()

    shutdown.__doc__ = Executor.shutdown.__doc__

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> Literal[False]:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            # Ctrl-C: the user wants out now, not after the queued work (the stdlib waits).
            self.terminate_workers()
        else:
            self.shutdown(wait=True)
        return False

    # -- extras -------------------------------------------------------------------------

    def with_options(self, *, timeout: float | None = None) -> _PoolView:
        """A view of this pool whose ``submit`` and ``map`` use per-task options.

        ``timeout``: seconds a task may run (a finite number > 0, or None for no limit),
        counted from the moment a worker starts it (a ``map`` chunk counts as one task).
        Past it the worker is killed and replaced, and the future fails with
        ``TaskTimeoutError`` (a ``TimeoutError``).
        """
        # The rule of queue_call's timeout: one parameter, one rule, on every face.
        return _PoolView(self, _checks.seconds(timeout, "timeout", positive=True, none=True))

    def kill(self, future: Future) -> bool:
        """Stop one task, without waiting. Not handed over: cancel it (True). Started:
        kill its worker, which is replaced; the future fails with ``TaskKilledError``
        unless it finishes first. Handed over but not started: it is cancelled (its
        worker skips it), or killed if it starts first. False if it had already finished."""
        if not isinstance(future, PoolFuture) or future.driver is not self._driver:
            raise ValueError("this future does not belong to this pool")
        if future.cancel_pending():
            return True
        if future.done():
            return False
        d = self._driver
        with d.lock:
            d.commands.append((SUBMIT_KILL, future))
            d.poke()
        return True

    def terminate_workers(self) -> None:
        """Stop now (as Python 3.14's method of this name): kill the workers (SIGTERM,
        then SIGKILL after a grace period); futures that had started fail with
        ``TaskKilledError``, every other one (pending, or sent to a worker that had not
        started it) is cancelled. Waits for the driver thread to finish."""
        self._stop_taking_work(cancel_futures=True, terminate=True)
        self._join()

    kill_workers = terminate_workers

    def worker_pids(self) -> list[int]:
        """Pids of the live workers, as of a round at most ``PIDS_EVERY`` (10 ms) old."""
        return list(self._driver.pids)

    # -- internals ----------------------------------------------------------------------

    def _map(
        self,
        task_timeout: float | None,
        fn: Callable[..., Any],
        iterables: tuple[Iterable[Any], ...],
        **options: Any,
    ) -> Iterator[Any]:
        """``map`` (``options``: its ``timeout``, ``chunksize``, ``buffersize``) whose
        tasks have ``task_timeout`` (``with_options``): its items are ``MapItem``s, not
        Futures, and a chunk's results are handed out by this pool's loop."""

        def submit(fn: Callable[..., Any], /, *args: Any) -> MapItem:
            return self._submit(fn, args, NO_KWARGS, task_timeout, MapItem)  # type: ignore[no-any-return]

        def submit_all(fn: Callable[..., Any], calls: Iterable[Any]) -> deque[MapItem]:
            return self._submit_calls(fn, calls, task_timeout)

        def queue_all(fn: Callable[..., Any], calls: Iterable[Any], single: bool) -> MapCalls:
            return self._queue_calls(fn, calls, task_timeout, single)

        return map_calls(
            submit,
            submit_all,
            queue_all,
            self._driver.executor.chunk_results,
            fn,
            iterables,
            **options,
        )

    def _queue_calls(
        self, fn: Callable[..., Any], calls: Iterable[Any], timeout: float | None, single: bool
    ) -> MapCalls:
        """Every call of ``calls`` (argument tuples, or with ``single`` each call's one
        argument) queued as one ``MapCalls``, in their order, read and queued a ``BURST``
        at a time (one lock, one set of checks and one turn each): the pool runs them
        all, as the stdlib's ``map`` submits them all, and makes their items as it has
        room. The calls are read outside the lock (reading runs the caller's code); if
        reading raises, the calls read before it are queued first."""
        d = self._driver
        source = MapCalls(d, fn, timeout, single)
        it = iter(calls)  # what MapCalls holds
        tuples = zip(it) if single else it  # the same calls as argument tuples
        if not callable(fn):  # each call fails as its own task, as submit's (``_submit``)
            source.made.extend(self._submit_calls(fn, tuples, timeout))
            return source
        source.made.extend(self._first_call(fn, tuples, timeout))
        self._in_bursts(it, functools.partial(d.add_calls, source))
        return source

    def _submit_calls(
        self, fn: Callable[..., Any], calls: Iterable[Any], timeout: float | None
    ) -> deque[MapItem]:
        """``_submit`` of every call of ``calls`` as a MapItem, in their order: one lock,
        one set of checks and one turn per ``BURST`` of them, not per call (a
        ``map(chunksize=1)`` submits all of its items at once, as the stdlib's). The
        items are read outside the lock (reading them runs the caller's code); if reading
        raises, the calls read before it are submitted first, as one by one."""
        if not callable(fn):  # each call fails as its own task, as submit's (``_submit``)
            return deque(self._submit(fn, args, NO_KWARGS, timeout, MapItem) for args in calls)
        d = self._driver
        it = iter(calls)
        items = deque(self._first_call(fn, it, timeout))

        def add_items(batch: list[Any]) -> bool:
            burst = False
            keys, add = d.keys, d.add
            for args in batch:
                t = MapItem(d, next(keys), fn, args, NO_KWARGS, timeout)
                items.append(t)
                burst = add(t) or burst
            return burst

        self._in_bursts(it, add_items)
        return items

    def _first_call(
        self, fn: Callable[..., Any], calls: Iterator[Any], timeout: float | None
    ) -> list[MapItem]:
        """The first of ``calls`` (argument tuples) submitted alone when the pool has not
        started, as its item (``_submit`` starts the pool); else nothing is read."""
        if self._driver.thread is None:
            for args in calls:
                return [self._submit(fn, args, NO_KWARGS, timeout, MapItem)]
        return []

    def _in_bursts(self, calls: Iterator[Any], queue: Callable[[list[Any]], bool]) -> None:
        """Read ``calls`` a ``BURST`` at a time outside the lock (reading runs the
        caller's code) and ``queue`` each batch under it, after the open checks; when
        ``queue`` says so (True), this thread runs a turn (``Driver.burst``). If reading
        raises, the calls read before it are queued first, then the error raised."""
        d = self._driver
        take = itertools.islice
        while True:
            batch: list[Any] = []
            error = None
            try:
                batch.extend(take(calls, BURST))
            except BaseException as exc:  # queue what was read, then raise it
                error = exc
            if batch:
                with d.lock:
                    self._check_open()
                    burst = queue(batch)
                if burst:
                    d.burst()
            if error is not None:
                raise error
            if len(batch) < BURST:
                return

    def _submit(
        self,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        timeout: float | None,
        record: type[Record] = PoolFuture,
    ) -> Any:
        d = self._driver
        with d.lock:
            if d.broken is not None or d.stage is not OPEN or Shared.global_shutdown:
                self._check_open()  # it raises
            t = record(d, next(d.keys), fn, args, kwargs, timeout)
            if not callable(fn):  # the call's own error, as a task's: its future fails
                if d.thread is None:
                    self._start_driver(None)
                t._exception = TypeError(f"{fn!r} is not callable")
                t._state = FINISHED
                return t
            if d.thread is None:
                self._start_driver(t)  # t handed over, and under fork already sent
                return t
            burst = d.add(t)
        if burst:  # a burst of submits: this thread feeds the workers (Driver.add)
            d.burst()
        return t

    def _check_open(self) -> None:
        """Raise what a submit to this pool raises now, if anything (lock held)."""
        d = self._driver
        if d.broken is not None:
            # A fresh exception each time, as the stdlib: the stored one is shared.
            raise type(d.broken)(*d.broken.args) from d.broken.__cause__
        if d.stage is not OPEN:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if Shared.global_shutdown:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    def _start_driver(self, first: Record | None) -> None:
        """Start the LocalExecutor and its driver thread, with the first submitted
        record (caller holds the lock; None: that call failed on its own).

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
            if first is not None:
                d.add(first)  # the token is free: straight into the LocalExecutor
            if first is not None:
                # One round from this thread before the driver thread exists: it starts a
                # worker for the first call and sends it there, as the stdlib's submit
                # starts one, with no thread to start and schedule first. Under fork
                # (which copies only the forking thread: the fewer threads then, the fewer
                # locks a child inherits held) it then forks the pool's zygote, which forks
                # every later worker (``worker.zygote``), so no fork waits for interpreter
                # shutdown to forbid it (3.12) and the first result waits for one fork.
                with contextlib.suppress(Exception):  # the driver retries, futures report
                    d._step(ex.steps)
        finally:
            Shared.live_drivers.add(d)
            d.launch(
                threading.Thread(target=d.run, name=f"pipepool-driver-{id(self):x}", daemon=True)
            )

    def _stop_taking_work(self, *, cancel_futures: bool, terminate: bool) -> None:
        d = self._driver
        # A Ctrl-C between taking pending futures out of the queue and cancelling them
        # would strand them PENDING forever: the handlers wait until both are done.
        deferred = None
        try:
            deferred = _signals.defer()
            with d.lock:
                d.request_shutdown(terminate=terminate)
                doomed = d.drain_pending() if cancel_futures else []
                # Handed over and not started is pending too: revoked from the workers.
                handed = d.cancel_handed_over() if cancel_futures and not terminate else []
            d.cancel(doomed)
        finally:
            _signals.undefer(deferred)
        if handed:  # their cancels are answered (or withdrawn) before this returns
            d.wait_for(lambda: not any(t in d.cancelling for t in handed), None)

    def _join(self) -> None:
        if self._driver.thread is not None:
            self._driver.join_thread()


class _PoolView:
    """``pool.with_options(...)``: ``submit`` and ``map`` with per-task options."""

    def __init__(self, pool: ProcessPoolExecutor, timeout: float | None) -> None:
        self._pool = pool
        self._timeout = timeout

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """``ProcessPoolExecutor.submit`` with this view's options."""
        return self._pool._submit(fn, args, kwargs, self._timeout)  # type: ignore[no-any-return]

    def map(
        self, fn: Callable[..., Any], /, *iterables: Iterable[Any], **options: Any
    ) -> Iterator[Any]:
        """``ProcessPoolExecutor.map`` (its ``timeout``, ``chunksize`` and ``buffersize``)
        with this view's options."""
        return self._pool._map(self._timeout, fn, iterables, **options)


# -- interpreter exit ----------------------------------------------------------------------


def _python_exit() -> None:
    """Before the interpreter finalizes: let every pool finish its submitted work, as the
    stdlib does, unless the program is ending on Ctrl-C: then stop the workers now."""
    if os.getpid() != _owner_pid:
        return  # a forked child (a worker, say) exiting: the parent's pools are not its own
    Shared.global_shutdown = True
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    interrupted = isinstance(last, KeyboardInterrupt)
    drivers = list(Shared.live_drivers)
    for d in drivers:
        d.request_shutdown(terminate=interrupted)
    try:
        for d in drivers:
            if d.thread is not None:
                d.join_thread()
    except KeyboardInterrupt:  # Ctrl-C while waiting for the work: stop it all now
        for d in drivers:
            d.request_shutdown(terminate=True)
        for d in drivers:
            if d.thread is not None:
                d.join_thread(TERMINATE_JOIN)


def _forget_pools_in_child() -> None:
    # A forked child inherits the pools' state, their locks perhaps held by a thread that
    # does not exist in it: it must never touch them (its exit hook would wait forever).
    global _owner_pid
    _owner_pid = os.getpid()
    Shared.live_drivers.clear()


_owner_pid = os.getpid()
os.register_at_fork(after_in_child=_forget_pools_in_child)
threading._register_atexit(_python_exit)  # type: ignore[attr-defined]
