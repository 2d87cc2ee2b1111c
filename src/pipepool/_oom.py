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
``counters()`` is empty and the message says that the kernel does not say.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

VMSTAT = "/proc/vmstat"
CGROUP_FS = "/sys/fs/cgroup"


@dataclass(frozen=True, slots=True)
class Counter:
    """A file whose ``oom_kill N`` line counts OOM kills, and how a message names it."""

    path: str
    label: str

    def read(self) -> int | None:
        """The count now, or None if the file cannot be read."""
        with contextlib.suppress(OSError, ValueError), open(self.path) as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return None


Snapshot = tuple[int | None, ...]  # each counter's value, in the order of its counters


@functools.cache
def counters() -> tuple[Counter, ...]:
    """The counters this process can read, the most specific first (read once)."""
    v2, v1 = _own_cgroups()
    if v2 is not None:
        found = Counter(f"{CGROUP_FS}{v2.rstrip('/')}/memory.events", f"memory cgroup {v2}")
        if found.read() is not None:
            return (found,)
    chosen = []
    if v1 is not None:
        path = f"{CGROUP_FS}/memory{v1.rstrip('/')}/memory.oom_control"
        chosen.append(Counter(path, f"memory cgroup {v1}"))
    chosen.append(Counter(VMSTAT, "the machine (/proc/vmstat)"))
    return tuple(c for c in chosen if c.read() is not None)


def _own_cgroups() -> tuple[str | None, str | None]:
    """This process's cgroup v2 path and its cgroup v1 memory path, where it has them."""
    v2 = v1 = None
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        for line in f:
            hierarchy, controllers, path = line.rstrip("\n").split(":", 2)
            if hierarchy == "0" and not controllers:
                v2 = path
            elif "memory" in controllers.split(","):
                v1 = path
    return v2, v1


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
