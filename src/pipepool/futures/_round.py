"""What the token holder of a ProcessPoolExecutor's driver does, in named steps: *feed*
(pending calls into the LocalExecutor, while it holds fewer than its room), *sync* (the
LocalExecutor's own round) and *deliver* (complete items from its event buffer), then
the done-callbacks. Who holds the token, and when, is ``_driver.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import CancelledError
from typing import Any

from .. import _signals
from ..errors import RemoteTraceback, TaskKilledError
from ..events import State
from ._item import Item
from ._state import FED, FINISHING, FULL, TERMINATING, DriverState, Shared

SUBMIT_KILL = "kill"  # a command: kill (or cancel) the call with this key
SUBMIT_CANCEL = "cancel"  # a command: cancel the call with this key if it has not started
SUBMIT_CANCEL_REST = "cancel-rest"  # the same, but each worker's next call runs (shutdown)
CANCEL_WAIT = 1.0  # s a cancel of a future handed over and not started waits for its
# worker's answer to REVOKE. Its watcher thread answers within a GIL switch (5 ms) unless
# the task before it holds the GIL (a long C call); past this the cancel is withdrawn
# (the task runs when its turn comes) and cancel() returns False rather than hang.


class Round(DriverState):
    """The token holder's steps (any thread that holds the token runs them)."""

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
        if self.cancelling:  # wake up in time to withdraw a cancel nobody answered
            timeout = min(timeout, max(0.0, min(self.cancelling.values()) - time.monotonic()))
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
            room = self._room() - len(running)
            while pending and room > 0:
                entry = pending.popleft()
                item = entry.item
                if not item.start():
                    continue  # cancelled while pending: it never runs
                try:
                    ex.queue_call(
                        entry.key, entry.fn, entry.args, entry.kwargs, timeout=entry.timeout
                    )
                except Exception as exc:  # not callable: that item's error
                    failed.append((item, exc))
                    continue
                running[entry.key] = item
                room -= 1
            self.feed = FULL if pending else FED
            commands = list(self.commands)
            self.commands.clear()
        if failed:
            self._settle([(item, False, exc) for item, exc in failed])
        cancels = []
        rest = []
        for command, key in commands:
            if command == SUBMIT_CANCEL:
                cancels.append(key)
            elif command == SUBMIT_CANCEL_REST:
                rest.append(key)
            elif command == SUBMIT_KILL and key in running and not ex.kill(key):
                # Not started: cancel it (queued in the LocalExecutor: now; sent to a
                # worker: once it skips it), and kill it if it starts first.
                ex.cancel(key)
                self.kill_on_start.add(key)
        for keys, spare_next in ((cancels, False), (rest, True)):
            if not keys:
                continue
            # Queued in the LocalExecutor: cancelled now. Sent to a worker and not
            # started: REVOKE; its CancelledError (or RUNNING) event settles it. Started
            # or ended: nothing to wait for.
            cancelling = ex._cancel(keys, spare_next=spare_next)
            with self.lock:
                for key in keys:
                    if key not in cancelling:
                        self.cancelling.pop(key, None)
                self.cond.notify_all()

    def _deliver(self) -> None:
        """Complete the items of every terminal event; act on RUNNING ones."""
        ex = self.executor
        events = ex.get_event_buffer()
        if not events:
            return
        broken = ex.broken
        outcomes: list[tuple[Item, bool, Any]] = []
        began: list[Item] = []
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
                if state is State.RUNNING:
                    item = running.get(key)  # type: ignore[call-overload]
                    if item is not None:
                        began.append(item)
                    if key in kill_on_start:
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
                if self.stage is not TERMINATING:
                    # Cancelled in the LocalExecutor before it started (cancel(),
                    # shutdown(cancel_futures=True), kill()): its future is still
                    # PENDING, and turns CANCELLED.
                    outcomes.append((item, False, None))
                    continue
                error = TaskKilledError("the executor was terminated before the task started")
            outcomes.append((item, False, error))
        self._settle(outcomes, began, events if self.cancelling else None)
        if breaking is not None:
            self._break(breaking)

    def _settle(
        self,
        outcomes: list[tuple[Item, bool, Any]],
        began: list[Item] | None = None,
        decided: Any = None,
    ) -> None:
        """Complete a batch under one lock and one notify; queue their callbacks. An
        outcome (item, False, None) cancels it (it never started); ``began`` items run;
        ``decided`` keys had an event: a cancel() waiting on one has its answer."""
        if not (outcomes or began or decided):
            return
        with self.lock:
            due = self.callbacks_due
            for item, ok, value in outcomes:
                if item.revoked() if value is None and not ok else item.settle(ok, value):
                    due.append(item)
            if began:
                for item in began:
                    item.began()
            if decided:
                cancelling = self.cancelling
                for key in decided:
                    cancelling.pop(key, None)
            self.cond.notify_all()

    def _expire_cancels(self) -> None:
        """Withdraw each cancel its worker did not answer within CANCEL_WAIT (a task
        before it holds the GIL): the task runs in its turn, and cancel() says False."""
        if not self.cancelling:
            return
        now = time.monotonic()
        with self.lock:
            late = [key for key, deadline in self.cancelling.items() if deadline <= now]
            for key in late:
                self.executor._uncancel(key)
                del self.cancelling[key]
            if late:
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
            self._advance(FINISHING)
            doomed = self.drain_pending()
            self._settle([(item, False, error) for item in doomed if item.start()])
