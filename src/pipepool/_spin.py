"""A bounded, adaptive busy-poll before a blocking wait, for the parent and the workers.

A process asleep in ``poll()`` or ``read()`` pays a wake-up when its pipe turns readable:
tens of µs across cores, most of a tiny task's round trip. A process that expects data
within microseconds (a worker that just wrote a result and may get the next task at
once; a parent that just sent a short task) polls without sleeping first, under three
bounds:

* only while a core is free: the runnable threads of the whole machine (this one
  included, ``/proc/loadavg``) do not outnumber the cores this process may use, so a
  spin never takes a core from a worker or from another program; where that count
  cannot be read (not Linux), never;
* never longer than ``LIMIT``, after which the caller blocks as it would have;
* less after spins that found nothing: each miss in a row doubles the number of waits
  that follow without a spin (1, 2, 4, ... ``MAX_SKIP``), so a pattern that never
  profits (tasks far apart) spins about once per ``MAX_SKIP`` waits.

``PIPEPOOL_SPIN=0`` in the environment turns it off (workers read the same variable).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from time import perf_counter

from .host import runnable_threads

LIMIT = 100e-6  # s a spin lasts at most: above a round trip's own work, below a wake-up's
# worth of CPU wasted when nothing comes
MAX_SKIP = 64  # waits without a spin after misses in a row (the back-off's ceiling)
ENABLED = os.environ.get("PIPEPOOL_SPIN", "1").strip() != "0"

try:
    _CORES = len(os.sched_getaffinity(0))
except (AttributeError, OSError):  # not Linux
    _CORES = os.cpu_count() or 1


def runnable() -> int | None:
    """Threads runnable on the whole machine now, this one included (Linux), or None."""
    return runnable_threads()


def core_free() -> bool:
    """True when this thread may burn a core without taking it from anyone runnable."""
    count = runnable()
    return count is not None and count <= _CORES


class Spin:
    """The spin of one waiter (a LocalExecutor's token holder, or one worker)."""

    __slots__ = ("free", "limit", "misses", "skip")

    def __init__(self, limit: float = LIMIT, free: Callable[[], bool] = core_free) -> None:
        self.limit = limit  # s one spin lasts at most
        self.free = free  # may this thread burn a core now?
        self.misses = 0  # spins in a row that found nothing
        self.skip = 0  # waits left to block without spinning (the back-off)

    def wait(self, ready: Callable[[], bool], timeout: float | None = None) -> bool:
        """Poll ``ready()`` (non-blocking) for at most ``limit`` (and ``timeout``), if a
        core is free and the back-off allows; True if it turned true: the caller need not
        block."""
        if ready():
            return True
        if self.skip:
            self.skip -= 1
            return False
        if not self.free():
            return False
        end = perf_counter() + (self.limit if timeout is None else min(self.limit, timeout))
        while perf_counter() < end:
            if ready():
                self.misses = 0
                return True
        self.misses += 1
        self.skip = min(MAX_SKIP, 1 << min(self.misses - 1, 30))
        return False
