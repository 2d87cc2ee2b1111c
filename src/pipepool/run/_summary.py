"""What a run did, for people (``text``) and for programs (``as_dict``), and its exit status;
and each attempt's ``Outcome``, from its worker's report or from why there was none.

Exit status, as GNU parallel: 0 when every job succeeded, else the number of failed jobs
capped at 101; with ``--halt``, what the halt condition decided (``_halt``). A run
stopped by Ctrl-C exits 130 (SIGTERM: 143), whatever else happened, because its jobs did
not all run; 255 means the run could not start at all.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import TaskKilledError, TaskTimeoutError, WorkerLostError
from ._halt import Halt

if TYPE_CHECKING:
    from ._job import JobResult, JobSpec
    from ._template import Job

SHOWN_FAILURES = 20  # failures listed by name in the text summary (all are in the JSON)
SHOWN_SLOWEST = 5


@dataclass(slots=True)
class Outcome:
    """The final outcome of one job (after its retries)."""

    seq: int
    command: str
    status: str  # "ok", "failed", or "aborted" (killed by the runner: Ctrl-C, halt now)
    exitval: int = 0
    signal: int = 0
    timed_out: bool = False
    runtime: float = 0.0
    attempts: int = 1
    error: str = ""  # the pool's own words when the job did not end by itself
    user: float = 0.0  # CPU seconds of the job's whole process tree (its last attempt)
    sys: float = 0.0
    maxrss: int = 0  # bytes: the largest peak RSS of a process in the tree
    origin: int = 0  # the job's number within one repetition (--repeat)
    rep: int = 1
    start: float = 0.0  # epoch seconds
    oom: str = ""  # SIGKILL (or exit 137) while a count of OOM kills rose: how it rose
    logged: bool = False  # read back from the joblog (--resume): no CPU time or RSS known
    cpus: tuple[int, ...] | None = None  # --pin: the CPUs its slot was pinned to
    noise: dict | None = None  # what else ran meanwhile (_noise.measure), if measured
    quiet: dict | None = None  # --wait-quiet: the wait before it started (_quiet)

    @property
    def noisy(self) -> bool | None:
        """Whether others disturbed the job (None: not measured)."""
        return None if not self.noise else bool(self.noise.get("noisy"))

    def describe(self) -> str:
        if self.status == "aborted":
            return "killed by the runner"
        if self.timed_out:
            return f"timed out ({_signame(self.signal)})"
        if self.error:  # the pool's words: its worker died (or --memfree), not the job;
            return self.error.split(" (", 1)[0]  # the details are in --json's "error"
        if self.oom and self.signal:
            return f"the job was killed by the kernel's OOM killer ({self.oom})"
        if self.oom:  # a shell's 137: the process the OOM killer chose was its child
            return (
                f"exit {self.exitval}, a process of the job killed by the kernel's OOM "
                f"killer ({self.oom})"
            )
        if self.signal:
            return f"the job was killed by {_signame(self.signal)}"
        return f"exit {self.exitval}"

    def as_dict(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "command": self.command,
            "status": self.status,
            "exitval": self.exitval,
            "signal": self.signal,
            "signal_name": _signame(self.signal) if self.signal else None,
            "timed_out": self.timed_out,
            "runtime": round(self.runtime, 6),
            "attempts": self.attempts,
            "error": self.error or None,
            "oom": self.oom or None,
            "start": round(self.start, 6),
            "user": round(self.user, 6),
            "sys": round(self.sys, 6),
            "maxrss": self.maxrss,
            "job": self.origin or self.seq,
            "rep": self.rep,
            "cpus": list(self.cpus) if self.cpus is not None else None,
            "noisy": self.noisy,
            "noise": self.noise or None,
            "wait_quiet": self.quiet,
        }

    def usage(self) -> str:
        return f"user {self.user:.2f} s, sys {self.sys:.2f} s, max RSS {_mib(self.maxrss)}"


def job_outcome(job: Job, spec: JobSpec, result: JobResult) -> Outcome:
    """The outcome of an attempt its worker reported: the job's own exit."""
    return Outcome(
        job.seq,
        job.command,
        "ok" if result.ok else "failed",
        result.exitval,
        result.signal,
        result.timed_out,
        result.runtime,
        spec.attempt,
        user=result.user,
        sys=result.sys,
        maxrss=result.maxrss,
        oom=result.oom,
    )


def lost_outcome(job: Job, spec: JobSpec, exc: BaseException | None, runtime: float) -> Outcome:
    """The outcome of an attempt whose worker did not report back."""
    if isinstance(exc, TaskKilledError):
        return Outcome(
            job.seq, job.command, "aborted", -1, _signal.SIGKILL, False, runtime, spec.attempt
        )
    if isinstance(exc, TaskTimeoutError):
        return Outcome(
            job.seq, job.command, "failed", -1, _signal.SIGKILL, True, runtime, spec.attempt
        )
    sig = 0
    if isinstance(exc, WorkerLostError) and exc.exitcode is not None and exc.exitcode < 0:
        sig = -exc.exitcode
    if isinstance(exc, WorkerLostError):  # "its worker pid N was killed by ...": not the job
        reason = f"its {exc}"
    else:
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else "lost"
    return Outcome(
        job.seq,
        job.command,
        "failed",
        -1,
        sig,
        False,
        runtime,
        spec.attempt,
        error=reason.splitlines()[0][:200],
    )


@dataclass(slots=True)
class Summary:
    total: int  # jobs in the input
    skipped: int = 0  # already in the joblog (--resume)
    elapsed: float = 0.0
    jobs: int = 0  # -j
    stopped: str = ""  # why no further job started: "interrupted", "halt: ...", "terminated"
    outcomes: list[Outcome] = field(default_factory=list)
    repeat: int = 1  # --repeat N: each job ran N times
    halt: Halt = field(default_factory=Halt)
    halt_status: int | None = None  # the exit status decided when --halt's condition was met
    compare: bool = False  # --compare: the two jobs' ratio, interval and verdict
    earlier: list[Outcome] = field(default_factory=list)  # --resume: the joblog's rows of
    # the jobs skipped, for the per-job statistics of --repeat (not counted as run now)

    @property
    def succeeded(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "ok"]

    @property
    def failed(self) -> list[Outcome]:
        return sorted((o for o in self.outcomes if o.status == "failed"), key=_by_seq)

    @property
    def aborted(self) -> list[Outcome]:
        return sorted((o for o in self.outcomes if o.status == "aborted"), key=_by_seq)

    @property
    def not_run(self) -> int:
        return self.total - self.skipped - len(self.outcomes)

    def exit_status(self) -> int:
        if self.stopped == "interrupted":
            return 128 + _signal.SIGINT
        if self.stopped == "terminated":
            return 128 + _signal.SIGTERM
        if self.halt_status is not None:
            return self.halt_status
        return self.halt.status_not_reached(failed=len(self.failed), ran=len(self.outcomes))

    def slowest(self, n: int = SHOWN_SLOWEST) -> list[Outcome]:
        ran = [o for o in self.outcomes if o.status != "aborted"]
        return sorted(ran, key=lambda o: -o.runtime)[:n]

    def hungriest(self, n: int = SHOWN_SLOWEST) -> list[Outcome]:
        ran = [o for o in self.outcomes if o.status != "aborted" and o.maxrss]
        return sorted(ran, key=lambda o: -o.maxrss)[:n]

    def repetitions(self) -> list[dict[str, object]]:
        """``--repeat``: per job, the median and spread of its successful runs' wall
        times, and how many of its runs failed (``failed_runs``) or timed out
        (``timed_out_runs``): those are counted, never measured."""
        times: dict[int, list[Outcome]] = {}
        for o in [*self.earlier, *self.outcomes]:
            if o.status != "aborted":
                times.setdefault(o.origin or o.seq, []).append(o)
        return [_job_statistics(job, runs) for job, runs in sorted(times.items())]

    def text(self) -> str:
        ran = len(self.outcomes)
        rate = ran / self.elapsed if self.elapsed > 0 else 0.0
        head = (
            f"pipepool run: {ran} job{'' if ran == 1 else 's'} in {self.elapsed:.2f} s "
            f"({rate:.1f} jobs/s, "
            f"-j {self.jobs}): {len(self.succeeded)} succeeded, {len(self.failed)} failed"
        )
        lines = [head]
        if self.skipped:
            lines.append(f"  skipped {self.skipped} already in the joblog (--resume)")
        if self.stopped:
            lines.append(f"  stopped early ({self.stopped}): {self.not_run} not started")
        if self.aborted:
            lines.append(
                f"  killed by the runner: {len(self.aborted)} (no joblog row; "
                "--resume runs them again)"
            )
            lines += _listing(self.aborted, lambda o: o.describe())
        failed = self.failed
        if failed:
            lines.append(f"failed ({len(failed)}):")
            lines += _listing(failed, lambda o: o.describe())
        slowest = self.slowest()
        if len(self.outcomes) > 1 and slowest:
            lines.append("slowest:")
            lines += _listing(slowest, lambda o: f"{o.runtime:.3f} s ({o.usage()})")
        hungriest = self.hungriest()
        if len(self.outcomes) > 1 and hungriest:
            lines.append("most memory:")
            lines += _listing(hungriest, lambda o: f"{_mib(o.maxrss)} max RSS")
        judged = [o for o in self.outcomes if o.noisy is not None]
        if judged:
            noisy = sorted((o for o in judged if o.noisy), key=_by_seq)
            lines.append(
                f"noisy: {len(noisy)} of {len(judged)} jobs had others on their CPUs or a "
                "busy machine" + (" (see --json's noise)" if noisy else "")
            )
            if noisy:
                lines += _listing(noisy, lambda o: str((o.noise or {}).get("why") or ""))
        waits = self.quiet_waits()
        if waits is not None:
            lines.append(
                f"wait for quiet: {waits['held']} of {waits['jobs']} jobs found their CPUs "
                f"busy and waited; {waits['seconds']:.2f} s in all; {waits['not_quiet']} "
                "started without quiet (--wait-quiet's bound ran out)"
            )
        if self.repeat > 1:
            lines += self._repetition_lines()
        comparison = self.comparison()
        if comparison is not None:
            from ._compare import describe

            commands = {st["job"]: str(st["command"]) for st in self.repetitions()}
            a, b = (_short(commands.get(side, "(did not run)")) for side in (1, 2))
            lines += describe(comparison, a, b)
        lines.append(f"exit status {self.exit_status()}")
        return "\n".join(lines) + "\n"

    def quiet_waits(self) -> dict[str, object] | None:
        """``--wait-quiet``: how many jobs found their CPUs busy (``held``: more than one
        look), how long all waited, how many started only because the bound ran out
        (None: not asked)."""
        waits = [o.quiet for o in self.outcomes if o.quiet is not None]
        if not waits:
            return None
        return {
            "jobs": len(waits),
            "held": sum(1 for w in waits if w["looks"] > 1 or w["quiet"] is False),
            "seconds": round(sum(w["waited"] for w in waits), 3),
            "not_quiet": sum(1 for w in waits if w["quiet"] is False),
        }

    def comparison(self) -> dict[str, object] | None:
        """``--compare``: B (the second job) against A (the first), over their successful
        runs; without a verdict (``verdict`` null) when a side has none, ``why`` says so."""
        if not self.compare:
            return None
        from ._compare import compare, no_verdict

        runs: dict[int, list[float]] = {1: [], 2: []}
        failed = {1: 0, 2: 0}
        for o in self.outcomes:
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

    def _repetition_lines(self) -> list[str]:
        """``--repeat``: each job's median over the successful runs it had (after Ctrl-C
        or ``--halt`` some had fewer than N; with ``--resume`` the joblog's count too),
        and how many of its runs failed or timed out."""
        stats = self.repetitions()
        every = {st["runs"] for st in stats} == {self.repeat}
        if every:
            head = f"per job over {self.repeat} runs: median wall time (min-max, spread)"
        elif any(st["failed_runs"] or st["timed_out_runs"] for st in stats):
            head = f"per job, over its successful runs (of {self.repeat}): median wall time"
            head += " (min-max, spread)"
        else:
            head = f"per job, over the runs it had (of {self.repeat}): median wall time"
            head += " (min-max, spread)"
        lines = [head]
        lines += [_repetition_line(st, every) for st in stats[:SHOWN_FAILURES]]
        if len(stats) > SHOWN_FAILURES:
            lines.append(f"  ... and {len(stats) - SHOWN_FAILURES} more (see --json)")
        for st in stats:
            warnings = st["warnings"]
            for warning in warnings if isinstance(warnings, list) else ():
                lines.append(f"  warning: job {st['job']} may be unstable: {warning}")
        return lines

    def as_dict(self) -> dict[str, object]:
        return {
            "total": self.total,
            "ran": len(self.outcomes),
            "succeeded": len(self.succeeded),
            "failed": len(self.failed),
            "aborted": len(self.aborted),
            "not_run": self.not_run,
            "skipped": self.skipped,
            "elapsed": round(self.elapsed, 6),
            "jobs": self.jobs,
            "stopped": self.stopped or None,
            "exit_status": self.exit_status(),
            "failures": [o.as_dict() for o in self.failed],
            "aborted_jobs": [o.as_dict() for o in self.aborted],
            "slowest": [o.as_dict() for o in self.slowest()],
            "most_memory": [o.as_dict() for o in self.hungriest()],
            "noisy": sum(1 for o in self.outcomes if o.noisy),
            "wait_quiet": self.quiet_waits(),
            "repeat": self.repeat,
            "repetitions": self.repetitions() if self.repeat > 1 else None,
            "comparison": self.comparison(),
            "records": [o.as_dict() for o in sorted(self.outcomes, key=_by_seq)],
        }


def _job_statistics(job: int, runs: list[Outcome]) -> dict[str, object]:
    """One job's ``--repeat`` statistics: over its successful runs only."""
    import statistics  # only with --repeat: it costs a run's start-up ~10 ms

    good = [o for o in runs if o.status == "ok"]
    walls = sorted(o.runtime for o in good)
    median = statistics.median(walls) if walls else None
    measured = [o for o in good if not o.logged]  # the joblog has no CPU time
    noisy = sum(1 for o in good if o.noisy)
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
        "noisy_runs": noisy,
        "warnings": _instability(walls, noisy) if walls else [],
    }


def _repetition_line(st: dict[str, object], every: bool) -> str:
    """A job's line under ``--repeat``'s head: its median (min-max, spread), and the runs
    it had when not all N had every job, the failed and timed-out ones, those read from
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
    command = _short(str(st["command"]))
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


def _listing(outcomes: list[Outcome], what) -> list[str]:
    shown = outcomes[:SHOWN_FAILURES]
    width = max(len(what(o)) for o in shown)
    lines = [f"  #{o.seq:<5} {what(o):<{width}}  {_short(o.command)}" for o in shown]
    if len(outcomes) > len(shown):
        lines.append(f"  ... and {len(outcomes) - len(shown)} more (see --joblog or --json)")
    return lines


def _short(command: str, limit: int = 60) -> str:
    command = command.replace("\n", "\\n")
    return command if len(command) <= limit else command[: limit - 3] + "..."


def _by_seq(o: Outcome) -> int:
    return o.seq


def _signame(number: int) -> str:
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"
