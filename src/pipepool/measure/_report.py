"""What a run's summary says of what was measured, for people (``lines``) and for
programs (``fields``): the noisy jobs, the waits for quiet, ``--repeat``'s per-job
statistics and pyperf's warnings, ``--compare``'s verdict.

Statistics are over a job's successful runs only: a failed or timed-out run is counted,
by kind, never measured. With ``--resume`` the joblog's rows of the jobs skipped count
too (``earlier``: wall time and exit only, the joblog has no CPU time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .._cli_common import SHOWN, listing, short


class RunRecord(Protocol):
    """A job's final outcome, as the runner keeps it (``run``'s ``Outcome``)."""

    @property
    def seq(self) -> int: ...
    @property
    def command(self) -> str: ...
    @property
    def status(self) -> str: ...  # "ok", "failed", "aborted"
    @property
    def timed_out(self) -> bool: ...
    @property
    def runtime(self) -> float: ...
    @property
    def user(self) -> float: ...
    @property
    def maxrss(self) -> int: ...
    @property
    def origin(self) -> int: ...  # the job's number within one repetition
    @property
    def logged(self) -> bool: ...  # read back from the joblog (--resume)
    @property
    def measured(self) -> dict: ...  # the measured part of its record (_probe.record)


def noisy(o: RunRecord) -> bool | None:
    """Whether others disturbed the job (None: not judged)."""
    flag = o.measured.get("noisy")
    return None if flag is None else bool(flag)


def lines(
    outcomes: Sequence[RunRecord], earlier: Sequence[RunRecord], repeat: int, compared: bool
) -> list[str]:
    found = _noise_lines(outcomes)
    waits = quiet_waits(outcomes)
    if waits is not None:
        found.append(
            f"wait for quiet: {waits['held']} of {waits['jobs']} jobs found their CPUs "
            f"busy and waited; {waits['seconds']:.2f} s in all; {waits['not_quiet']} "
            "started without quiet (--wait-quiet's bound ran out)"
        )
    if repeat > 1:
        found += _repetition_lines(repetitions([*earlier, *outcomes]), repeat)
    if compared:
        from ._compare import describe

        commands = {st["job"]: str(st["command"]) for st in repetitions([*earlier, *outcomes])}
        a, b = (short(commands.get(side, "(did not run)")) for side in (1, 2))
        found += describe(comparison(outcomes), a, b)
    return found


def fields(
    outcomes: Sequence[RunRecord], earlier: Sequence[RunRecord], repeat: int, compared: bool
) -> dict[str, object]:
    return {
        "noisy": sum(1 for o in outcomes if noisy(o)),
        "wait_quiet": quiet_waits(outcomes),
        "repeat": repeat,
        "repetitions": repetitions([*earlier, *outcomes]) if repeat > 1 else None,
        "comparison": comparison(outcomes) if compared else None,
    }


def _noise_lines(outcomes: Sequence[RunRecord]) -> list[str]:
    judged = [o for o in outcomes if noisy(o) is not None]
    if not judged:
        return []
    flagged = sorted((o for o in judged if noisy(o)), key=lambda o: o.seq)
    found = [
        f"noisy: {len(flagged)} of {len(judged)} jobs had others on their CPUs or a "
        "busy machine" + (" (see --json's noise)" if flagged else "")
    ]
    return found + (listing(flagged, _why) if flagged else [])


def _why(o: RunRecord) -> str:
    noise = o.measured.get("noise")
    return str(noise.get("why") or "") if isinstance(noise, dict) else ""


def quiet_waits(outcomes: Sequence[RunRecord]) -> dict[str, object] | None:
    """``--wait-quiet``: how many jobs found their CPUs busy (``held``: more than one
    look), how long all waited, how many started only because the bound ran out
    (None: not asked)."""
    waits = [w for o in outcomes if isinstance(w := o.measured.get("wait_quiet"), dict)]
    if not waits:
        return None
    return {
        "jobs": len(waits),
        "held": sum(1 for w in waits if w["looks"] > 1 or w["quiet"] is False),
        "seconds": round(sum(w["waited"] for w in waits), 3),
        "not_quiet": sum(1 for w in waits if w["quiet"] is False),
    }


def comparison(outcomes: Sequence[RunRecord]) -> dict[str, object]:
    """``--compare``: B (the second job) against A (the first), over their successful
    runs; without a verdict (``verdict`` null) when a side has none, ``why`` says so."""
    from ._compare import compare, no_verdict

    runs: dict[int, list[float]] = {1: [], 2: []}
    failed = {1: 0, 2: 0}
    for o in outcomes:
        side = o.origin or o.seq
        if o.status == "ok":
            runs.setdefault(side, []).append(o.runtime)
        elif o.status == "failed":
            failed[side] = failed.get(side, 0) + 1
    missing = []
    for side, name in ((1, "A"), (2, "B")):
        if not runs[side]:
            ran = f"{failed[side]} failed" if failed[side] else "none ran"
            missing.append(f"{name} had no successful run ({ran})")
    counts = [len(runs[1]), len(runs[2])]
    if missing:
        return no_verdict(counts, "; ".join(missing))
    try:
        return compare(runs[1], runs[2])
    except ValueError as exc:  # a time of 0: no ratio to take
        return no_verdict(counts, str(exc))


def repetitions(outcomes: Sequence[RunRecord]) -> list[dict[str, object]]:
    """``--repeat``: per job, the median and spread of its successful runs' wall
    times, and how many of its runs failed (``failed_runs``) or timed out
    (``timed_out_runs``): those are counted, never measured."""
    times: dict[int, list[RunRecord]] = {}
    for o in outcomes:
        if o.status != "aborted":
            times.setdefault(o.origin or o.seq, []).append(o)
    return [_job_statistics(job, runs) for job, runs in sorted(times.items())]


def _job_statistics(job: int, runs: list[RunRecord]) -> dict[str, object]:
    """One job's ``--repeat`` statistics: over its successful runs only."""
    import statistics  # only with --repeat: it costs a run's start-up ~10 ms

    good = [o for o in runs if o.status == "ok"]
    walls = sorted(o.runtime for o in good)
    median = statistics.median(walls) if walls else None
    measured = [o for o in good if not o.logged]  # the joblog has no CPU time
    flagged = sum(1 for o in good if noisy(o))
    spread = None
    if median is not None:
        spread = round((walls[-1] - walls[0]) / median, 6) if median else 0.0
    return {
        "job": job,
        "command": runs[0].command,
        "runs": len(walls),
        "failed_runs": sum(1 for o in runs if o.status != "ok" and not o.timed_out),
        "timed_out_runs": sum(1 for o in runs if o.status != "ok" and o.timed_out),
        "from_joblog": len(good) - len(measured),
        "median": round(median, 6) if median is not None else None,
        "min": round(walls[0], 6) if walls else None,
        "max": round(walls[-1], 6) if walls else None,
        "spread": spread,
        "user_median": (
            round(statistics.median(o.user for o in measured), 6) if measured else None
        ),
        "maxrss_max": max((o.maxrss for o in measured), default=None),
        "noisy_runs": flagged,
        "warnings": _instability(walls, flagged) if walls else [],
    }


def _repetition_lines(stats: list[dict[str, object]], repeat: int) -> list[str]:
    """``--repeat``: each job's median over the successful runs it had (after Ctrl-C or
    ``--halt`` some had fewer than N; with ``--resume`` the joblog's count too), and how
    many of its runs failed or timed out."""
    every = {st["runs"] for st in stats} == {repeat}
    if every:
        head = f"per job over {repeat} runs: median wall time (min-max, spread)"
    elif any(st["failed_runs"] or st["timed_out_runs"] for st in stats):
        head = f"per job, over its successful runs (of {repeat}): median wall time"
        head += " (min-max, spread)"
    else:
        head = f"per job, over the runs it had (of {repeat}): median wall time"
        head += " (min-max, spread)"
    found = [head, *(_repetition_line(st, every) for st in stats[:SHOWN])]
    if len(stats) > SHOWN:
        found.append(f"  ... and {len(stats) - SHOWN} more (see --json)")
    for st in stats:
        warnings = st["warnings"]
        for warning in warnings if isinstance(warnings, list) else ():
            found.append(f"  warning: job {st['job']} may be unstable: {warning}")
    return found


def _repetition_line(st: dict[str, object], every: bool) -> str:
    """A job's line under ``--repeat``'s head: its median (min-max, spread), and the runs
    it had when not every job had all N, the failed and timed-out ones, those read from
    the joblog."""
    notes = []
    runs = st["runs"]
    if not every and runs:
        notes.append(f"{runs} run{'' if runs == 1 else 's'}")
    if st["failed_runs"]:
        notes.append(f"{st['failed_runs']} failed")
    if st["timed_out_runs"]:
        notes.append(f"{st['timed_out_runs']} timed out")
    if st["from_joblog"]:
        notes.append(f"{st['from_joblog']} from the joblog")
    command = short(str(st["command"]))
    if not runs:
        return f"  job {st['job']:<5} no successful run ({', '.join(notes)})  {command}"
    return (
        f"  job {st['job']:<5} {st['median']:.3f} s ({st['min']:.3f}-{st['max']:.3f} s, "
        f"{st['spread']:.0%}{''.join(', ' + n for n in notes)})  {command}"
    )


def _instability(walls: list[float], noisy: int) -> list[str]:
    """pyperf's warnings for a result that may be unstable, for one job's wall times."""
    import statistics

    found = []
    mean = statistics.fmean(walls)
    if len(walls) < 3:
        found.append(f"only {len(walls)} run{'s' if len(walls) != 1 else ''}: too few to judge")
    elif mean > 0:
        stdev = statistics.stdev(walls)
        if stdev > 0.1 * mean:
            found.append(
                f"the standard deviation ({stdev:.3g} s) is {stdev / mean:.0%} of the mean"
            )
        if walls[-1] > 1.5 * mean:
            found.append(
                f"the maximum ({walls[-1]:.3g} s) is {walls[-1] / mean - 1:.0%} above the mean"
            )
        if walls[0] < 0.5 * mean:
            found.append(
                f"the minimum ({walls[0]:.3g} s) is {1 - walls[0] / mean:.0%} below the mean"
            )
    if walls and walls[0] < 0.001:
        found.append(f"the shortest run took {walls[0] * 1e6:.0f} us: start-up and timer dominate")
    if noisy:
        found.append(f"{noisy} of {len(walls)} runs were noisy")
    return found
