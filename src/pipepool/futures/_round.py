"""What the token holder of a ProcessPoolExecutor's driver does, in named steps: *feed*
(pending records into the LocalExecutor, in bulk, while it holds fewer than its room),
*the round* (the LocalExecutor's own steps) and *deliver* (settle, in bulk, the records
the round handed back), all in one *turn* under one signal deferral; then the
done-callbacks. Who holds the token, and when, is ``_driver.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import CancelledError
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING, RUNNING
from typing import Any, cast

from .. import _signals
from ..errors import RemoteTraceback
from ._item import Record, notify_settled, run_callbacks
from ._map import MapCalls
from ._state import FED, FINISHING, FULL, DriverState, Shared

SUBMIT_KILL = "kill"  # a command: kill (or cancel) this record's call
SUBMIT_CANCEL = "cancel"  # a command: cancel this record's call if it has not started
SUBMIT_CANCEL_REST = "cancel-rest"  # the same, but each worker's next call runs (shutdown)
PIDS_EVERY = 0.01  # s between two looks at the live workers' pids (worker_pids())
CANCEL_WAIT = 1.0  # s a cancel of a future handed over and not started waits for its
# worker's answer to CANCEL (the pure loop, or a task sent too far ahead to be claimed:
# with the compiled loop a claim decides without the worker, docs/design.md, "Cancel
# claims"). Its watcher thread answers within a GIL switch (5 ms) unless the task before
# it holds the GIL (a long C call); past this the cancel is withdrawn (the task runs when
# its turn comes) and cancel() returns False rather than hang.


class Round(DriverState):
    """The token holder's steps (any thread that holds the token runs them)."""

    @staticmethod
    def _step(step: Callable[[], Any]) -> Any:
        """A bookkeeping step that Ctrl-C must not cut in two (main thread only)."""
        deferred = None
        try:
            deferred = _signals.defer()
            return step()
        finally:
            _signals.undefer(deferred)

    def _turn(self) -> bool:
        """Feed, the LocalExecutor's round and deliver, as one step (the caller defers
        signals around it, once); True if the round had news: an outcome, a start or
        anything else it published."""
        ex = self.executor
        if self.pending or self.commands or self.feed is not FED:
            self._feed()
        published = ex.published
        try:
            ex.steps()
        except RuntimeError:
            # Python 3.12 refuses os.fork() once the interpreter is shutting down. The
            # exit hook still lets the pool finish its work: with the workers it has.
            alive = len(ex.worker_pids())
            if not (Shared.global_shutdown and 0 < alive < ex.parallelism):
                raise
            ex.make_do_with(alive)  # a step that cannot repeat: each time there are fewer
        now = time.monotonic()
        if now >= self.pids_due:  # (a waitpid per worker: not every turn)
            self.pids = tuple(ex.worker_pids())
            self.pids_due = now + PIDS_EVERY
        return self._deliver() or ex.published != published

    def _idle(self, timeout: float, *, caller: bool) -> None:
        """Wait (outside any deferral) until a worker writes, a wake-up, ``timeout`` or
        the LocalExecutor's own next deadline; sooner to withdraw a cancel in time. Only
        a ``caller`` (a thread waiting for a result) polls before it sleeps: the driver
        thread's poll would cost the submitting thread the GIL, and nobody waits on it."""
        if self.cancelling:  # wake up in time to withdraw a cancel nobody answered
            timeout = min(timeout, max(0.0, min(self.cancelling.values()) - time.monotonic()))
        self.executor.idle(timeout, poll_first=caller)

    def _feed(self) -> None:
        """Hand pending records to the LocalExecutor, in bulk, while it has room; run
        commands."""
        pending, running, ex = self.pending, self.running, self.executor
        with self.lock:
            room = self._room() - len(running)
            while pending and room > 0:
                taken: list[Record]
                if self.sources:
                    taken = self._take_some(room)
                elif room >= len(pending):
                    taken = cast(list[Record], list(pending))
                    pending.clear()
                else:
                    popleft = pending.popleft
                    taken = cast(list[Record], [popleft() for _ in range(room)])
                fresh = [t for t in taken if t._state == PENDING]
                if len(fresh) < len(taken):  # cancelled while pending: they never run
                    self._notify_cancelled([t for t in taken if t._state == CANCELLED])
                running.update(fresh)
                ex.hand_over(fresh)
                room -= len(fresh)
            self.feed = FULL if pending else FED
            commands = list(self.commands)
            self.commands.clear()
        if commands:
            self._run_commands(commands)

    def _take_some(self, room: int) -> list[Record]:
        """Up to ``room`` records off ``pending`` while it holds a map's calls
        (MapCalls, lock held): the records before the first one, or that one's next
        calls, made into records; in their order."""
        pending = self.pending
        head = pending[0]
        if type(head) is MapCalls:
            taken = head.take(room)
            if head.dropped or not head.calls:
                pending.popleft()
                self.sources -= 1
                head.calls.clear()  # a dropped map's calls: nobody reads them
            return cast(list[Record], taken)
        records: list[Record | MapCalls] = []
        popleft = pending.popleft
        while pending and len(records) < room and type(pending[0]) is not MapCalls:
            records.append(popleft())
        return cast(list[Record], records)

    def _run_commands(self, commands: list[tuple[str, Record]]) -> None:
        """Kills and cancels asked for since the last feed (signals deferred: a turn)."""
        ex = self.executor
        cancels = []
        rest = []
        for command, t in commands:
            if command == SUBMIT_CANCEL:
                cancels.append(t)
            elif command == SUBMIT_CANCEL_REST:
                rest.append(t)
            elif command == SUBMIT_KILL and t in self.running and not ex.kill(t.key):
                # Not started: cancel it (queued in the LocalExecutor: now; sent to a
                # worker: once it skips it), and kill it if it starts first.
                ex.cancel_tasks([t])
                self.kill_on_start.add(t)
        for records, spare_next in ((cancels, False), (rest, True)):
            if not records:
                continue
            # Queued in the LocalExecutor: cancelled now. Sent to a worker and not
            # started: CANCEL; its CancelledError (or a start) settles it. Started or
            # ended: nothing to wait for.
            cancelling = set(ex.cancel_tasks(records, spare_next=spare_next))
            with self.lock:
                for t in records:
                    if t not in cancelling:
                        self.cancelling.pop(t, None)
                self.cond.notify_all()

    def _deliver(self) -> bool:
        """Settle the records the round handed back, in bulk; True if there were any."""
        ex = self.executor
        settled, began = ex.take_records()
        if not (settled or began):
            return False
        kill_on_start = self.kill_on_start
        if began and kill_on_start:
            for t in began:
                if t in kill_on_start:  # kill() came before it started: now it has
                    kill_on_start.discard(t)
                    ex.kill(t.key)
        if settled and kill_on_start:
            kill_on_start.difference_update(settled)
        self._settle(settled, began)
        return True

    def _settle(self, settled: list[Record], began: list[Record] | None = None) -> None:
        """Complete records under one lock and one notify: ``began`` ones run (first:
        a record may begin and end in one round), ``settled`` ones end with what the
        LocalExecutor says (``failed``, ``value``); queue their callbacks."""
        breaking = None
        with self.lock:
            if began:
                for t in began:
                    if t._state == PENDING:
                        t._state = RUNNING
            if settled:
                self.running.difference_update(settled)
                hooked = []
                for t in settled:
                    if t.failed:
                        breaking = self._fail(t) or breaking
                    else:
                        t._result = t.value
                        t._state = FINISHED  # last: result() reads it without the lock
                    if t.hooked:
                        hooked.append(t)
                if hooked:
                    due = self.callbacks_due
                    for t in hooked:
                        if notify_settled(t):
                            due.append(t)
            cancelling = self.cancelling
            if cancelling:  # a cancel() waiting on one of them has its answer
                for t in settled:
                    cancelling.pop(t, None)
                for t in began or ():
                    cancelling.pop(t, None)
            self.cond.notify_all()
        if breaking is not None:
            self._break(breaking)

    def _fail(self, t: Record) -> BaseException | None:
        """Settle a record whose task failed (lock held): its error, or CANCELLED if the
        LocalExecutor cancelled it before it started; the error if it breaks the pool."""
        error = t.value
        if error is not None and error is self.executor.broken:
            t._exception = error
            t._state = FINISHED
            return error
        if isinstance(error, CancelledError) and not isinstance(
            error.__cause__, RemoteTraceback
        ):  # (a task's own error has one)
            # Ended by the LocalExecutor before it started (cancel(), kill(),
            # shutdown(cancel_futures=True), terminate_workers()): it turns CANCELLED.
            t._state = CANCELLED_AND_NOTIFIED
            return None
        t._exception = error
        t._state = FINISHED
        return None

    def _fail_all(self, records: list[Record], error: BaseException) -> None:
        """Fail records that will never reach the LocalExecutor's outcomes (lock held, or
        the pool stopped): the pool broke, or stopped before they finished."""
        with self.lock:
            due = self.callbacks_due
            self.running.difference_update(records)
            for t in records:
                if t._state in (FINISHED, CANCELLED_AND_NOTIFIED):
                    continue
                t._exception = error
                t._state = FINISHED
                if t.hooked and notify_settled(t):
                    due.append(t)
            self.cond.notify_all()

    def _notify_cancelled(self, records: list[Record]) -> None:
        """Records cancelled while pending, now taken out of the queue (lock held): their
        waiters learn it (``set_running_or_notify_cancel``'s half; callbacks ran at
        cancel())."""
        for t in records:
            t._state = CANCELLED_AND_NOTIFIED
            if t.hooked:
                notify_settled(t)

    def _expire_cancels(self) -> None:
        """Withdraw each cancel its worker did not answer within CANCEL_WAIT (a task
        before it holds the GIL): the task runs in its turn, and cancel() says False."""
        if not self.cancelling:
            return
        now = time.monotonic()
        with self.lock:
            late = [t for t, deadline in self.cancelling.items() if deadline <= now]
            for t in late:
                self.executor.uncancel(t)
                del self.cancelling[t]
            if late:
                self.cond.notify_all()

    def _run_callbacks(self) -> None:
        """Done-callbacks, outside the lock and any deferred step: they may block, submit
        or wait. One at a time off the queue: a Ctrl-C leaves the rest to the next round."""
        due = self.callbacks_due
        while due:
            try:
                t = due.popleft()
            except IndexError:  # a nested waiter ran them
                return
            run_callbacks(t)

    def _break(self, error: BaseException) -> None:
        """The initializer keeps failing: like the stdlib, the pool is broken for good."""
        with self.lock:
            if self.broken is None:
                self.broken = error
            self._advance(FINISHING)
            doomed = self.drain_pending()
            self._fail_all([t for t in doomed if t._state == PENDING], error)
            self._notify_cancelled([t for t in doomed if t._state == CANCELLED])
