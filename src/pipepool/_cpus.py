"""How many workers by default: the CPUs this process may really use, and why.

One rule for every face (``LocalExecutor``, ``ProcessPoolExecutor``, ``ClusterExecutor``'s
local cluster, ``pipepool run``): the CPUs in the affinity mask (``os.process_cpu_count``
where it exists, else ``sched_getaffinity``; elsewhere, macOS, the CPU count), capped by
the CPU quota of the cgroup this process is in and of every ancestor it can see (cgroup
v2 ``cpu.max``; v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; both read on a hybrid
host), rounded up, at least 1. A container with a 2-CPU quota on a 64-core host gets 2,
where ``os.cpu_count()`` says 64. Inside a cgroup namespace only the namespace's part of
the tree is visible: the quota of an ancestor above it is not read.

Only the standard library; the files are read under ``root`` ("/" in use; tests point
it at captured cgroup files).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import NamedTuple


class CpuCount(NamedTuple):
    """A default number of workers and the limit that decided it."""

    workers: int
    reason: str


def available_cpus(root: str = "/") -> CpuCount:
    """The CPUs this process may use: the affinity mask capped by cgroup CPU quotas."""
    if hasattr(os, "process_cpu_count"):  # 3.13+: the mask, or -X cpu_count if set
        mask, source = os.process_cpu_count() or 1, "os.process_cpu_count()"
    elif hasattr(os, "sched_getaffinity"):
        mask, source = len(os.sched_getaffinity(0)) or 1, "the affinity mask"
    else:  # macOS: no affinity mask, no cgroups
        count = os.cpu_count() or 1
        return CpuCount(count, f"{count} CPUs (os.cpu_count())")
    quota = cgroup_quota(root)
    if quota is not None and math.ceil(quota[0]) < mask:
        count = max(1, math.ceil(quota[0]))
        return CpuCount(count, f"{quota[1]} ({source} allows {mask})")
    reason = f"{mask} CPU{'s' if mask != 1 else ''} in {source}"
    if quota is not None:
        reason += f"; {quota[1]} does not lower it"
    return CpuCount(mask, reason)


def cgroup_quota(root: str = "/") -> tuple[float, str] | None:
    """The lowest CPU quota (in CPUs) of this process's cgroups and their ancestors,
    and where it was read; None when no cgroup sets one (or there are no cgroups)."""
    try:
        memberships = _read(root, "proc/self/cgroup").splitlines()
        mounts = _read(root, "proc/self/mountinfo").splitlines()
    except OSError:
        return None
    best: tuple[float, str] | None = None
    for line in memberships:
        hierarchy, controllers, path = _split_membership(line)
        if hierarchy == "0" and controllers == "":
            found = _walk(root, mounts, "cgroup2", None, path, _v2_quota)
        elif "cpu" in controllers.split(","):
            found = _walk(root, mounts, "cgroup", "cpu", path, _v1_quota)
        else:
            continue
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    return best


def _read(root: str, path: str) -> str:
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def _split_membership(line: str) -> tuple[str, str, str]:
    """``hierarchy-id:controllers:path`` (the path may itself hold colons)."""
    parts = line.split(":", 2)
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else ("", "", "")


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _mount_of(mounts: list[str], fstype: str, controller: str | None) -> tuple[str, str] | None:
    """(root inside the hierarchy, mount point) of the first mount of that hierarchy."""
    for line in mounts:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if len(after) < 3 or after[0] != fstype:
            continue
        if controller is not None and controller not in after[2].split(","):
            continue
        return _unescape(fields[3]), _unescape(fields[4])
    return None


def _walk(
    root: str,
    mounts: list[str],
    fstype: str,
    controller: str | None,
    path: str,
    read_quota: Callable[[str, str], tuple[float, str] | None],
) -> tuple[float, str] | None:
    """The lowest quota from the process's cgroup directory up to the mount point."""
    mount = _mount_of(mounts, fstype, controller)
    if mount is None:
        return None
    mount_root, mount_point = mount
    relative = os.path.relpath(path, mount_root)
    if relative.startswith(".."):  # outside what is mounted (a namespace): the top only
        relative = "."
    directory = os.path.normpath(os.path.join(mount_point, relative))
    best: tuple[float, str] | None = None
    while True:
        found = read_quota(os.path.join(root, directory.lstrip("/")), directory)
        if found is not None and (best is None or found[0] < best[0]):
            best = found
        if directory == os.path.normpath(mount_point) or directory == "/":
            return best
        directory = os.path.dirname(directory)


def _v2_quota(directory: str, shown: str) -> tuple[float, str] | None:
    """cgroup v2: ``cpu.max`` holds "$MAX $PERIOD", MAX being "max" for no limit."""
    try:
        text = _read(directory, "cpu.max").split()
    except OSError:
        return None
    if len(text) != 2 or text[0] == "max":
        return None
    try:
        quota, period = int(text[0]), int(text[1])
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return quota / period, f"cgroup v2 cpu.max {quota} {period} in {shown}"


def _v1_quota(directory: str, shown: str) -> tuple[float, str] | None:
    """cgroup v1: ``cpu.cfs_quota_us`` (-1: no limit) over ``cpu.cfs_period_us``."""
    try:
        quota = int(_read(directory, "cpu.cfs_quota_us"))
        period = int(_read(directory, "cpu.cfs_period_us"))
    except (OSError, ValueError):
        return None
    if quota <= 0 or period <= 0:
        return None
    where = f"cgroup v1 cpu.cfs_quota_us/cpu.cfs_period_us {quota}/{period} in {shown}"
    return quota / period, where
