"""``Measurement``: the measuring room's side of ``pipepool run``, one object per run.

The runner calls it through what ``run/_seam.py`` declares (plan the CPU slots, the
probe each job's worker runs around the job, the joblog's columns, the summary's lines
and keys, give the CPUs back); the command line calls the rest (check the exports'
paths before the run, write them after it, the machine's metadata, ``--show-plan``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ._options import MeasureOptions
from ._report import RunRecord, noisy

if TYPE_CHECKING:
    from ._export import ExportedRun
    from ._placement import Plan
    from ._probe import Probe


class Measurement:
    def __init__(self, options: MeasureOptions | None = None) -> None:
        self.options = options = options or MeasureOptions()
        self.pinned = options.cpus_per_job is not None
        # noise is sampled for benchmark runs (--pin, --repeat): a plain run is untouched
        self.noise = self.pinned or options.repeat > 1
        self.columns = ("CPUs",) * self.pinned + ("Noisy",) * self.noise
        self.keeps_history = options.repeat > 1
        self._release: Callable[[], None] | None = None  # the CPU leases (--pin)

    # -- what the runner calls (run/_seam.py) ------------------------------------------------

    def plan(self, jobs: int, note: Callable[[str], None]) -> Plan | None:
        if not self.pinned:
            return None
        from ._slots import pinned_plan

        placed, leases = pinned_plan(self.options, jobs, note)
        self._release = leases.release if leases is not None else None
        return placed

    def probe(self, cpus: tuple[int, ...] | None, jobs: int) -> Probe | None:
        o = self.options
        if cpus is None and not self.noise and o.wait_quiet is None:
            return None
        from ._probe import Probe

        return Probe(
            cpus,
            self.noise,
            o.noise_threshold,
            o.wait_quiet,
            allowance=0 if cpus is not None else jobs - 1,
            stat=o.proc_stat,
        )

    def record(self, cpus: tuple[int, ...] | None, measured: dict | None) -> dict[str, object]:
        if measured is not None:
            return measured
        from ._probe import record

        return record(cpus)

    def column_values(self, outcome: RunRecord) -> tuple[str, ...]:
        values = []
        if self.pinned:
            values.append(",".join(map(str, outcome.measured.get("cpus") or ())))
        if self.noise:
            flag = noisy(outcome)
            values.append("-" if flag is None else str(int(flag)))
        return tuple(values)

    def summary_lines(
        self, outcomes: Sequence[RunRecord], earlier: Sequence[RunRecord]
    ) -> list[str]:
        from ._report import lines

        return lines(outcomes, earlier, self.options.repeat, self.options.compare)

    def summary_fields(
        self, outcomes: Sequence[RunRecord], earlier: Sequence[RunRecord]
    ) -> dict[str, object]:
        from ._report import fields

        return fields(outcomes, earlier, self.options.repeat, self.options.compare)

    def close(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None

    # -- what the command line calls ------------------------------------------------------

    def check_outputs(self) -> None:
        """The exports' paths, checked before the first job (OutputPathError)."""
        from .._cli_common import check_file

        for option, path in self._exports():
            check_file(option, path)

    def export(self, outcomes: Sequence[ExportedRun]) -> list[str]:
        """``--export-pyperf`` / ``--export-hyperfine``: the run's times in their formats;
        what could not be written, each naming its option (the other is still written)."""
        from .._cli_common import OutputPathError
        from ._export import hyperfine_document, pyperf_document, write_json
        from ._machine import machine_metadata

        documents = {
            "--export-pyperf": lambda: pyperf_document(outcomes, machine_metadata()),
            "--export-hyperfine": lambda: hyperfine_document(outcomes),
        }
        failures = []
        for option, path in self._exports():
            try:
                write_json(path, documents[option]())
            except OSError as exc:
                failures.append(str(OutputPathError(option, path, exc)))
        return failures

    def _exports(self) -> list[tuple[str, str]]:
        o = self.options
        given = (("--export-pyperf", o.export_pyperf), ("--export-hyperfine", o.export_hyperfine))
        return [(option, path) for option, path in given if path]
