"""LocalExecutor's dispatch depth: how many tasks a worker may hold ahead, and when the
ones sent ahead are trapped behind a task that overruns (and are taken back).

Adaptive dispatch depth (``prefetch=None``): a worker gets as many tasks ahead as fit in
BACKLOG seconds of the observed task time. Deep for tiny tasks (fewer wake-ups, one
writev per batch), 1 for long ones (they never wait behind each other); and a worker
whose current task overruns gets nothing more, so a surprise long task traps at most
the few short ones already sent to it (and those are revoked: see ``trapped``).
A fixed ``prefetch`` is the caller's explicit choice: no adaptation, no revocation.

The policy decides, the executor acts: it keeps only its own estimate, reads the
workers and their tasks, and never writes to them or to a pipe (the REVOKE is written
by ``Dispatcher._revoke_trapped``, where the other writes to workers are).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._task import TaskT
    from ._state import _Worker

BACKLOG = 0.002  # s of predicted work queued per worker: the wait a short task may pay
MAX_DEPTH = 64  # beyond this, bigger batches stop paying and fairness suffers
EMA_WEIGHT = 0.2  # weight of the newest run-time sample


class DepthPolicy:
    """``prefetch`` (fixed, or None for adaptive) and the observed task time."""

    __slots__ = ("prefetch", "task_time")

    def __init__(self, prefetch: int | None) -> None:
        self.prefetch = prefetch
        self.task_time = BACKLOG  # EMA of task run time; starts at depth 1, learns fast

    def depth(self) -> int:
        """Tasks a worker may hold ahead now: ``prefetch``, or the adaptive depth."""
        return self.prefetch or self.adaptive_depth()

    def adaptive_depth(self) -> int:
        """Tasks ahead per worker: BACKLOG seconds of the observed task time, 1..MAX_DEPTH."""
        return max(1, min(MAX_DEPTH, int(BACKLOG / max(self.task_time, 1e-7))))

    def observe(self, elapsed: float) -> None:
        """A task ran ``elapsed`` seconds (the worker's own clock: load on this machine
        cannot skew the estimate)."""
        self.task_time += EMA_WEIGHT * (elapsed - self.task_time)

    def observe_all(self, samples: list[float]) -> None:
        """``observe`` each of ``samples``, in order (a round's outcomes, in one call)."""
        task_time = self.task_time
        for elapsed in samples:
            task_time += EMA_WEIGHT * (elapsed - task_time)
        self.task_time = task_time

    def overrun_after(self) -> float:
        """Seconds past which a running task is longer than tasks have been lately."""
        return max(BACKLOG, 4 * self.task_time)

    @staticmethod
    def trap_deadline(w: _Worker[TaskT], after: float) -> float | None:
        """When tasks sent ahead to ``w`` become trapped behind its current task (if it
        has any such tasks and no REVOKE is out already), else None."""
        current = w.current
        if current is None or w.revoking or w.closing or len(w.in_flight) < 2:
            return None
        return current.began + after

    def wait_bound(self, workers: Iterable[_Worker[TaskT]], bound: float) -> float:
        """``bound``, or less if a worker's lead tasks become trapped sooner (adaptive
        depth only): a wait must end in time to revoke them."""
        if self.prefetch is None:
            leading = [w for w in workers if w.current is not None and len(w.in_flight) > 1]
            if leading:  # (the others have no tasks to trap: most rounds, no clock read)
                now = time.monotonic()
                after = self.overrun_after()
                deadlines = [self.trap_deadline(w, after) for w in leading]
                bound = min([bound] + [d - now for d in deadlines if d is not None])
        return bound

    def trapped(self, workers: Iterable[_Worker[TaskT]]) -> list[_Worker[TaskT]]:
        """The workers whose tasks sent ahead are trapped behind a current task that
        overruns (adaptive depth only): their tasks should be taken back (revoked).

        Deep dispatch sends short tasks behind whatever a worker runs; when that turns
        out to be a long task they would wait for it while other workers idle.
        """
        if self.prefetch is not None:
            return []  # a fixed depth is the caller's explicit choice
        leading = [w for w in workers if w.current is not None and len(w.in_flight) > 1]
        if not leading:  # (the others have no tasks to trap: most rounds, no clock read)
            return []
        now = time.monotonic()
        after = self.overrun_after()
        trapped = []
        for w in leading:
            deadline = self.trap_deadline(w, after)
            if deadline is not None and deadline <= now:
                trapped.append(w)
        return trapped
