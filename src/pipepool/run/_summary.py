"""What a run did, for people (``text``) and for programs (``as_dict``), and its exit status.

Exit status, as GNU parallel: 0 when every job succeeded, else the number of failed jobs
capped at 101. A run stopped by Ctrl-C exits 130 (SIGTERM: 143), whatever else happened,
because its jobs did not all run; 255 means the run could not start at all.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass, field

MAX_EXIT = 101  # GNU parallel: "101: more than 100 jobs failed"
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

    def describe(self) -> str:
        if self.status == "aborted":
            return "killed by the runner"
        if self.timed_out:
            return f"timed out ({_signame(self.signal)})"
        if self.signal:
            return f"killed by {_signame(self.signal)}"
        if self.error:
            return self.error
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
        }


@dataclass(slots=True)
class Summary:
    total: int  # jobs in the input
    skipped: int = 0  # already in the joblog (--resume)
    elapsed: float = 0.0
    jobs: int = 0  # -j
    stopped: str = ""  # why no further job started: "interrupted", "halt: ...", "terminated"
    outcomes: list[Outcome] = field(default_factory=list)

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
        return min(len(self.failed), MAX_EXIT)

    def slowest(self, n: int = SHOWN_SLOWEST) -> list[Outcome]:
        ran = [o for o in self.outcomes if o.status != "aborted"]
        return sorted(ran, key=lambda o: -o.runtime)[:n]

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
            lines += _listing(slowest, lambda o: f"{o.runtime:.3f} s")
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
        }


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
