"""The units of work a ProcessPoolExecutor's driver completes: ``PoolFuture`` (what
``submit`` returns) and, in ``_futures_map``, a map's lighter items."""

from __future__ import annotations

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
    from ._futures_driver import Driver


class Item(Protocol):
    """What the driver needs of a unit of work: a PoolFuture or a map's item."""

    def start(self) -> bool: ...
    def quiet_cancel(self) -> bool: ...
    def settle(self, ok: bool, value: Any) -> bool: ...
    def run_callbacks(self) -> None: ...
    def cancel(self) -> bool: ...
    def done(self) -> bool: ...


Entry = tuple[int, Item, Callable[..., Any], tuple, dict, "float | None"]


class PoolFuture(Future):
    """A ``concurrent.futures.Future`` that shares its pool's lock and drives the pool.

    Lighter than the stdlib's: no Condition of its own (the pool's one serves all of its
    futures, so a batch of results is delivered under one lock with one notify), and
    ``result()``/``exception()`` run the pool's loop in the waiting thread when the
    token is free instead of sleeping until another thread has done it.
    """

    def __init__(self, driver: Driver, key: int) -> None:  # no super(): its Condition
        self._condition = driver.cond
        self._state = PENDING
        self._result = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Callable[[Future], object]] = []
        self._pipepool = (driver, key)  # for kill(), and the driver to wake

    def result(self, timeout: float | None = None) -> Any:
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
            for waiter in self._waiters:
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
        for waiter in self._waiters:
            if ok:
                waiter.add_result(self)
            else:
                waiter.add_exception(self)
        return bool(self._done_callbacks)

    def run_callbacks(self) -> None:
        self._invoke_callbacks()  # type: ignore[attr-defined]
