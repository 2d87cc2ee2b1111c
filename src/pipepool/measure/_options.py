"""The measuring options of ``pipepool run``: their own group of its parser, and the
record they become (``MeasureOptions``), with the usage rules between them."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from .._cli_common import bound, positive_int


class MeasureError(ValueError):
    """The measuring options cannot be honoured here (a message for the user)."""


# The options that take a number, negative ones included: the entry point joins such a
# value to its option (``--repeat=-1``), so it is refused for its value, not taken for
# an option (``run/_compat.join_negative_values``).
NUMBER_OPTIONS = ("--cpus-per-job", "--noise-threshold", "--wait-quiet", "--repeat")
TITLE = "measuring (benchmark suites: pinned CPUs, noise, repetitions, comparisons, exports)"


@dataclass(frozen=True, slots=True)
class MeasureOptions:
    """What ``pipepool run`` was asked to measure."""

    cpus_per_job: int | None = None  # --pin (1) or --cpus-per-job K
    pin_reserve: bool = False  # --pin-reserve: a core left for pipepool itself
    lease: str = "wait"  # --lease: wait for CPUs other runs hold, "fail", or "ignore"
    noise_threshold: float = 0.5  # --noise-threshold: contention above it is noisy
    wait_quiet: float | None = None  # --wait-quiet MAX: s a job may wait for quiet CPUs
    show_plan: bool = False
    sysfs_root: str | None = None  # --show-plan of a tree captured from another machine
    repeat: int = 1
    compare: bool = False  # --compare: the two jobs' ratio with its interval
    export_pyperf: str | None = None
    export_hyperfine: str | None = None
    proc_stat: str | None = None  # what --wait-quiet reads in place of /proc/stat (tests)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MeasureOptions:
        return cls(
            cpus_per_job=args.cpus_per_job,
            pin_reserve=args.pin_reserve,
            lease=args.lease,
            noise_threshold=args.noise_threshold,
            wait_quiet=args.wait_quiet,
            show_plan=args.show_plan,
            sysfs_root=args.sysfs_root,
            repeat=args.repeat,
            compare=args.compare,
            export_pyperf=args.export_pyperf,
            export_hyperfine=args.export_hyperfine,
        )

    @property
    def local_only(self) -> list[str]:
        """The options given that act on this machine (refused with ``--cluster``)."""
        return ["--pin"] if self.cpus_per_job else []

    def usage_error(self) -> str | None:
        """What is wrong with these options together (None: nothing)."""
        if (self.show_plan or self.pin_reserve) and not self.cpus_per_job:
            return "--show-plan and --pin-reserve go with --pin or --cpus-per-job K"
        if self.sysfs_root and not self.show_plan:
            return "--sysfs-root reads another machine's topology: only with --show-plan"
        return None

    def jobs_error(self, jobs: int) -> str | None:
        """What is wrong with running ``jobs`` jobs (their repetitions counted) so."""
        if self.compare and (jobs != 2 * self.repeat or self.repeat < 2):
            return (
                f"--compare needs exactly two jobs (A and B) and --repeat N of at least 2; "
                f"got {jobs // max(self.repeat, 1)} job(s) and --repeat {self.repeat}"
            )
        return None


def add_options(parser: argparse.ArgumentParser) -> None:
    """Add the measuring options to ``pipepool run``'s parser, as a group of their own."""
    group = parser.add_argument_group(TITLE)
    _add_pinning(group)
    _add_noise(group)
    _add_repetitions(group)


def _add_pinning(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--pin",
        dest="cpus_per_job",
        action="store_const",
        const=1,
        help="give each job slot its own core (from the cores this process may use) "
        "and pin every job in it, its children included; -j at most the cores",
    )
    group.add_argument(
        "--cpus-per-job",
        dest="cpus_per_job",
        type=positive_int,
        metavar="K",
        help="as --pin, with K cores per job slot; -j at most cores/K",
    )
    group.add_argument(
        "--pin-reserve",
        action="store_true",
        help="with --pin: leave one core (an E-core if any) to pipepool itself, so the "
        "runner and its workers do not share the jobs' CPUs",
    )
    group.add_argument(
        "--lease",
        choices=("wait", "fail", "ignore"),
        default="wait",
        help="with --pin: CPUs another pipepool run has pinned are not used; too few "
        "free ones: wait for them (default), fail at once, or ignore the leases",
    )
    group.add_argument(
        "--show-plan",
        action="store_true",
        help="print which CPUs each job slot of --pin/--cpus-per-job gets and what the "
        "slots share (cores, L3, NUMA node), then exit without running anything",
    )
    group.add_argument(
        "--sysfs-root",
        metavar="DIR",
        help="with --show-plan: read the topology from DIR/sys and DIR/proc (a tree "
        "captured from another machine) instead of this machine's",
    )


def _add_noise(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--noise-threshold",
        type=_fraction,
        default=0.5,
        metavar="F",
        help="with --pin or --repeat: call a job noisy when others took more than F "
        "(0-1) of its CPUs' time while it was not running (default 0.5)",
    )
    group.add_argument(
        "--wait-quiet",
        type=bound,
        metavar="MAX",
        help="before each job starts, wait until others use at most a quarter of its "
        "CPUs' time (its --pin CPUs, else all; /proc/stat over 0.25 s), at most MAX "
        "(seconds or 1m30s); --json's records say how long each waited",
    )


def _add_repetitions(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        metavar="N",
        help="run every job N times, the repetitions interleaved (all jobs, then all "
        "again); the summary gives each job's median and spread of wall time",
    )
    group.add_argument(
        "--compare",
        action="store_true",
        help="A/B: exactly two jobs (two commands, or one command with two values) and "
        "--repeat N; report B's median over A's with a 95%% bootstrap interval and a "
        "verdict ('no difference' when the interval holds 1)",
    )
    group.add_argument(
        "--export-pyperf",
        metavar="FILE",
        help="write every run's wall time to FILE in pyperf's JSON format (pyperf "
        "show/stats/compare_to read it), with the machine's metadata",
    )
    group.add_argument(
        "--export-hyperfine",
        metavar="FILE",
        help="write every job's times to FILE as hyperfine's --export-json does",
    )


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 1") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, not {text}")
    return value
