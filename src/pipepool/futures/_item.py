"""The units of work a ProcessPoolExecutor's driver completes: ``PoolFuture`` (what
``submit`` returns) and, in ``_map``, a map's lighter items."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures._base import (  # the states behind Future's public methods
    CANCELLED,
    CANCELLED_AND_NOTIFIED,
    FINISHED,
    PENDING,
    RUNNING,
)
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._driver import Driver


class Item(Protocol):
    """What the driver needs of a unit of work: a PoolFuture or a map's item."""

    def start(self) -> bool: ...
    def quiet_cancel(self) -> bool: ...
    def settle(self, ok: bool, value: Any) -> bool: ...
    def run_callbacks(self) -> None: ...
    def cancel(self) -> bool: ...
    def done(self) -> bool: ...


class Entry:
    """A submitted call waiting in the driver's ``pending`` queue, with its item."""

    __slots__ = ("args", "fn", "item", "key", "kwargs", "timeout")

    def __init__(
        self,
        key: int,
        item: Item,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict | None,
        timeout: float | None,
    ) -> None:
        self.key = key  # the LocalExecutor key of the call, unique in its pool
        self.item = item  # what settles when it ends: a PoolFuture or a map's item
        self.fn = fn
        self.args = args
        self.kwargs = kwargs  # None: none (queue_call makes the dict)
        self.timeout = timeout  # seconds it may run once started, or None


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


class _Waiters(list):
    """A PoolFuture's waiters: the first time the stdlib's ``wait()``/``as_completed()``
    installs its waiter, the waiter's event becomes one that drives the pool. (Those
    functions only install a waiter and wait on its ``event``; a Python without that
    attribute keeps the plain event, served by whoever holds the token.)"""

    __slots__ = ("driver",)

    def __init__(self, driver: Driver) -> None:
        super().__init__()
        self.driver = driver

    def append(self, waiter: Any) -> None:
        event = getattr(waiter, "event", None)
        if type(event) is threading.Event:  # not yet swapped by another future of it
            driving = _DrivingEvent(self.driver)
            if event.is_set():
                driving.set()
            waiter.event = driving
        super().append(waiter)


class _LazyWaiters:
    """``PoolFuture._waiters``, made on first use: most futures never have a waiter."""

    def __get__(self, fut: PoolFuture | None, owner: type | None = None) -> Any:
        if fut is None:
            return self
        waiters = fut.__dict__["_waiters"] = _Waiters(fut._pipepool[0])
        return waiters


class _LazyCallbacks:
    """``PoolFuture._done_callbacks``, made on first use: most futures never get one
    (the stdlib's ``add_done_callback`` appends to it under the pool's lock)."""

    def __get__(self, fut: PoolFuture | None, owner: type | None = None) -> Any:
        if fut is None:
            return self
        callbacks = fut.__dict__["_done_callbacks"] = []
        return callbacks


class PoolFuture(Future):
    """A ``concurrent.futures.Future`` that shares its pool's lock and drives the pool.

    Lighter than the stdlib's: no Condition of its own (the pool's one serves all of its
    futures, so a batch of results is delivered under one lock with one notify), and
    ``result()``/``exception()`` run the pool's loop in the waiting thread when the
    token is free instead of sleeping until another thread has done it.
    """

    _state = PENDING  # class defaults: fewer stores per future (the instance's shadow them)
    _result: Any = None
    _exception: BaseException | None = None
    _waiters = _LazyWaiters()
    _done_callbacks = _LazyCallbacks()

    def __init__(self, driver: Driver, key: int) -> None:  # no super(): its Condition
        self._condition = driver.cond
        self._pipepool = (driver, key)  # for kill(), and the driver to wake

    def result(self, timeout: float | None = None) -> Any:
        if self._state == FINISHED and self._exception is None:
            return self._result  # settle() sets the state last: no lock needed to read
        if self._state != FINISHED:
            self._pipepool[0].wait_for(self.done, timeout)
            return super().result(0)  # raises CancelledError or TimeoutError, as due
        return super().result()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state != FINISHED:
            self._pipepool[0].wait_for(self.done, timeout)
            return super().exception(0)
        return super().exception()

    def cancel(self) -> bool:
        cancelled = super().cancel()
        if cancelled:  # a token holder may be waiting for it
            self._pipepool[0].poke()
        return cancelled

    # -- for the driver, its lock held: the stdlib's set_* without a lock per future --

    def quiet_cancel(self) -> bool:
        """``cancel()`` without waking the token holder: the caller does, once."""
        return super().cancel()

    def start(self) -> bool:
        """``set_running_or_notify_cancel``: False if it was cancelled while pending."""
        if self._state == CANCELLED:
            self._state = CANCELLED_AND_NOTIFIED
            for waiter in self.__dict__.get("_waiters", ()):
                waiter.add_cancelled(self)
            return False
        self._state = RUNNING
        return True

    def settle(self, ok: bool, value: Any) -> bool:
        """``set_result``/``set_exception`` but the notify and the callbacks, which the
        driver does once per batch; True if callbacks are due."""
        if ok:
            self._result = value
        else:
            self._exception = value
        self._state = FINISHED
        for waiter in self.__dict__.get("_waiters", ()):  # (not made here if none)
            if ok:
                waiter.add_result(self)
            else:
                waiter.add_exception(self)
        return bool(self.__dict__.get("_done_callbacks"))  # (not made here if none)

    def run_callbacks(self) -> None:
        self._invoke_callbacks()  # type: ignore[attr-defined]
