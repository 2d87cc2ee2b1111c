"""The units of work a ProcessPoolExecutor's driver completes. Each is one record, end to
end: ``PoolFuture`` (what ``submit`` returns) and ``MapItem`` (one call of a ``map``, in
``_map``) are the LocalExecutor's task records themselves (``_task.Task``, handed over
and handed back by the records way out of ``pipepool._bookkeeping``): no entry, no event and no
second object per task.

``Record`` adds what the driver settles, under its lock and in bulk, to the task record:
the state of a ``concurrent.futures.Future`` (``_state``, ``_result``, ``_exception``,
its constants), so one settle loop serves futures and map items alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures._base import (  # the states behind Future's public methods
    CANCELLED,
    CANCELLED_AND_NOTIFIED,
    FINISHED,
    PENDING,
)
from typing import TYPE_CHECKING, Any

from .._task import NO_KWARGS, QUEUED, Task

if TYPE_CHECKING:
    from ._driver import Driver

_DONE_STATES = frozenset((CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED))


class Record(Task):
    """A unit of work of a pool: the LocalExecutor's task record (``tid`` and ``key``
    are the pool's number for it), with the state the driver settles.

    Its life: PENDING in the driver's ``pending`` queue (cancellable at once); handed to
    the LocalExecutor (in the driver's ``running``), still PENDING and cancellable through
    the LocalExecutor; RUNNING once its worker's start mark was seen; then FINISHED
    (``_result`` or ``_exception``) or CANCELLED_AND_NOTIFIED, set by the driver.
    """

    __slots__ = ("_condition", "_exception", "_result", "_state", "driver", "hooked")

    def __init__(
        self,
        driver: Driver,
        tid: int,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        timeout: float | None,
    ) -> None:
        # Task.__init__'s stores, made here in the same frame: one Python call per record
        # instead of two, on the path of every submit and map call (tests/futures check
        # that a record sets every field a task does, to the same value).
        self.tid = self.key = tid
        self.fn = fn
        self.args = args
        self.kwargs = kwargs or NO_KWARGS
        self.timeout = timeout
        self.phase = QUEUED
        self.started = False
        self.deadline = None
        self.dispatch = 1
        self.seq = 0
        self.batch = 0
        self.solo = False
        self.cancelling = False
        self.began = 0.0
        self.future = None
        self.address = None
        self.pid = None
        self._state = PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self.driver = driver
        self._condition = driver.cond  # a Future's Condition: the pool's, shared
        self.hooked = False  # a waiter or a done-callback is attached (a PoolFuture's)

    def done(self) -> bool:
        """Finished or cancelled. Without a lock: the driver sets ``_state`` last."""
        return self._state in _DONE_STATES

    def cancel(self) -> bool:
        raise NotImplementedError


class _DrivingEvent(threading.Event):
    """The event of a stdlib waiter (``wait()``, ``as_completed()``) on a PoolFuture:
    the thread that waits on it drives the pool, as ``result()`` does."""

    def __init__(self, driver: Driver) -> None:
        super().__init__()
        self.driver = driver

    def wait(self, timeout: float | None = None) -> bool:
        if not self.is_set():
            self.driver.wait_for(self.is_set, timeout)
        return self.is_set()

    def set(self) -> None:
        super().set()
        # Set by another pool's thread (futures of several pools in one wait()), or by
        # a cancel: its waiter may be driving this pool, or waiting for the token.
        # Never block on this pool's lock here: the setter holds its own future's lock,
        # which a thread holding this one may be waiting for (the stdlib's wait() takes
        # every future's lock in turn); that rare case pokes from a thread of its own.
        lock = self.driver.lock
        if lock.acquire(blocking=False):
            try:
                self.driver.poke()
            finally:
                lock.release()
        else:
            threading.Thread(target=self.driver.poke, name="pipepool-poke", daemon=True).start()


def _driving(driver: Driver, waiter: Any) -> None:
    """The first time the stdlib's ``wait()``/``as_completed()`` installs ``waiter`` on
    a PoolFuture, its event becomes one that drives the pool. (Those functions only
    install a waiter and wait on its ``event``; a Python without that attribute keeps
    the plain event, served by whoever holds the token.)"""
    event = getattr(waiter, "event", None)
    if type(event) is threading.Event:  # not yet swapped by another future of it
        driving = _DrivingEvent(driver)
        if event.is_set():
            driving.set()
        waiter.event = driving


class _Waiters:
    """``PoolFuture._waiters`` as the stdlib uses it (``append``, ``remove``, iterate):
    a view made at each use of what the future holds in its slot ``_held``: nothing
    (unset), its one waiter, or a list of several.

    Not a list of each future's own: ``wait()`` on 20,000 futures made 40,000 more objects
    (the list, and the ``__dict__`` holding it) that lived as long as the futures; the
    garbage collector's full passes they brought on cost about a third of a round of
    submit + ``wait(fs)``, in about half of the rounds (a quiet 2-core machine)."""

    __slots__ = ("fut",)

    def __init__(self, fut: PoolFuture) -> None:
        self.fut = fut

    def append(self, waiter: Any) -> None:
        fut = self.fut
        _driving(fut.driver, waiter)
        held = getattr(fut, "_held", None)
        if held is None:
            fut._held = waiter
        elif type(held) is list:
            held.append(waiter)
        else:
            fut._held = [held, waiter]
        fut.hooked = True  # the driver tells its waiters when it settles

    def remove(self, waiter: Any) -> None:
        fut = self.fut
        held = getattr(fut, "_held", None)
        if held is waiter:
            del fut._held
        elif type(held) is list and waiter in held:
            held.remove(waiter)
        elif fut._state not in _SETTLED_STATES:  # (one settled first was never given it)
            raise ValueError("the waiter is not installed on this future")

    def __iter__(self) -> Iterator[Any]:
        return iter(held_waiters(self.fut))

    def __len__(self) -> int:
        return len(held_waiters(self.fut))


def held_waiters(fut: Record) -> tuple | list:
    """The waiters installed on ``fut`` (a PoolFuture's slot ``_held``; none on others)."""
    held = getattr(fut, "_held", None)
    if held is None:
        return ()
    return held if type(held) is list else (held,)


class _Settled:
    """The waiters of a future settled before any was installed: the stdlib's
    ``wait()`` and ``as_completed()`` count it done under its lock and never need its
    news, so their ``append`` and ``remove`` are no-ops (no view made, nothing stored:
    most futures of a submit + ``wait(fs)`` are done before the wait)."""

    __slots__ = ()

    def append(self, waiter: Any) -> None:
        pass

    def remove(self, waiter: Any) -> None:
        pass

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0


_SETTLED = _Settled()
_SETTLED_STATES = frozenset((CANCELLED_AND_NOTIFIED, FINISHED))  # its waiters told, or none


class _WaitersView:
    """``PoolFuture._waiters``: a ``_Waiters`` view of the future's slot, at each use
    (``_SETTLED`` for one settled that holds none)."""

    def __get__(self, fut: PoolFuture | None, owner: type | None = None) -> Any:
        if fut is None:
            return self
        if fut._state in _SETTLED_STATES and getattr(fut, "_held", None) is None:
            return _SETTLED
        return _Waiters(fut)


class _LazyCallbacks:
    """``PoolFuture._done_callbacks``, the list in its slot ``_callbacks``, made on first
    use: most futures never get one (the stdlib's ``add_done_callback`` appends to it
    under the pool's lock)."""

    def __get__(self, fut: PoolFuture | None, owner: type | None = None) -> Any:
        if fut is None:
            return self
        callbacks = getattr(fut, "_callbacks", None)
        if callbacks is None:
            callbacks = fut._callbacks = []
            fut.hooked = True  # the driver queues its callbacks when it settles
        return callbacks


class PoolFuture(Record, Future):  # type: ignore[misc]  # (Future's done/cancel: Record's first)
    """A ``concurrent.futures.Future`` that is its pool's task record, shares its pool's
    lock and drives the pool.

    Lighter than the stdlib's: no Condition of its own (the pool's one serves all of its
    futures, so a batch of results is delivered under one lock with one notify), and
    ``result()``/``exception()`` run the pool's loop in the waiting thread when the
    token is free instead of sleeping until another thread has done it.
    """

    # (Record's __init__, not Future's: its Condition is the pool's.) ``_held``: its
    # waiters (``_Waiters``), ``_callbacks``: its done-callbacks; each unset until used.
    __slots__ = ("_callbacks", "_held")
    _callbacks: list[Callable[[Future], object]]
    _held: Any
    _waiters = _WaitersView()
    _done_callbacks = _LazyCallbacks()

    def result(self, timeout: float | None = None) -> Any:
        if self._state != FINISHED:
            self.driver.wait_for(self.done, timeout)
        if self._state == FINISHED and self._exception is None:
            return self._result  # the driver sets the state last: no lock needed to read
        return super().result(0)  # raises its error, CancelledError or TimeoutError

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state != FINISHED:
            self.driver.wait_for(self.done, timeout)
            return super().exception(0)
        return super().exception()

    done = Record.done

    def cancel(self) -> bool:
        """Cancel it unless it has started: True if it is cancelled (it never runs),
        False if it started or ran.

        Handed over to the pool and sent to a worker, not started: with the compiled
        loop the pool claims it in memory it shares with the worker (a compare-and-swap
        against the worker's own start decision), without asking the worker, so the
        answer comes at once whatever the worker's task does. With the pure-Python loop
        (or a task sent more than 64 ahead) the worker is told to skip it and this waits
        for its answer, within ``CANCEL_WAIT``; past it (the task before holds the GIL)
        the cancel is withdrawn and this returns False, and it runs in its turn. The
        outcomes follow one rule on both loops, started or cancelled, never both; only
        how soon they come differs (docs/design.md, "Cancel claims").
        """
        driver = self.driver
        if self.cancel_pending():
            return True
        with driver.lock:
            if self._state != PENDING:
                return self._state in (CANCELLED, CANCELLED_AND_NOTIFIED)
            driver.request_cancel(self)
        driver.wait_for(lambda: self._state != PENDING or self not in driver.cancelling, None)
        return self._state in (CANCELLED, CANCELLED_AND_NOTIFIED)

    def cancel_pending(self) -> bool:
        """Cancel it now if it was never handed over (or is cancelled): True; else False."""
        driver = self.driver
        with driver.lock:
            if self._state in (CANCELLED, CANCELLED_AND_NOTIFIED):
                return True
            if self._state != PENDING or self in driver.running:  # handed over
                return False
            self._state = CANCELLED
            driver.cond.notify_all()
        self._invoke_callbacks()  # type: ignore[attr-defined]
        driver.poke()  # a token holder may be waiting for it
        return True


def notify_settled(t: Record) -> bool:
    """A hooked record (a PoolFuture: only waiters and callbacks hook one) was just
    settled, the driver's lock held: tell its waiters what ``_state`` says; True if it
    has done-callbacks to run."""
    for waiter in held_waiters(t):
        if t._state == FINISHED:
            if t._exception is None:
                waiter.add_result(t)
            else:
                waiter.add_exception(t)
        else:
            waiter.add_cancelled(t)
    return bool(getattr(t, "_callbacks", None))


def run_callbacks(t: Record) -> None:
    """Its done-callbacks (outside the lock: they may block, submit or wait)."""
    t._invoke_callbacks()  # type: ignore[attr-defined]  # (a hooked record is a PoolFuture)
