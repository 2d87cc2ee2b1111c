"""The engine of ``ProcessPoolExecutor``: one LocalExecutor, driven by whoever waits.

The LocalExecutor is not thread-safe, so one thread at a time holds the *token* (the
``poller`` field) and runs rounds of named steps: *feed* (pending work into the
LocalExecutor, while it holds fewer than its capacity), *sync* (the LocalExecutor's own
round: results, reaping and starting workers, dispatch; it sleeps in the poll when
nothing happens) and *deliver* (complete futures from the event buffer).

Who holds the token: a user thread blocked in ``result()``/``exception()``, in a map's
iterator or in ``wait()``/``as_completed()`` takes it when it is free, and drives until
what it waits for is done; the result then reaches it without a thread hop (the worker's
write wakes its own poll). The driver thread takes it only when work is outstanding and
no caller wants it (fire-and-forget work, done-callbacks, shutdown), and gives it up as
soon as a caller asks. Everything that a token holder must notice (a submit, a kill,
shutdown, a cancel, a future completed elsewhere) is changed under ``lock`` and followed
by ``wake()`` of the loop; the holder re-checks after the round that drained the wake-up
pipe (``LocalExecutor.sync(ready=...)``), so no wake-up is lost.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from . import _signals
from ._futures_item import Entry, Item
from .errors import RemoteTraceback, TaskKilledError
from .events import State
from .executor import LocalExecutor

IDLE_WAIT = 1.0  # s a token holder may sleep in the poll; the LocalExecutor shortens it
# to its own next deadline (worker reaping, task timeouts), and wake() cuts it short.

LINGER = 0.001  # s: while callers drive, the driver looks this often instead of being
# woken by each submit. A submit then costs no thread wake-up (its caller usually waits
# and drives at once); work nobody waits for is dispatched at most this late.
LINGER_IDLE = 0.1  # s without a caller driving before the driver goes back to sleeping
# until woken (no periodic look-ups in an idle pool)

SUBMIT_KILL = "kill"


class Shared:
    """Process-wide state the exit hook sets and every pool reads."""

    live_drivers: set[Driver] = set()  # drivers with a live thread, for the exit hook
    global_shutdown = False  # the interpreter is finalizing


class Driver:
    """State shared by a pool (user threads), its token holder and its driver thread.

    Under ``lock``: every field but ``running`` and ``kill_on_start`` (token holder's).
    Kept apart from the pool object so the thread does not keep the pool alive: a pool
    that is garbage collected shuts down like ``shutdown(wait=False)``.
    """

    def __init__(self, executor: LocalExecutor, capacity: int) -> None:
        self.executor = executor
        self.capacity = capacity  # handed over at most, at dispatch depth 1
        self.workers = executor.parallelism  # each gets depth - 1 more at a deeper depth
        # Re-entrant: a weakref callback (pool collected) may fire in any thread while
        # it holds the lock, and the stdlib's wait() takes each future's lock in turn.
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)  # futures done, or the token free
        self.driver_cond = threading.Condition(self.lock)  # work for the driver thread
        self.pending: deque[Entry] = deque()
        self.fresh = False  # pending grew since the last feed: the holder feeds again
        self.full = False  # the last feed stopped at capacity: a result will wake it
        self.commands: deque[tuple[str, int]] = deque()
        self.keys = itertools.count()
        self.shutdown = False
        self.terminate = False
        self.broken: BaseException | None = None
        self.loop_closed = False
        self.thread: threading.Thread | None = None
        self.driver_ident: int | None = None
        self.poller: int | None = None  # the thread holding the token
        self.want = 0  # callers blocked until the token is free
        self.linger = False  # callers drive: the driver looks every LINGER, unwoken
        self.caller_drove = 0.0  # monotonic time a caller last took the token
        self.callbacks_due: deque[Item] = deque()  # settled, callbacks not yet run
        self.running: dict[int, Item] = {}  # handed to the LocalExecutor, not finished
        self.kill_on_start: set[int] = set()  # kill requested before the task started
        self.pids: tuple[int, ...] = ()  # live worker pids after the last round
        self.pool_ref: Any = None  # weakref.ref whose callback shuts down a lost pool

    # -- any thread ---------------------------------------------------------------------

    def add(self, entry: Entry) -> None:
        """Queue one submitted call (lock held): one wake-up per batch, not per call.

        With the token free (nobody in the LocalExecutor, and nobody can take it while
        this holds the lock), nothing queued before it and room, the call goes straight
        into the LocalExecutor: the caller's next result() runs the LocalExecutor's
        round, without a feed step (and its Ctrl-C guard) of its own. A Ctrl-C in here
        strands nothing: until submit() returns, nobody holds the future.
        """
        key, item, fn, args, kwargs, timeout = entry
        if (
            self.poller is None
            and not self.pending
            and not self.loop_closed
            and len(self.running) < self._room()
            and item.start()
        ):
            try:
                self.executor.queue_call(key, fn, args, kwargs, timeout=timeout)
            except Exception as exc:  # not callable: that item's error, as in _feed
                item.settle(False, exc)
                return
            self.running[key] = item
            if len(self.running) == 1 and not self.linger:
                self._hand_off()  # the first outstanding work: someone must drive
            return
        self.pending.append(entry)
        if not (self.fresh or self.full):
            self.fresh = True
            if self.poller is not None or not self.linger:
                self.poke()
            # else the driver looks within LINGER, if no caller has driven by then

    def poke(self) -> None:
        """Tell the token holder, or the thread due to take the token, to look again."""
        with self.lock:
            if self.poller is not None:
                if self.poller != threading.get_ident() and not self.loop_closed:
                    self.executor.wake()
            else:
                self._hand_off()
            self.cond.notify_all()

    def request_shutdown(self, *, terminate: bool = False) -> None:
        with self.lock:
            self.shutdown = True
            self.terminate = self.terminate or terminate
            self.poke()

    def drain_pending(self) -> list[Item]:
        """Take every pending (never handed over) item out of the queue (lock held)."""
        taken = [entry[1] for entry in self.pending]
        self.pending.clear()
        return taken

    def cancel(self, items: list[Item]) -> None:
        """Cancel items taken from the queue and tell their waiters (``wait()``,
        ``as_completed()``): ``cancel()`` alone leaves that to the executor. Outside
        the lock: cancel() runs done-callbacks."""
        for item in items:
            item.quiet_cancel()
        with self.lock:
            for item in items:
                item.start()
            self.poke()

    def wait_for(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Until ``done()`` or ``timeout``: drive the loop when the token is free, else
        sleep until a delivery or the token's release. Returns ``done()``."""
        end = None if timeout is None else time.monotonic() + timeout
        me = threading.get_ident()
        with self.lock:
            while True:
                if done():
                    return True
                # A done-callback run by this thread's rounds, waiting in turn.
                nested = self.poller == me and not self.loop_closed
                if nested or (self.poller is None and not self.loop_closed and not self.terminate):
                    self.poller = me
                    if not nested:
                        self.caller_drove = time.monotonic()
                        if not self.linger:
                            self.linger = True
                            self.driver_cond.notify()  # to wait with a timeout from now
                    break
                remaining = None if end is None else end - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self.want += 1
                try:
                    if self.poller == self.driver_ident and not self.loop_closed:
                        self.executor.wake()  # the driver yields the token to callers
                    self.cond.wait(remaining)
                finally:
                    self.want -= 1
                    if not self.want:
                        self._hand_off()
        try:
            self._drive(done, end)
        except KeyboardInterrupt:  # between steps, as everywhere: the state is whole
            raise
        except BaseException as exc:  # an internal error: fail every future, hang none
            self._crash(exc)
        finally:
            if not nested:
                self._release(caller=True)
        return done()

    # -- the token holder ---------------------------------------------------------------

    def _hand_off(self) -> None:
        """The token is free (lock held): to a waiting caller, else to the driver."""
        if self.poller is not None or self.loop_closed:
            return
        if self.want and not self.terminate:  # (callers cannot take it to terminate)
            self.cond.notify_all()
        elif self.terminate or self.shutdown or (self._outstanding() and not self.linger):
            self.driver_cond.notify()
        # else, callers driving: the driver looks within LINGER, and takes the token if
        # none has held it since; a caller's next result() most often comes first

    def _room(self) -> int:
        """Calls the LocalExecutor may hold: ``capacity`` at dispatch depth 1, and
        ``depth - 1`` more per worker at a deeper adaptive depth."""
        return self.capacity + self.workers * (self.executor.dispatch_depth - 1)

    def _outstanding(self) -> bool:
        return bool(
            self.pending or self.running or self.commands or self.callbacks_due or self.terminate
        )

    def _release(self, caller: bool = False) -> None:
        with self.lock:
            self.poller = None
            if caller:
                self.caller_drove = time.monotonic()
            self._hand_off()

    def _drive(self, done: Callable[[], bool], end: float | None) -> None:
        """Rounds in a caller's thread until ``done()``, ``end`` or a terminate."""

        def ready() -> bool:
            return done() or self.fresh or bool(self.commands) or self.terminate

        while True:
            if self.pending or self.commands:
                self._step(self._feed)
            timeout = IDLE_WAIT if end is None else min(IDLE_WAIT, end - time.monotonic())
            self._sync(max(timeout, 0.0), ready)
            self._step(self._deliver)
            self._run_callbacks()
            if done() or self.terminate or (end is not None and time.monotonic() >= end):
                return

    @staticmethod
    def _step(step: Callable[[], None]) -> None:
        """A bookkeeping step that Ctrl-C must not cut in two (main thread only)."""
        deferred = None
        try:
            deferred = _signals.defer()
            step()
        finally:
            _signals.undefer(deferred)

    def _sync(self, timeout: float, ready: Callable[[], bool]) -> None:
        """The LocalExecutor's round; at interpreter shutdown, do without new workers."""
        ex = self.executor
        try:
            ex.sync(timeout, ready)
        except RuntimeError:
            # Python 3.12 refuses os.fork() once the interpreter is shutting down. The
            # exit hook still lets the pool finish its work: with the workers it has.
            alive = len(ex.worker_pids())
            if not (Shared.global_shutdown and 0 < alive < ex.parallelism):
                raise
            ex.parallelism = alive  # a step that cannot repeat: each time there are fewer
        self.pids = tuple(ex.worker_pids())

    def _feed(self) -> None:
        """Hand pending work to the LocalExecutor while it has room; run commands."""
        pending, running, ex = self.pending, self.running, self.executor
        failed: list[tuple[Item, BaseException]] = []
        with self.lock:
            self.fresh = False
            room = self._room() - len(running)
            while pending and room > 0:
                key, item, fn, args, kwargs, timeout = pending.popleft()
                if not item.start():
                    continue  # cancelled while pending: it never runs
                try:
                    ex.queue_call(key, fn, args, kwargs, timeout=timeout)
                except Exception as exc:  # not callable: that item's error
                    failed.append((item, exc))
                    continue
                running[key] = item
                room -= 1
            self.full = bool(pending)
            commands = list(self.commands)
            self.commands.clear()
        if failed:
            self._settle([(item, False, exc) for item, exc in failed])
        for command, key in commands:
            # Running: kill its worker. Queued in the LocalExecutor: cancel it there.
            # Sent to a worker but not started: kill it when its RUNNING event comes.
            if (
                command == SUBMIT_KILL
                and key in running
                and not ex.kill(key)
                and not ex.cancel(key)
            ):
                self.kill_on_start.add(key)

    def _deliver(self) -> None:
        """Complete the items of every terminal event; act on RUNNING ones."""
        ex = self.executor
        events = ex.get_event_buffer()
        if not events:
            return
        broken = ex.broken
        outcomes: list[tuple[Item, bool, Any]] = []
        breaking = None
        running, kill_on_start, success = self.running, self.kill_on_start, State.SUCCESS
        for key, event in events.items():
            state = event.state
            if state is success:  # the common case first, in few steps
                item = running.pop(key, None)  # type: ignore[call-overload]
                if kill_on_start:
                    kill_on_start.discard(key)
                if item is not None:
                    outcomes.append((item, True, event.result))
                continue
            if not state.terminal:
                if state is State.RUNNING and key in kill_on_start:
                    kill_on_start.discard(key)
                    ex.kill(key)
                continue
            kill_on_start.discard(key)
            item = running.pop(key, None)  # type: ignore[call-overload]
            if item is None:
                continue
            error = event.exception
            if error is not None and error is broken:
                breaking = error
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
            outcomes.append((item, False, error))
        self._settle(outcomes)
        if breaking is not None:
            self._break(breaking)

    def _settle(self, outcomes: list[tuple[Item, bool, Any]]) -> None:
        """Complete a batch under one lock and one notify; queue their callbacks."""
        if not outcomes:
            return
        with self.lock:
            due = self.callbacks_due
            for item, ok, value in outcomes:
                if item.settle(ok, value):
                    due.append(item)
            self.cond.notify_all()

    def _run_callbacks(self) -> None:
        """Done-callbacks, outside the lock and any deferred step: they may block, submit
        or wait. One at a time off the queue: a Ctrl-C leaves the rest to the next round."""
        due = self.callbacks_due
        while due:
            try:
                item = due.popleft()
            except IndexError:  # a nested waiter ran them
                return
            item.run_callbacks()

    def _break(self, error: BaseException) -> None:
        """The initializer keeps failing: like the stdlib, the pool is broken for good."""
        with self.lock:
            if self.broken is None:
                self.broken = error
            self.shutdown = True
            doomed = self.drain_pending()
            self._settle([(item, False, error) for item in doomed if item.start()])

    # -- the driver thread --------------------------------------------------------------

    def run(self) -> None:
        """The driver thread: holds the token while work is outstanding and no caller
        wants it; stops the pool once shut down."""
        _signals.block_all_in_this_thread()  # Ctrl-C belongs to the main thread
        me = self.driver_ident = threading.get_ident()
        try:
            while True:
                with self.lock:
                    while not self._driver_due():
                        if self.loop_closed:
                            return
                        if self.linger and time.monotonic() - self.caller_drove > LINGER_IDLE:
                            self.linger = False  # submits wake it again from here on
                        self.driver_cond.wait(LINGER if self.linger else None)
                    self.poller = me
                if self._run_rounds():
                    return
        except BaseException as exc:  # the safety net: never strand a future
            self._crash(exc)
        finally:
            Shared.live_drivers.discard(self)

    def _driver_due(self) -> bool:
        """The token is free and no caller wants it, and there is work that no caller
        has been driving for LINGER (lock held)."""
        if self.poller is not None or self.loop_closed:
            return False
        if self.terminate or (self.shutdown and not self.want):
            return True
        if self.want or not self._outstanding():
            return False
        return not self.linger or time.monotonic() - self.caller_drove >= LINGER

    def _run_rounds(self) -> bool:
        """Rounds until callers want the token or nothing is outstanding (False), or the
        pool is stopped (True)."""

        def ready() -> bool:
            # A shutdown with nothing left to run is due now, not after a poll's wait.
            closing = self.shutdown and not (self.pending or self.running or self.commands)
            return bool(self.fresh or self.commands or self.terminate or self.want or closing)

        while True:
            self._feed()
            self._sync(IDLE_WAIT, ready)
            self._deliver()
            self._run_callbacks()
            if self.terminate:
                self._stop(terminate=True)
                return True
            with self.lock:
                if self.shutdown and not (self.pending or self.running or self.commands):
                    self.loop_closed = True  # from here on nobody writes to the loop
                    closing = True
                elif self.want or not self._outstanding():
                    self.poller = None
                    self._hand_off()
                    return False
                else:
                    continue
            if closing:
                self._stop(terminate=False)
                return True

    def _stop(self, *, terminate: bool) -> None:
        """Last step of the thread: stop the workers, fail or cancel what is left."""
        with self.lock:
            self.loop_closed = True
            doomed = self.drain_pending()
        self.cancel(doomed)
        ex = self.executor
        if terminate:
            ex.terminate()  # running tasks fail with TaskKilledError, queued ones cancel
        else:
            ex.end()
        self._deliver()
        self.pids = ()
        # Every future settled before any callback runs: one that waits for another
        # future must find it done, as nobody drives from here on.
        self._fail_running(BrokenProcessPool("the pool stopped before the task finished"))

    def _crash(self, exc: BaseException) -> None:
        """An internal error while driving: fail every future with it, never hang one."""
        error = BrokenProcessPool(
            f"the pipepool driver failed ({type(exc).__name__}: {exc}); "
            "the pool is not usable anymore"
        )
        error.__cause__ = exc
        with self.lock:
            self.broken = self.broken or error
            self.shutdown = True
            self.loop_closed = True
            doomed = self.drain_pending()
            self._settle([(item, False, error) for item in doomed if item.start()])
            self.driver_cond.notify_all()  # a driver thread waiting for work: it ends
        with contextlib.suppress(BaseException):  # best effort: the futures matter more
            self.executor.terminate()
        self.pids = ()
        self._fail_running(error)

    def _fail_running(self, error: BaseException) -> None:
        running, self.running = self.running, {}
        self._settle([(item, False, error) for item in running.values() if not item.done()])
        self._run_callbacks()
