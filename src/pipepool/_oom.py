"""The kernel's count of OOM kills: was a worker found dead of SIGKILL killed by the OOM
killer, or from outside? One home for the question: the executor asks it when it retires
such a worker (its ``WorkerLostError`` says which, and ``pipepool run``, the futures
face and the Airflow executor pass that on).

Linux counts OOM kills per memory cgroup (the ``oom_kill`` line of cgroup v2's
``memory.events``, or of v1's ``memory.oom_control``) and for the whole machine
(``/proc/vmstat``). A count that rose while the worker ran says the OOM killer struck
meanwhile. cgroup v2 counts the kills of our cgroup and those below it, global OOM kills
included: when it is there, it is the only counter read. cgroup v1 counts only a
cgroup's own kills, so a worker moved into another cgroup is seen by the machine's count
alone: both are read, and either rising counts. Elsewhere (macOS) there is no counter:
``counters()`` is empty and the message says that the kernel does not say. Which files
count, and reading them, is the host room's (``pipepool.host.oom_counters``); the
question, did a count rise while the worker ran, is this module's.
"""

from __future__ import annotations

import functools

from .host import OomCounter as Counter
from .host import cgroup_path, oom_counters

Snapshot = tuple[int | None, ...]  # each counter's value, in the order of its counters


@functools.cache
def counters() -> tuple[Counter, ...]:
    """The counters this process can read, the most specific first (found once)."""
    return oom_counters()


def _own_cgroups() -> tuple[str | None, str | None]:
    """This process's cgroup v2 path and its cgroup v1 memory path, where it has them."""
    return cgroup_path(None), cgroup_path("memory")


def snapshot(watched: tuple[Counter, ...]) -> Snapshot:
    """Every counter's value now."""
    return tuple(c.read() for c in watched)


def rise(before: Snapshot, watched: tuple[Counter, ...]) -> str | None:
    """How a count of OOM kills rose since ``before`` ("the OOM kill count of memory
    cgroup /x rose from 0 to 1"), or None if none did."""
    for counter, then in zip(watched, before, strict=True):
        now = counter.read()
        if then is not None and now is not None and now > then:
            return f"the OOM kill count of {counter.label} rose from {then} to {now}"
    return None
