"""LocalExecutor's dispatch depth: how many tasks a worker may hold ahead, and when the
ones sent ahead are trapped behind a task that overruns (and are taken back).

Adaptive dispatch depth (``prefetch=None``): a worker gets as many tasks ahead as fit in
BACKLOG seconds of the observed task time. Deep for tiny tasks (fewer wake-ups, one
writev per batch), 1 for long ones (they never wait behind each other); and a worker
whose current task overruns gets nothing more, so a surprise long task traps at most
the few short ones already sent to it (and those are revoked: see ``revoke_trapped``).
A fixed ``prefetch`` is the caller's explicit choice: no adaptation, no revocation.

The policy keeps only its own estimate; the workers and their tasks stay the
executor's, which it reads (and marks ``revoking`` on) but never moves.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

from ..frames import Kind, encode_header

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

    def overrun_after(self) -> float:
        """Seconds past which a running task is longer than tasks have been lately."""
        return max(BACKLOG, 4 * self.task_time)

    @staticmethod
    def trap_deadline(w: Any, after: float) -> float | None:
        """When tasks sent ahead to ``w`` become trapped behind its current task (if it
        has any such tasks and no REVOKE is out already), else None."""
        current = w.current
        if current is None or w.revoking or w.closing or len(w.in_flight) < 2:
            return None
        return current.began + after

    def wait_bound(self, workers: Iterable[Any], bound: float) -> float:
        """``bound``, or less if a worker's lead tasks become trapped sooner (adaptive
        depth only): a wait must end in time to revoke them."""
        if self.prefetch is None:
            now = time.monotonic()
            after = self.overrun_after()
            deadlines = [self.trap_deadline(w, after) for w in workers]
            bound = min([bound] + [d - now for d in deadlines if d is not None])
        return bound

    def revoke_trapped(self, workers: Iterable[Any]) -> None:
        """Take back the tasks sent ahead to a worker whose current task overruns.

        Deep dispatch sends short tasks behind whatever a worker runs; when that turns
        out to be a long task they would wait for it while other workers idle. A REVOKE
        on the worker's control pipe (a 16-byte write into a pipe that holds at most
        one, so it cannot block) makes it skip them; its REVOKED answer says which, and
        the executor's ``_on_revoked`` queues them again.
        """
        if self.prefetch is not None:
            return  # a fixed depth is the caller's explicit choice
        now = time.monotonic()
        after = self.overrun_after()
        for w in workers:
            deadline = self.trap_deadline(w, after)
            if deadline is None or deadline > now:
                continue
            send_revoke(w)


def send_revoke(w: Any) -> None:
    """Ask ``w`` to skip every task it was sent and has not started (a REVOKE on its
    control pipe, a 16-byte write into a pipe that holds at most one, so it cannot
    block); its REVOKED answer says which it skipped. Nothing if one is out already (it
    covers every task ``w`` holds: a worker with a REVOKE out is sent nothing new) or
    if ``w`` is closing (its exit re-dispatches, or cancels, what it never started)."""
    if w.revoking or w.closing:
        return
    try:
        os.write(w.control_fd, encode_header(Kind.REVOKE, w.seq, 0))
    except OSError:  # gone (EPIPE): its exit will re-dispatch what it never started
        return
    w.revoking = w.seq
