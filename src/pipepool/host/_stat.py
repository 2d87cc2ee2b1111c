"""The kernel's running counts: CPU time from ``/proc/stat``, CPU pressure, the CPUs'
current frequency, runnable and blocked processes, free memory.

A ``Sample`` is these counts at one moment for a set of CPUs (every CPU, or a job's):
two samples make an interval, and ``others_cpu`` is what every caller that asks "how
much CPU did others use meanwhile" computes, ``pipepool run``'s noise and
``--wait-quiet`` and the benchmark suite's alike.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ._cgroup import throttled_seconds
from ._files import ROOT, field, read_bytes, under

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_FREE_FIELDS = (b"MemFree:", b"Buffers:", b"Cached:", b"SwapCached:")


def proc_stat(root: str = ROOT) -> str:
    """Where ``/proc/stat`` is under ``root``."""
    return under(root, "proc/stat")


def meminfo(root: str = ROOT) -> str:
    """Where ``/proc/meminfo`` is under ``root``."""
    return under(root, "proc/meminfo")


@dataclass(frozen=True, slots=True)
class Sample:
    """The counts of a set of CPUs at one moment."""

    t: float  # time.monotonic()
    busy: float  # s of non-idle time of the CPUs sampled since boot, steal included
    steal: float  # s a hypervisor gave them to another guest
    pressure: float | None  # s some task waited for a CPU ("some" of PSI), machine-wide
    throttled: float | None  # s this process's cgroup's CPU quota held it back
    running: int | None  # procs_running: runnable tasks on the machine now
    freq: float | None = None  # MHz: the mean current frequency of the CPUs, if readable


def sample(cpus: Iterable[int] | None, stat: str | None = None, root: str = ROOT) -> Sample | None:
    """The counts now, for ``cpus`` (None: every CPU); None where there is no
    ``/proc/stat``. ``stat``: that file, when not the one under ``root`` (a test's)."""
    t = time.monotonic()
    data = read_bytes(stat or proc_stat(root))
    if data is None:
        return None
    wanted = None if cpus is None else {f"cpu{c}".encode() for c in cpus}
    busy = steal = 0.0
    seen = []
    for line in data.split(b"\n"):
        if line.startswith(b"cpu") and line[3:4].isdigit():
            fields = line.split()
            if wanted is not None and fields[0] not in wanted:
                continue
            seen.append(int(fields[0][3:]))
            v = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
            busy += (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / _TICK
            steal += v[7] / _TICK
    running = field(data, b"procs_running ")
    return Sample(
        t, busy, steal, cpu_pressure(root), throttled_seconds(root), running, frequency(seen, root)
    )


def others_cpu(busy: float, ours: float, seconds: float, cpus: int) -> tuple[float, float]:
    """Of ``busy`` CPU seconds that ``cpus`` CPUs spent over ``seconds``, what others
    used (less ``ours``, the caller's own) and its share of the CPUs' time (0-1)."""
    others = max(busy - ours, 0.0)
    return others, others / max(seconds * max(cpus, 1), 1e-9)


def cpu_pressure(root: str = ROOT) -> float | None:
    """Seconds some task waited for a CPU since boot (``/proc/pressure/cpu`` "some"
    total), machine-wide; None where the kernel has no PSI."""
    first = read_bytes(under(root, "proc/pressure/cpu"), 256)
    for word in (first or b"").split(b"\n", 1)[0].split():
        if word.startswith(b"total="):
            return int(word[6:]) / 1e6
    return None


def frequency(cpus: Iterable[int], root: str = ROOT) -> float | None:
    """The mean current frequency of ``cpus`` in MHz, from each one's
    ``cpufreq/scaling_cur_freq`` (kHz); None unless every one is read."""
    khz: list[int] = []
    for cpu in cpus:
        text = read_bytes(under(root, f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"))
        try:
            khz.append(int(text or b""))
        except ValueError:
            return None
    return sum(khz) / len(khz) / 1000 if khz else None


def running_processes(stat: str | None = None, root: str = ROOT) -> int | None:
    """GNU parallel's load: tasks running or blocked on I/O right now, less the one
    counting; None where ``/proc/stat`` cannot be read."""
    data = read_bytes(stat or proc_stat(root))
    if data is None:
        return None
    running = field(data, b"procs_running ") or 0
    blocked = field(data, b"procs_blocked ") or 0
    return max(running + blocked - 1, 0)


def free_memory(path: str | None = None, root: str = ROOT) -> int | None:
    """Bytes free as GNU parallel counts them: MemFree + Buffers + Cached + SwapCached
    of ``/proc/meminfo`` (or the file ``path``); None where it cannot be read."""
    data = read_bytes(path or meminfo(root))
    if data is None:
        return None
    return sum(
        int(line.split()[1]) * 1024 for line in data.splitlines() if line.startswith(_FREE_FIELDS)
    )
