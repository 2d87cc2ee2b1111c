"""CPU time of the parent and of worker processes, read without help from the pool."""

from __future__ import annotations

import os
import resource

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def parent_seconds() -> float:
    """User + system CPU of this process, every thread included (driver, feeder, ...)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def process_seconds(pid: int) -> float | None:
    """CPU time a live process has used, or None if it is gone (or not on Linux).

    ``/proc/<pid>/schedstat`` counts nanoseconds on the CPU; ``/proc/<pid>/stat``
    (utime + stime, in clock ticks of 10 ms) is the fallback where schedstat is off.
    """
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)
    except (OSError, ValueError, IndexError):
        return None


def snapshot(pids: list[int]) -> dict[int, float]:
    """``{pid: CPU seconds}`` of the processes still alive."""
    out = {}
    for pid in pids:
        s = process_seconds(pid)
        if s is not None:
            out[pid] = s
    return out


def used_since(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU the processes used between two snapshots; one that appeared in between counts
    from zero (its start-up included), one that vanished counts up to ``before``."""
    return sum(s - before.get(pid, 0.0) for pid, s in after.items())
