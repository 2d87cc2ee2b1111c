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

from .._cli_common import listing
from ..errors import TaskKilledError, TaskTimeoutError, WorkerLostError
from ._halt import Halt

if TYPE_CHECKING:
    from ._job import JobResult, JobSpec
    from ._seam import Measuring
    from ._template import Job

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
    measured: dict = field(default_factory=dict)  # the measuring room's part of its
    # record (its CPUs, noise, wait for quiet: Measuring.record)

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
            **self.measured,
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
    measuring: Measuring  # what it says of what was measured (the measuring room)
    skipped: int = 0  # already in the joblog (--resume)
    elapsed: float = 0.0
    jobs: int = 0  # -j
    stopped: str = ""  # why no further job started: "interrupted", "halt: ...", "terminated"
    outcomes: list[Outcome] = field(default_factory=list)
    halt: Halt = field(default_factory=Halt)
    halt_status: int | None = None  # the exit status decided when --halt's condition was met
    earlier: list[Outcome] = field(default_factory=list)  # --resume: the joblog's rows of
    # the jobs skipped, for the measuring room's statistics (not counted as run now)

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
            lines += listing(self.aborted, lambda o: o.describe())
        failed = self.failed
        if failed:
            lines.append(f"failed ({len(failed)}):")
            lines += listing(failed, lambda o: o.describe())
        slowest = self.slowest()
        if len(self.outcomes) > 1 and slowest:
            lines.append("slowest:")
            lines += listing(slowest, lambda o: f"{o.runtime:.3f} s ({o.usage()})")
        hungriest = self.hungriest()
        if len(self.outcomes) > 1 and hungriest:
            lines.append("most memory:")
            lines += listing(hungriest, lambda o: f"{_mib(o.maxrss)} max RSS")
        lines += self.measuring.summary_lines(self.outcomes, self.earlier)
        lines.append(f"exit status {self.exit_status()}")
        return "\n".join(lines) + "\n"

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
            **self.measuring.summary_fields(self.outcomes, self.earlier),
            "records": [o.as_dict() for o in sorted(self.outcomes, key=_by_seq)],
        }


def _by_seq(o: Outcome) -> int:
    return o.seq


def _signame(number: int) -> str:
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"
