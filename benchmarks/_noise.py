"""How busy the machine was while a run measured, and whether that makes the run noisy.

Load flatters pipepool: a busy machine slows the peers' helper and feeder threads more
than pipepool's one loop. So every run records the 1-minute load average at its start
and end, and the CPU time *other* processes used while it ran: the whole machine's busy
time (``/proc/stat``, steal included: CPU a hypervisor gave other guests) minus this
process tree's own. A run is noisy when the load at the start is above half the cores,
or other processes used more than 5% of the machine's CPU during it; a noisy run never
replaces the published results (``benchmarks/report.py``, ``update_readme``).

This process tree's CPU is ``getrusage`` of itself and of its reaped children (whose
own reaped descendants the kernel folds in) plus every live descendant's
``utime + stime + cutime + cstime`` (``/proc/<pid>/stat``), so workers that a fork server
reaps count as ours too. Where there is no ``/proc`` (macOS), only the load average is
read, and the header says so.

A quiet machine by those counts can still change speed: on a virtual machine the host
may give its CPUs less (no steal shows), and on the 2-core development machine one fixed
loop's CPU time was seen 1.6x apart between two processes run one after the other. Every
ratio of two samples taken apart inherits that drift. So each sample is preceded by a
speed probe (``speed_probe``: the CPU time of a fixed pure-Python loop in this thread),
and the header gives the probes' spread (``steadiness``): how far apart in speed most
samples may have run.

The readings are pipepool's host room (``pipepool.host``: the same ``/proc/stat`` sample,
process table and load average ``pipepool run`` reads), and other processes' CPU is its
``others_cpu``, the one computation ``pipepool run``'s noise and ``--wait-quiet`` make
too; this module holds the suite's rule (the thresholds below) and its words.
"""

from __future__ import annotations

import importlib
import os
import resource
import statistics
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ._stats import percentile


def _host_room() -> ModuleType | None:
    """pipepool's host room, or None in an older pipepool without it (the A/B mode's
    side B, benchmarks/ab.py): then the load average only, as where there is no /proc;
    side A's process reads the machine."""
    try:
        return importlib.import_module("pipepool.host")
    except ImportError:
        return None


host = _host_room()

LOAD_SHARE = 0.5  # a 1-minute load above this many runnable tasks per core at the start
# is noisy: the peers' extra threads would queue behind other work
OTHER_SHARE = 0.05  # other processes using more than this share of all cores' time
# during the run: noisy (CPU time, not wall time, so it is steady under the run's own load)

PROC_METHOD = (
    "other processes' CPU = /proc/stat busy time (steal included) minus this process "
    "tree's (getrusage + /proc/<pid>/stat of live descendants)"
)
LOAD_ONLY_METHOD = (
    "os.getloadavg only: no /proc on this platform, so the CPU other processes used "
    "during the run is not measured"
)


PROBE_LOOPS = 100_000  # the speed probe's iterations: a few ms of CPU, once per sample
STEADY_SPREAD = 1.25  # the middle probes further apart than this (90th / 10th percentile):
# an unsteady machine


def speed_probe(loops: int = PROBE_LOOPS) -> float:
    """Seconds of this thread's CPU a fixed pure-Python loop takes now: the machine's
    speed as interpreted code gets it (a contender's own parent is interpreted code)."""
    began = time.thread_time()
    total = 0
    for i in range(loops):
        total += i
    return time.thread_time() - began


def steadiness(probes: list[float]) -> dict[str, Any] | None:
    """The spread of a run's speed probes (seconds each), or None without any: the
    fastest, the 10th percentile, the median, the 90th percentile and the slowest, in
    ms; ``spread``, the 90th percentile over the 10th (the middle 80% of the probes: a
    lone hiccup of the host does not make a run unsteady); and ``steady``, whether that
    is within ``STEADY_SPREAD``. The first probe is left out: it warms the loop up (the
    interpreter's caches, a new process's first pages)."""
    kept = sorted(probes[1:] if len(probes) > 1 else probes)
    if not kept or kept[0] <= 0:
        return None
    low, high = percentile(kept, 10), percentile(kept, 90)
    spread = high / low
    return {
        "probes": len(kept),
        "loops": PROBE_LOOPS,
        "fastest_ms": round(kept[0] * 1e3, 3),
        "p10_ms": round(low * 1e3, 3),
        "median_ms": round(statistics.median(kept) * 1e3, 3),
        "p90_ms": round(high * 1e3, 3),
        "slowest_ms": round(kept[-1] * 1e3, 3),
        "spread": round(spread, 3),
        "steady": spread <= STEADY_SPREAD,
    }


def describe_speed(speed: dict[str, Any]) -> str:
    """One line for a report's header: how steady the machine's speed was."""
    return (
        f"a fixed pure-Python loop ({speed['loops']:,} additions) took "
        f"{speed['p10_ms']:.1f}-{speed['p90_ms']:.1f} ms of CPU in the middle 80% of the "
        f"{speed['probes']} probes before the samples (median {speed['median_ms']:.1f}, "
        f"all {speed['fastest_ms']:.1f}-{speed['slowest_ms']:.1f}): {speed['spread']:.2f}x "
        "apart, "
        + (
            "a steady machine"
            if speed["steady"]
            else f"an unsteady machine (above {STEADY_SPREAD:g}x): ratios of samples "
            "taken apart carry that drift"
        )
    )


def loadavg() -> float | None:
    """The 1-minute load average, or None where the platform has none."""
    if host is None:
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return host.load_average()


def machine_busy() -> tuple[float, float] | None:
    """``(busy, steal)`` seconds of CPU summed over every core since boot, or None.

    Busy is user + nice + system + irq + softirq + steal (guest time is already in user);
    idle and iowait are not busy.
    """
    found = None if host is None else host.sample(None)
    return None if found is None else (found.busy, found.steal)


def tree_seconds() -> float | None:
    """CPU seconds this process and all its descendants have used, or None (no /proc)."""
    live = None if host is None else host.tree_cpu_seconds()
    if live is None:
        return None
    me = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + reaped.ru_utime + reaped.ru_stime + live


@dataclass(frozen=True)
class Reading:
    """The machine at one moment: what two readings are compared by."""

    at: float  # time.monotonic()
    load: float | None
    busy: tuple[float, float] | None  # machine_busy()
    ours: float | None  # tree_seconds()


def read() -> Reading:
    return Reading(time.monotonic(), loadavg(), machine_busy(), tree_seconds())


def verdict(start: Reading, end: Reading, cores: int, within_run: bool = False) -> dict[str, Any]:
    """What the run's header says about the machine between two readings, and whether
    it was too busy for the run's figures to count (``noisy``, with its ``reasons``).

    ``within_run``: one measure of a run, whose start's load average (it lags a minute)
    is mostly the run's own earlier measures; where other processes' CPU is measured,
    that alone decides."""
    elapsed = max(end.at - start.at, 1e-9)
    out: dict[str, Any] = {
        "load_1min_start": start.load,
        "load_1min_end": end.load,
        "cores": cores,
        "seconds": round(elapsed, 3),
        "other_cpu_s": None,
        "other_share": None,
        "steal_s": None,
        "method": LOAD_ONLY_METHOD,
    }
    if None not in (start.busy, end.busy, start.ours, end.ours):
        assert start.busy is not None and end.busy is not None
        assert start.ours is not None and end.ours is not None
        assert host is not None  # (busy is read only through it)
        ours = end.ours - start.ours
        other, share = host.others_cpu(end.busy[0] - start.busy[0], ours, elapsed, cores)
        out.update(
            other_cpu_s=round(other, 3),
            other_share=share,
            steal_s=round(end.busy[1] - start.busy[1], 3),
            our_cpu_s=round(ours, 3),
            method=PROC_METHOD,
        )
    reasons = []
    load_decides = not (within_run and out["other_share"] is not None)
    if load_decides and start.load is not None and start.load > LOAD_SHARE * cores:
        reasons.append(
            f"1-minute load average {start.load:.2f} at the start, above half the {cores} cores"
        )
    if out["other_share"] is not None and out["other_share"] > OTHER_SHARE:
        reasons.append(
            f"other processes used {out['other_share']:.1%} of the CPU during the run "
            f"(above {OTHER_SHARE:.0%})"
        )
    out["noisy"] = bool(reasons)
    out["reasons"] = reasons
    return out


def describe(noise: dict[str, Any]) -> str:
    """One line for a report's header: the load and the other processes' CPU."""

    def load(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}"

    line = (
        f"1-minute load average {load(noise['load_1min_start'])} at the start, "
        f"{load(noise['load_1min_end'])} at the end ({noise['cores']} cores)"
    )
    if noise.get("other_share") is not None:
        line += (
            f"; other processes used {noise['other_cpu_s']:.1f} s of CPU during the run, "
            f"{noise['other_share']:.1%} of the machine"
        )
    else:
        line += f"; {noise['method']}"
    return line
