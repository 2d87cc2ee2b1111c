"""This process's control groups: where they are, and what they say (CPU quota, cpuset,
throttling, OOM kills).

Where a cgroup is: ``/proc/self/cgroup`` names the process's cgroup in each hierarchy
(``0::/path`` for v2, ``N:controllers:/path`` for v1), and ``/proc/self/mountinfo`` where
each hierarchy is mounted *and which of its directories is at the mount point*. The
second part matters: a container that mounts its own part of the host's hierarchy (a
bind mount, or a cgroup namespace) sees its cgroup's files at the mount point itself,
while ``/proc/self/cgroup`` may still name the host's path; joining the two, as a
reader of ``/proc/mounts`` must, looks for a directory that is not there. So mountinfo
decides; ``/proc/mounts`` is read only where there is no mountinfo (the captured trees
of hwloc's test data have only it), taking each mount's root as the hierarchy's.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from ._files import ROOT, field, read_bytes, read_text, under

VMSTAT = "proc/vmstat"


@dataclass(frozen=True, slots=True)
class Mount:
    root: str  # the hierarchy's directory at the mount point ("/" for all of it)
    point: str  # where it is mounted
    fstype: str  # "cgroup2", "cgroup"
    options: tuple[str, ...]  # the superblock's options: a v1 hierarchy's controllers


def memberships(root: str = ROOT) -> list[tuple[str, str, str]]:
    """``(hierarchy, controllers, path)`` of each line of ``/proc/self/cgroup`` (a path
    may itself hold colons); empty where there is none."""
    found = []
    for line in (read_text(under(root, "proc/self/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            found.append((parts[0], parts[1], parts[2]))
    return found


def cgroup_path(controller: str | None, root: str = ROOT) -> str | None:
    """This process's cgroup: the v2 one (``controller`` None), or the v1 hierarchy's
    holding ``controller``; None if it has none."""
    for hierarchy, controllers, path in memberships(root):
        if controller is None and hierarchy == "0" and not controllers:
            return path
        if controller is not None and controller in controllers.split(","):
            return path
    return None


def mounts(root: str = ROOT) -> list[Mount]:
    """The cgroup file systems mounted, from mountinfo (else /proc/mounts)."""
    info = read_text(under(root, "proc/self/mountinfo"))
    if info is None:
        return _mounts_listed(read_text(under(root, "proc/mounts")) or "")
    found = []
    for line in info.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if len(after) >= 3 and after[0] in ("cgroup", "cgroup2"):
            options = tuple(after[2].split(","))
            found.append(Mount(_unescape(fields[3]), _unescape(fields[4]), after[0], options))
    return found


def _mounts_listed(text: str) -> list[Mount]:
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
            found.append(Mount("/", _unescape(fields[1]), fields[2], tuple(fields[3].split(","))))
    return found


def _unescape(text: str) -> str:
    """mountinfo and /proc/mounts write space, tab, newline and backslash as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def _mount_of(found: list[Mount], controller: str | None) -> Mount | None:
    """The first mount of the v2 hierarchy (``controller`` None) or of the v1 one that
    holds ``controller``."""
    for mount in found:
        if controller is None and mount.fstype == "cgroup2":
            return mount
        if controller is not None and mount.fstype == "cgroup" and controller in mount.options:
            return mount
    return None


def cgroup_directories(controller: str | None, root: str = ROOT) -> list[str]:
    """This process's cgroup directory in that hierarchy, then each ancestor up to the
    mount point, as paths on the machine (not under ``root``); empty if it has none."""
    path = cgroup_path(controller, root)
    mount = _mount_of(mounts(root), controller)
    if path is None or mount is None:
        return []
    directory = _directory(path, mount)
    top = os.path.normpath(mount.point)
    found = [directory]
    while directory not in (top, "/"):
        directory = os.path.dirname(directory)
        found.append(directory)
    return found


def _directory(path: str, mount: Mount) -> str:
    """Where cgroup ``path`` of the mounted hierarchy is on the machine."""
    relative = os.path.relpath(path, mount.root)
    if relative.startswith(".."):  # outside what is mounted (a namespace): the top only
        relative = "."
    return os.path.normpath(os.path.join(mount.point, relative))


def cgroup_directory(controller: str | None, root: str = ROOT) -> str | None:
    """This process's own cgroup directory in that hierarchy (None: it has none)."""
    found = cgroup_directories(controller, root)
    return found[0] if found else None


# -- what the cgroups say ---------------------------------------------------------------


def cgroup_quota(root: str = ROOT) -> tuple[float, str] | None:
    """The lowest CPU quota (in CPUs) of this process's cgroups and their ancestors, and
    where it was read; None when no cgroup sets one (or there are no cgroups). Both
    hierarchies are read on a hybrid host: v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us``. Inside a cgroup namespace only its part of the tree shows."""
    best: tuple[float, str] | None = None
    for controller, read_quota in ((None, _v2_quota), ("cpu", _v1_quota)):
        for directory in cgroup_directories(controller, root):
            found = read_quota(under(root, directory), directory)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
    return best


def _v2_quota(directory: str, shown: str) -> tuple[float, str] | None:
    """cgroup v2: ``cpu.max`` holds "$MAX $PERIOD", MAX being "max" for no limit."""
    text = (read_text(os.path.join(directory, "cpu.max")) or "").split()
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
        quota = int(read_text(os.path.join(directory, "cpu.cfs_quota_us")) or "")
        period = int(read_text(os.path.join(directory, "cpu.cfs_period_us")) or "")
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    where = f"cgroup v1 cpu.cfs_quota_us/cpu.cfs_period_us {quota}/{period} in {shown}"
    return quota / period, where


def cgroup_cpuset(root: str = ROOT) -> set[int] | None:
    """The CPUs this process's cpuset cgroup allows (v2 ``cpuset.cpus.effective``, v1
    ``cpuset.cpus``), None where none is found, as hwloc reads them. Where
    ``/proc/self/cgroup`` was not captured (hwloc's test data), v1's ``/proc/self/cpuset``
    names the cgroup, looked for in each cpuset-capable mount."""
    from ._topology import parse_cpu_list

    found = mounts(root)
    places = [cgroup_directory(controller, root) for controller in (None, "cpuset")]
    listed = (read_text(under(root, "proc/self/cpuset")) or "").strip()
    if listed:
        candidates = [m for m in found if m.fstype == "cgroup2" or "cpuset" in m.options]
        candidates.append(Mount("/", "/sys/fs/cgroup/cpuset", "cgroup", ("cpuset",)))
        places += [_directory(listed, m) for m in candidates]
    for directory in (d for d in places if d is not None):
        for name in ("cpuset.cpus.effective", "cpuset.cpus"):
            text = read_text(under(root, os.path.join(directory, name)))
            if text is not None and text.strip():
                return parse_cpu_list(text)
    return None


@functools.cache
def _cpu_stat(root: str) -> str:
    """This process's v2 cgroup's ``cpu.stat`` ("" if none), found once per root."""
    directory = cgroup_directory(None, root)
    if directory is None:
        return ""
    path = under(root, os.path.join(directory, "cpu.stat"))
    return path if os.path.exists(path) else ""


def throttled_seconds(root: str = ROOT) -> float | None:
    """Seconds the CPU quota of this process's v2 cgroup held it back so far
    (``cpu.stat`` ``throttled_usec``); None where it is not told."""
    path = _cpu_stat(root)
    usec = field(read_bytes(path), b"throttled_usec ") if path else None
    return usec / 1e6 if usec is not None else None


# -- OOM kills -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OomCounter:
    """A file whose ``oom_kill N`` line counts OOM kills, and how a message names it."""

    path: str
    label: str

    def read(self) -> int | None:
        """The count now, or None if the file cannot be read."""
        return field(read_bytes(self.path), b"oom_kill ")


def oom_counters(root: str = ROOT) -> tuple[OomCounter, ...]:
    """The counts of OOM kills this process can read, the most specific first.

    cgroup v2's ``memory.events`` counts the kills of this cgroup and those below it,
    global OOM kills included: when it is there, it is the only counter. cgroup v1's
    ``memory.oom_control`` counts only a cgroup's own kills, so a worker moved into
    another cgroup is seen by the machine's count (``/proc/vmstat``) alone: both are
    read. Elsewhere (macOS) there is none."""
    v2 = cgroup_directory(None, root)
    if v2 is not None:
        shown = cgroup_path(None, root)
        found = OomCounter(under(root, os.path.join(v2, "memory.events")), f"memory cgroup {shown}")
        if found.read() is not None:
            return (found,)
    chosen = []
    v1 = cgroup_directory("memory", root)
    if v1 is not None:
        shown = cgroup_path("memory", root)
        path = under(root, os.path.join(v1, "memory.oom_control"))
        chosen.append(OomCounter(path, f"memory cgroup {shown}"))
    chosen.append(OomCounter(under(root, VMSTAT), "the machine (/proc/vmstat)"))
    return tuple(c for c in chosen if c.read() is not None)
