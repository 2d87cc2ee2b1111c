"""What else ran while a job ran: the noise behind a benchmark's number.

The worker samples the kernel's counters just before it starts a job and just after
it reaped it (Linux; elsewhere nothing is sampled and a job is never called noisy):

* the busy time of the job's CPUs (its ``--pin`` CPUs, else all it may use) from
  ``/proc/stat``: less the job's own CPU time, what *other* processes used there;
* steal time of those CPUs (a hypervisor gave them to another guest);
* ``/proc/pressure/cpu`` "some": how long some task waited for a CPU, machine-wide;
* the worker's cgroup ``cpu.stat`` ``throttled_usec`` (a CPU quota held it back);
* ``procs_running`` of ``/proc/stat`` (runnable tasks, at the start and the end:
  the load average lags by minutes, this does not);
* the current frequency of the job's CPUs (cpufreq's ``scaling_cur_freq``, under a
  sysfs root tests can point elsewhere), where the kernel exposes it: many VMs do not,
  and then the record says null, never a guess. A change is reported, not judged:
  turbo and power saving move it on a quiet machine too.

The samples, and others' CPU between two of them, are the host room's
(``pipepool.host.sample``, ``others_cpu``: the benchmark suite's noise reads the same);
this module judges them.

A job is *noisy* when it lasted at least ``JUDGED_FROM`` s and either its
``contention`` is above ``CONTENTION`` (``--noise-threshold``), or the cgroup throttled
it for more than ``THROTTLED`` of its wall time, or steal took more than ``STEAL`` of
its CPUs' time, or the whole machine was busy: some task waited for a CPU more than
``PRESSURE`` of the job's wall time (PSI), or at its start and at its end the processes
runnable besides the worker that looked filled every CPU of the machine (the job's own
makes one too many). The kernel may keep a pinned job's CPU for it while others queue
on the rest, and the job still runs slower (shared caches, memory bandwidth, SMT
siblings, frequency): others' CPU on its own CPUs misses that, the machine's measures
do not. Wall over CPU time is given in the reason beside them.

``contention`` is the smaller of two shares of the job's CPU time budget (wall time x
its CPUs): the share it did not use, and the share other processes used. A CPU-bound job
that got half of its CPU scores 0.5; a job that sleeps while a neighbour burns its CPU
scores high too (the neighbour may yet slow it); a job on a CPU no one else used scores
0, however long it slept. Ratios, not seconds: long and short jobs are judged alike.
"""

from __future__ import annotations

import os

from ..host import Sample, frequency, others_cpu, sample

__all__ = ["Sample", "frequency", "measure", "sample"]

CONTENTION = 0.5  # others ran on the job's CPUs more than half the time it did not run
STEAL = 0.1
THROTTLED = 0.1
PRESSURE = 0.2  # some task waited for a CPU this share of the job's wall time, machine-
# wide: a quiet machine stays near 0, a CPU-bound process per core beside the job ~0.5
JUDGED_FROM = 0.1  # s: /proc/stat counts in clock ticks (10 ms); shorter jobs are not judged


def measure(
    before: Sample | None,
    after: Sample | None,
    cpu_time: float,
    width: int,
    threshold: float = CONTENTION,
    machine_cpus: int | None = None,
) -> dict:
    """The noise record of a job between two samples; {} when not sampled.
    ``machine_cpus``: the CPUs of the whole machine, which ``procs_running`` counts
    against (default: ``os.cpu_count()``)."""
    if before is None or after is None:
        return {}
    wall = max(after.t - before.t, 1e-9)
    room = wall * max(width, 1)  # CPU seconds the job's CPUs had while it ran
    others, others_share = others_cpu(after.busy - before.busy, cpu_time, wall, width)
    idle_share = max(1.0 - cpu_time / room, 0.0)
    contention = min(idle_share, others_share)
    steal = after.steal - before.steal
    record: dict[str, object] = {
        "others_cpu": round(others, 4),
        "contention": round(contention, 4),
        "steal": round(steal, 4),
        **_machine_measures(before, after, wall),
        "wall_over_cpu": round(wall / cpu_time, 3) if cpu_time > 0 else None,
    }
    reasons = []
    if wall >= JUDGED_FROM:
        if contention > threshold:
            reasons.append(f"others used {others_share:.0%} of its CPUs' time")
        if steal > STEAL * room:
            reasons.append(f"steal took {steal / room:.0%} of its CPUs' time")
        throttled = record["throttled"]
        if isinstance(throttled, float) and throttled > THROTTLED * wall:
            reasons.append(f"its cgroup was throttled {throttled:.2f} s")
        busy = _machine_busy(record, before, after, machine_cpus or os.cpu_count() or 1)
        if busy:
            reasons.append(busy)
    record["noisy"] = bool(reasons)
    record["why"] = "; ".join(reasons) or None
    return record


def _machine_measures(before: Sample, after: Sample, wall: float) -> dict[str, object]:
    """The record's measures beyond the job's CPUs (null where not read): CPU pressure
    as a share of the wall time, the cgroup's throttling, runnable processes at the
    start and the end, the CPUs' frequency and its change."""
    return {
        "cpu_pressure": (
            round((after.pressure - before.pressure) / wall, 4)
            if after.pressure is not None and before.pressure is not None
            else None
        ),
        "throttled": (
            round(after.throttled - before.throttled, 4)
            if after.throttled is not None and before.throttled is not None
            else None
        ),
        "procs_running": [before.running, after.running],
        "freq_mhz": (
            [round(before.freq, 1), round(after.freq, 1)]
            if before.freq is not None and after.freq is not None
            else None
        ),
        "freq_change": (
            round(after.freq / before.freq - 1, 4)
            if before.freq and after.freq is not None
            else None
        ),
    }


def _machine_busy(record: dict, before: Sample, after: Sample, cpus: int) -> str:
    """Why the whole machine was too busy for the job's time to count ("" if it was
    not): CPU pressure above ``PRESSURE``, or every CPU taken by others at both looks.
    The sampling worker counts itself in ``procs_running``: it is left out."""
    found = []
    pressure = record["cpu_pressure"]
    if isinstance(pressure, float) and pressure > PRESSURE:
        found.append(f"CPU pressure {pressure:.0%} (some task waited for a CPU)")
    if (
        before.running is not None
        and after.running is not None
        and min(before.running, after.running) - 1 >= cpus
    ):
        found.append(f"{before.running}-{after.running} runnable on {cpus} CPUs")
    if not found:
        return ""
    ratio = record["wall_over_cpu"]
    ratio_note = f"; its wall time {ratio:.2f}x its CPU time" if ratio is not None else ""
    return f"the machine was busy: {', '.join(found)}{ratio_note}"
