"""This process and one other, as the kernel tells them: the CPUs it may use, its
threads, another's state and memory; and the machine's runnable threads now.

Only ``os``: a worker imports this (the spin's runnable count), so it costs a worker's
start-up nothing it would not pay anyway.
"""

from __future__ import annotations

import os

from ._files import ROOT, read_bytes, under


def allowed_cpus() -> set[int] | None:
    """The CPUs this process may run on (its affinity mask); None where the system has
    no affinity API (macOS)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def allowed_count() -> tuple[int, str]:
    """How many CPUs this process may use, and what says so: ``os.process_cpu_count()``
    (3.13+: the mask, or ``-X cpu_count``), else the affinity mask, else (macOS, which
    has neither) ``os.cpu_count()``."""
    if hasattr(os, "process_cpu_count"):
        return os.process_cpu_count() or 1, "os.process_cpu_count()"
    mask = allowed_cpus()
    if mask is not None:
        return len(mask) or 1, "the affinity mask"
    return os.cpu_count() or 1, "os.cpu_count()"


def runnable_threads(root: str = ROOT) -> int | None:
    """Threads runnable on the whole machine now, the caller included (the fourth field
    of ``/proc/loadavg``, "2/345": 2), or None where it cannot be read."""
    # A file object, not os.open(): a Ctrl-C right after the open (the spin runs in the
    # undeferred wait) drops it, and dropping it closes the fd, where a bare fd leaked.
    try:
        with open(under(root, "proc/loadavg"), "rb", buffering=0) as f:
            data = f.read(128)  # "0.52 0.58 0.59 2/345 12345"
    except OSError:
        return None
    try:
        return int(data.split()[3].split(b"/")[0])
    except (IndexError, ValueError):
        return None


def load_average() -> float | None:
    """The 1-minute load average, or None where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def thread_count(root: str = ROOT) -> int | None:
    """The threads this process has now, by the kernel's count (a C library's threads
    too: field 20 of ``/proc/self/stat``); None where there is no /proc."""
    stat = read_bytes(under(root, "proc/self/stat"))
    try:
        return int(stat[stat.rindex(b")") + 2 :].split()[17]) if stat else None
    except (ValueError, IndexError):
        return None


def thread_listed(tid: int, root: str = ROOT) -> bool | None:
    """True while this process's thread ``tid`` (a native id) is still one of the
    kernel's (``/proc/self/task/<tid>``), as it is until its last instructions have run,
    after a join; None where there is no /proc."""
    if not os.path.isdir(under(root, "proc/self/task")):
        return None
    return os.path.exists(under(root, f"proc/self/task/{tid}"))


def process_state(pid: int, root: str = ROOT) -> str | None:
    """Process ``pid``'s state letter in ``/proc/<pid>/stat`` ("R", "S", "Z", ...), ""
    when there is no such process, None where /proc cannot tell (there is none)."""
    try:
        with open(under(root, f"proc/{pid}/stat"), "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return "" if os.path.exists(under(root, "proc/self/stat")) else None
    except OSError:
        return None
    end = stat.rfind(b")")  # the command name may hold spaces and parentheses
    return stat[end + 2 : end + 3].decode("ascii", "replace") if end >= 0 else None


def rss_bytes(pid: int | None = None, root: str = ROOT) -> int | None:
    """Resident memory of process ``pid`` (None: this one) now, not its peak, from
    ``/proc/<pid>/statm``; None where it cannot be read."""
    statm = read_bytes(under(root, f"proc/{pid or 'self'}/statm"))
    try:
        return int(statm.split()[1]) * os.sysconf("SC_PAGE_SIZE") if statm else None
    except (ValueError, IndexError):
        return None
