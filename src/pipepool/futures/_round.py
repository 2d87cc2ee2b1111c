"""What the token holder of a ProcessPoolExecutor's driver does, in named steps: *feed*
(pending calls into the LocalExecutor, while it holds fewer than its room), *sync* (the
LocalExecutor's own round) and *deliver* (complete items from its event buffer), then
the done-callbacks. Who holds the token, and when, is ``_driver.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import CancelledError
from typing import Any

from .. import _signals
from ..errors import RemoteTraceback, TaskKilledError
from ..events import State
from ._item import Item
from ._state import FED, FINISHING, FULL, TERMINATING, DriverState, Shared

SUBMIT_KILL = "kill"  # a command: kill (or cancel) the call with this key


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
                    if self.stage is TERMINATING
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
            self._advance(FINISHING)
            doomed = self.drain_pending()
            self._settle([(item, False, error) for item in doomed if item.start()])
