"""How many workers by default: the CPUs this process may really use, and why.

One rule for every face (``LocalExecutor``, ``ProcessPoolExecutor``, ``ClusterExecutor``'s
local cluster, ``pipepool run``): the CPUs in the affinity mask (``os.process_cpu_count``
where it exists, else ``sched_getaffinity``; elsewhere, macOS, the CPU count), capped by
the CPU quota of the cgroup this process is in and of every ancestor it can see (cgroup
v2 ``cpu.max``; v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; both read on a hybrid
host), rounded up, at least 1. A container with a 2-CPU quota on a 64-core host gets 2,
where ``os.cpu_count()`` says 64. Inside a cgroup namespace only the namespace's part of
the tree is visible: the quota of an ancestor above it is not read.

This module is the rule; the facts (the mask, the cgroups and their quotas) are the host
room's (``pipepool.host``), read under ``root`` ("/" in use; tests point it at captured
cgroup files).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .host import allowed_count, cgroup_quota

__all__ = ["CpuCount", "available_cpus", "cgroup_quota"]


class CpuCount(NamedTuple):
    """A default number of workers and the limit that decided it."""

    workers: int
    reason: str


def available_cpus(root: str = "/") -> CpuCount:
    """The CPUs this process may use: the affinity mask capped by cgroup CPU quotas."""
    mask, source = allowed_count()
    if source == "os.cpu_count()":  # macOS: no affinity mask, no cgroups
        return CpuCount(mask, f"{mask} CPUs (os.cpu_count())")
    quota = cgroup_quota(root)
    if quota is not None and math.ceil(quota[0]) < mask:
        count = max(1, math.ceil(quota[0]))
        return CpuCount(count, f"{quota[1]} ({source} allows {mask})")
    reason = f"{mask} CPU{'s' if mask != 1 else ''} in {source}"
    if quota is not None:
        reason += f"; {quota[1]} does not lower it"
    return CpuCount(mask, reason)
