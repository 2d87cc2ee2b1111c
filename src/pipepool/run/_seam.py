"""The measuring room as the runner uses it, declared: ``Measuring`` is every call the
runner makes on it, ``Probe`` every call a job's worker makes on what it sends along,
and ``Placement`` what a pinned plan gives. ``pipepool.measure.Measurement`` satisfies
them; the runner is typed against these and nothing else of that room, so a measuring
option (its flag, what a worker samples, a joblog column, a summary line, a JSON key)
is added in ``measure/`` alone (docs/design.md, "Layout").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._summary import Outcome


class Placement(Protocol):
    """The CPUs of each job slot (slot s has ``slots[s - 1]``), and those left to the
    runner and its workers (``--pin-reserve``; empty: none)."""

    @property
    def slots(self) -> list[tuple[int, ...]]: ...
    @property
    def reserved(self) -> tuple[int, ...]: ...


class Probe(Protocol):
    """What a worker does around one attempt of a job. It travels in the job's spec
    (pickled), a copy per attempt, so it may keep what it sampled on itself."""

    @property
    def wait(self) -> float:
        """Seconds it may wait before the job starts (the executor's backstop allows
        for them)."""
        ...

    def prepare(self) -> bool:
        """Before the job: pin this worker, wait for quiet; True if it waited (the
        job's start is stamped after the wait)."""
        ...

    def start(self) -> None:
        """Just before the job is forked."""
        ...

    def finish(self, cpu_time: float | None) -> dict[str, object]:
        """After the job was reaped, ``cpu_time`` its whole tree's CPU seconds (None:
        it never started): the attempt's measured record."""
        ...


class Measuring(Protocol):
    """Every call the runner makes on the measuring room."""

    @property
    def columns(self) -> tuple[str, ...]:
        """The joblog's columns after GNU parallel's nine."""
        ...

    @property
    def keeps_history(self) -> bool:
        """Whether its statistics count the joblog's rows of the jobs ``--resume``
        skips (the runner then reads them back)."""
        ...

    def plan(self, jobs: int, note: Callable[[str], None]) -> Placement | None:
        """The CPUs of ``jobs`` job slots, held for this run until ``close``, or None
        when jobs are not pinned; ValueError (a message for the user) if they cannot
        be. ``note``: what to tell the user while it waits for CPUs."""
        ...

    def probe(self, cpus: tuple[int, ...] | None, jobs: int) -> Probe | None:
        """What the worker of a job in a slot of ``cpus`` (None: unpinned) does around
        it, ``jobs`` running at once; None: nothing."""
        ...

    def record(self, cpus: tuple[int, ...] | None, measured: dict | None) -> dict[str, object]:
        """The measured part of a job's JSON record: ``measured`` (what its probe
        found), or for an attempt that reported nothing, what is known without it."""
        ...

    def column_values(self, outcome: Outcome) -> tuple[str, ...]:
        """A finished job's values of ``columns``."""
        ...

    def summary_lines(self, outcomes: Sequence[Outcome], earlier: Sequence[Outcome]) -> list[str]:
        """The summary's lines about what was measured, before its exit status;
        ``earlier``: the joblog's outcomes of the jobs ``--resume`` skipped."""
        ...

    def summary_fields(
        self, outcomes: Sequence[Outcome], earlier: Sequence[Outcome]
    ) -> dict[str, object]:
        """The JSON summary's keys about what was measured, before its records."""
        ...

    def close(self) -> None:
        """The run is over: give back what ``plan`` holds."""
        ...
