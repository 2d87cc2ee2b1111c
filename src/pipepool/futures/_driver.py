"""The engine of ``ProcessPoolExecutor``: one LocalExecutor, driven by whoever waits.

The LocalExecutor is not thread-safe, so one thread at a time holds the *token* (the
``poller`` field) and runs *turns* (``_round.py``), each one step under one signal
deferral: *feed* (pending records into the LocalExecutor, in bulk, while it holds fewer
than its capacity), the LocalExecutor's own steps (results, reaping and starting
workers, dispatch) and *deliver* (settle the records that ended, in bulk); between two
turns it waits in the LocalExecutor's poll when nothing happened. The state all threads
share, and the states a reader can list, are ``_state.py``.

Who holds the token: a user thread blocked in ``result()``/``exception()``, in a map's
iterator or in ``wait()``/``as_completed()`` takes it when it is free, and drives until
what it waits for is done; the result then reaches it without a thread hop (the worker's
write wakes its own poll). The driver thread takes it only when work is outstanding and
no caller wants it (fire-and-forget work, done-callbacks, shutdown), and gives it up as
soon as a caller asks. Everything that a token holder must notice (a submit, a kill,
shutdown, a cancel, a future completed elsewhere) is changed under ``lock`` and followed
by ``wake()`` of the loop; the holder re-checks after the turn that drained the wake-up
pipe (``_cycle``'s ``ready``), so no wake-up is lost.
"""

from __future__ import annotations

import _thread
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures._base import CANCELLED, PENDING
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .. import _signals
from ..worker.zygote import ended
from ._item import PoolFuture, Record
from ._map import MapCalls
from ._round import CANCEL_WAIT, SUBMIT_CANCEL, SUBMIT_CANCEL_REST, Round
from ._state import FED, FINISHING, FRESH, OPEN, TERMINATING, Shared

BURST = 256  # records waiting that make a submitting thread run a turn itself (add)
IDLE_WAIT = 60.0  # s a token holder may sleep in the poll when nothing is due: the
# LocalExecutor shortens it to its own next deadline (task timeouts, the revoke trap), and
# wake() cuts it short for everything a holder must notice, so this is a safety net and
# no more: a pool waiting on long tasks wakes for their outcomes, not once a second.

LINGER = 0.001  # s: while callers drive, the driver looks this soon after the token was
# freed instead of being woken by each submit. A submit then costs no thread wake-up
# (its caller usually waits and drives at once); work nobody waits for is dispatched at
# most this late. While a caller holds the token longer than this (it waits for a long
# task), the driver sleeps until the token is freed: no look while nothing can change.
LINGER_IDLE = 0.1  # s without a caller driving before the driver goes back to sleeping
# until woken (no periodic look-ups in an idle pool)


class Driver(Round):
    """One pool's driver: what any thread may call, who holds the token, and the
    driver thread (its state is ``DriverState``, its steps ``Round``)."""

    # -- any thread ---------------------------------------------------------------------

    def add(self, t: Record) -> bool:
        """Queue one submitted record (lock held): one wake-up per batch, not per call.
        True if the submitting thread should run a turn now (``burst``).

        With the token free (nobody in the LocalExecutor, and nobody can take it while
        this holds the lock), nothing queued before it and room, the record goes straight
        into the LocalExecutor: the caller's next result() runs the LocalExecutor's
        round, without a feed step of its own. A Ctrl-C in here strands nothing: until
        submit() returns, nobody holds the future.

        A thread that submits a burst feeds the workers itself: once ``BURST`` records
        wait, with the token free, it runs one turn (``burst``), so the workers start
        while it submits, and the driver thread, which would race it for the GIL,
        lingers. Submits fewer and further apart are the driver's, as before.
        """
        if (
            self.poller is None
            and not self.pending
            and not self.loop_closed
            and len(self.running) < self._room()
        ):
            self.running.add(t)
            self.executor.hand_over([t])
            if len(self.running) == 1 and (self.parked or not self.linger):
                self._hand_off()  # the first outstanding work: someone must drive
            return False
        self.pending.append(t)
        if len(self.pending) >= BURST and self.poller is None:
            return True
        self._tell_of_pending()
        return False

    def add_calls(self, source: MapCalls, calls: list[Any]) -> bool:
        """Queue a batch of a map's calls (lock held): ``source`` holds them until the
        token holder's feed makes them into records. True if the token is free: the
        submitting thread runs a turn (``burst``), as after a burst of ``add``."""
        if not source.calls:
            self.pending.append(source)
            self.sources += 1
        source.calls.extend(calls)
        if self.poller is None:
            return True
        self._tell_of_pending()
        return False

    def _tell_of_pending(self) -> None:
        """Pending work was queued (lock held): make sure a token holder feeds it."""
        if self.feed is FED:
            self.feed = FRESH
            if self.poller is not None or not self.linger:
                self.poke()
            elif self.parked:
                self.driver_cond.notify()  # to look within LINGER from now
            # else the driver looks within LINGER, if no caller has driven by then

    def burst(self) -> None:
        """One turn in a submitting thread (``add``), if the token is still free: feed,
        the round and deliver, no wait and no done-callback (those are for a thread that
        waits); then the token is free again."""
        with self.lock:
            if self.poller is not None or self.loop_closed or self.stage is not OPEN:
                return
            self.poller = threading.get_ident()
            self.caller_drove = time.monotonic()
            self.linger = True  # callers drive: the driver thread looks within LINGER
        try:
            self._step(self._turn)
        except KeyboardInterrupt:  # between steps, as everywhere: the state is whole
            raise
        except BaseException as exc:  # an internal error: fail every future, hang none
            self._crash(exc)
        finally:
            self._release(caller=True)

    def poke(self) -> None:
        """Tell the token holder, or the thread due to take the token, to look again."""
        with self.lock:
            if self.poller is not None:
                if self.poller != threading.get_ident() and not self.loop_closed:
                    self.executor.wake()
            else:
                self._hand_off()
            self.cond.notify_all()

    def request_cancel(self, t: Record, command: str = SUBMIT_CANCEL) -> None:
        """Ask the token holder to cancel a record handed over (lock held); the caller
        waits until ``t`` leaves ``cancelling``: it began or ended, or the deadline."""
        if self.loop_closed or t in self.cancelling:
            return
        self.cancelling[t] = time.monotonic() + CANCEL_WAIT
        self.commands.append((command, t))
        self.poke()

    def cancel_handed_over(self) -> list[Record]:
        """``request_cancel`` for every record handed over (lock held): the ones started
        stay, the LocalExecutor says which. Returns them."""
        records = [t for t in self.running if t not in self.cancelling]
        for t in records:  # each worker's next call runs, as in the stdlib's call queue
            self.request_cancel(t, SUBMIT_CANCEL_REST)
        return records

    def request_shutdown(self, *, terminate: bool = False) -> None:
        """Take no more work: finish what was submitted, or stop now (``terminate``)."""
        with self.lock:
            self._advance(TERMINATING if terminate else FINISHING)
            self.poke()

    def cancel(self, records: list[Record]) -> None:
        """Cancel records taken from the queue (never handed over) and tell their waiters
        (``wait()``, ``as_completed()``): ``Future.cancel()`` alone leaves that to the
        executor. Outside the lock: it runs done-callbacks."""
        for t in records:
            if isinstance(t, PoolFuture):
                Future.cancel(t)
            elif t._state == PENDING:
                t._state = CANCELLED
        with self.lock:
            self._notify_cancelled([t for t in records if t._state == CANCELLED])
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
                free = self.poller is None and not self.loop_closed
                if nested or (free and self.stage is not TERMINATING):
                    self.poller = me
                    if not nested:
                        # From here callers drive: the driver lingers, and is woken when
                        # the token is freed with work left (``_hand_off``), not before.
                        self.caller_drove = time.monotonic()
                        self.linger = True
                    break
                remaining = None if end is None else end - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self.want += 1
                try:
                    if self.poller == self.driver_ident and not self.loop_closed:
                        # The driver yields the token to callers at the end of its turn,
                        # and lingers: this caller drives from here on.
                        self.asked = True
                        self.caller_drove = time.monotonic()
                        self.linger = True
                        self.executor.wake()
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
        if self.want and self.stage is not TERMINATING:  # (callers cannot terminate)
            self.cond.notify_all()
        elif self.stage is not OPEN or (self._outstanding() and (self.parked or not self.linger)):
            self.driver_cond.notify()  # (parked: to look within LINGER from now)
        # else, callers driving: the driver looks within LINGER, and takes the token if
        # none has held it since; a caller's next result() most often comes first

    def _release(self, caller: bool = False) -> None:
        with self.lock:
            self.poller = None
            if caller:
                self.caller_drove = time.monotonic()
            self._hand_off()

    def _drive(self, done: Callable[[], bool], end: float | None) -> None:
        """Turns in a caller's thread until ``done()``, ``end`` or a terminate."""

        def ready() -> bool:
            return done() or self.feed is FRESH or bool(self.commands) or self.stage is TERMINATING

        while True:
            timeout = IDLE_WAIT if end is None else min(IDLE_WAIT, end - time.monotonic())
            self._cycle(max(timeout, 0.0), ready, deferred=True)
            self._expire_cancels()
            self._run_callbacks()
            if done() or self.stage is TERMINATING:
                return
            if end is not None and time.monotonic() >= end:
                return

    def _cycle(self, timeout: float, ready: Callable[[], bool], *, deferred: bool) -> None:
        """A turn; if it had no news and ``ready()`` says nothing else is due, a wait of
        up to ``timeout`` and another turn (``LocalExecutor.sync``'s shape). ``ready``
        is asked after the turn that drained the wake-up pipe: a thread that changes
        what it reads, then wakes the loop, is never missed. ``deferred``: a caller's
        thread (each turn one step Ctrl-C cannot cut, and its wait may poll first); else
        the driver thread (which never runs handlers, and sleeps at once)."""
        turn = self._turn
        if not (self._step(turn) if deferred else turn()) and not ready():
            self._idle(timeout, caller=deferred)
            if deferred:
                self._step(turn)
            else:
                turn()

    # -- the driver thread --------------------------------------------------------------

    def launch(self, thread: threading.Thread) -> None:
        """Start the driver ``thread`` without waiting for it to run. ``Thread.start``
        waits until the new thread has run its first instructions, and in a pool's first
        submit under fork that is until a CPU is free of the worker and the zygote just
        forked (1.2-1.8 ms on 2 cores: most of what put the first result behind the
        stdlib's), while the first result needs no driver thread (its caller's
        ``result()`` drives). A helper thread waits instead; ``join_thread`` waits for it."""
        self.thread = thread
        try:
            _thread.start_new_thread(self._launch, ())
        except RuntimeError:  # no thread to spare for the helper: start it from here
            self.thread.start()
            self.launched.set()

    def _launch(self) -> None:
        """The helper: start the driver thread; if that fails, drive from here (never
        leave the pool without a thread to stop it, or futures nobody waits for)."""
        assert self.thread is not None
        try:
            self.thread.start()
        except BaseException as exc:
            self.launch_error = exc
        finally:
            if self.launch_error is None:
                ended(threading.get_native_id())  # this helper, about to end
            self.launched.set()
        if self.launch_error is not None:
            self.run()

    def join_thread(self, timeout: float | None = None) -> None:
        """Wait for the driver thread to end (at most ``timeout`` s, once started)."""
        self.launched.wait()  # the helper sets it within one thread start
        thread = self.thread
        if thread is None or thread is threading.current_thread():
            return
        if self.launch_error is None:
            thread.join(timeout)
            if not thread.is_alive():
                ended(thread.native_id)  # a fork pool made next waits for its end
        else:  # the helper drives: it ends when run() returns
            self.stopped.wait(timeout)

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
                        now = time.monotonic()
                        if self.linger and now - self.caller_drove > LINGER_IDLE:
                            self.linger = False  # submits wake it again from here on
                        timeout = self._look_in(now)
                        self.parked = timeout is None
                        try:
                            self.driver_cond.wait(timeout)
                        finally:
                            self.parked = False
                    self.poller = me
                if self._run_rounds():
                    return
        except BaseException as exc:  # the safety net: never strand a future
            self._crash(exc)
        finally:
            Shared.live_drivers.discard(self)
            self.stopped.set()

    def _look_in(self, now: float) -> float | None:
        """How long the driver thread may sleep before it must look again (lock held);
        None: until woken. It looks only where LINGER promises it will: within LINGER
        of the token's release with work left, and while a caller's hold is younger than
        LINGER (a caller driving tiny tasks takes and frees the token faster than a wake-up
        could follow each release). A hold older than that (a caller waiting for a long
        task), no work, or not lingering: it sleeps until ``_hand_off``, ``add`` or a poke
        wakes it, so a pool waiting on long tasks wakes its parent for their outcomes only."""
        if not self.linger:
            return None  # whatever needs the driver notifies it (_hand_off)
        if self.poller is not None:  # a caller drives
            held = now - self.caller_drove
            return LINGER - held if held < LINGER else None
        if self.want or not self._outstanding():
            return None  # nothing to take over until a submit (add) or a release
        return max(0.0, LINGER - (now - self.caller_drove))

    def _driver_due(self) -> bool:
        """The token is free and no caller wants it, and there is work that no caller
        has been driving for LINGER (lock held)."""
        if self.poller is not None or self.loop_closed:
            return False
        if self.stage is TERMINATING or (self.stage is FINISHING and not self.want):
            return True
        if self.want or not self._outstanding():
            return False
        return not self.linger or time.monotonic() - self.caller_drove >= LINGER

    def _run_rounds(self) -> bool:
        """Rounds until callers want the token or nothing is outstanding (False), or the
        pool is stopped (True)."""

        def ready() -> bool:
            # Shut down with nothing left: stop now, not after the round's wait.
            finished = self.stage is not OPEN and not (self.pending or self.running)
            return bool(
                self.feed is FRESH
                or self.commands
                or self.stage is TERMINATING
                or self.want
                or self.asked
                or finished
            )

        while True:
            self._cycle(IDLE_WAIT, ready, deferred=False)
            self._expire_cancels()
            self._run_callbacks()
            if self.stage is TERMINATING:
                self._stop(terminate=True)
                return True
            with self.lock:
                if self.stage is OPEN or self.pending or self.running or self.commands:
                    if self.want or self.asked or not self._outstanding():
                        self.asked = False
                        self.poller = None
                        self._hand_off()
                        return False
                    continue
                self.loop_closed = True  # finished: from here on nobody writes to the loop
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
            ex.terminate()  # started tasks fail with TaskKilledError, the others cancel
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
            self._advance(FINISHING)
            self.loop_closed = True
            doomed = self.drain_pending()
            self._fail_all([t for t in doomed if t._state == PENDING], error)
            self._notify_cancelled([t for t in doomed if t._state == CANCELLED])
            self.driver_cond.notify_all()  # a driver thread waiting for work: it ends
        with contextlib.suppress(BaseException):  # best effort: the futures matter more
            self.executor.terminate()
        self.pids = ()
        self._fail_running(error)

    def _fail_running(self, error: BaseException) -> None:
        with self.lock:
            running = list(self.running)
        self._fail_all(running, error)
        self._run_callbacks()
