"""Every run's times in files other tools read: pyperf's JSON (``pyperf show``,
``pyperf stats``, ``pyperf compare_to`` read it) and hyperfine's ``--export-json``.

One benchmark per job (the job's command; with ``--repeat`` its runs are the
repetitions), wall time in seconds. pyperf's format has no place for a failed run: it
gets the successful runs. hyperfine's has one: it gets every run that ended, with its
exit code (128 + N for a run signal N ended, the timeout's included), as ``hyperfine
--ignore-failure`` writes them. The machine's metadata goes into pyperf's common
metadata.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Protocol

from ._report import RunRecord, noisy


class ExportedRun(RunRecord, Protocol):
    """A run as the exports read it: its record, and when and how it ended."""

    @property
    def start(self) -> float: ...  # epoch seconds
    @property
    def sys(self) -> float: ...
    @property
    def exitval(self) -> int: ...
    @property
    def signal(self) -> int: ...


def _by_job(outcomes: Sequence[ExportedRun], *, failed: bool = False) -> list[list[ExportedRun]]:
    """Each job's runs in run order: the successful ones (``failed``: every one that
    ended, the runner's kills left out)."""
    jobs: dict[int, list[ExportedRun]] = {}
    for o in sorted(outcomes, key=lambda o: o.seq):
        if o.status == "ok" or (failed and o.status == "failed"):
            jobs.setdefault(o.origin or o.seq, []).append(o)
    return [jobs[k] for k in sorted(jobs)]


def pyperf_document(outcomes: Sequence[ExportedRun], machine: dict[str, object]) -> dict:
    """pyperf's format 1.0: {"version", "metadata", "benchmarks": [{"metadata",
    "runs": [{"metadata", "values"}]}]}."""
    benchmarks = []
    names: dict[str, int] = {}
    for runs in _by_job(outcomes):
        name = runs[0].command
        names[name] = names.get(name, 0) + 1
        if names[name] > 1:  # pyperf's names are unique in a suite
            name = f"{name} #{names[name]}"
        benchmarks.append(
            {
                "metadata": {"name": name, "unit": "second", "loops": 1},
                "runs": [
                    {
                        "metadata": _run_metadata(o),
                        "values": [max(o.runtime, 1e-9)],
                    }
                    for o in runs
                ],
            }
        )
    common = {k: v for k, v in machine.items() if isinstance(v, (str, int))}
    return {"version": "1.0", "metadata": common, "benchmarks": benchmarks}


def _run_metadata(o: ExportedRun) -> dict[str, object]:
    meta: dict[str, object] = {"date": _date(o.start), "duration": round(o.runtime, 9)}
    cpus = o.measured.get("cpus")
    if cpus:
        from ._placement import cpu_list

        meta["cpu_affinity"] = cpu_list(cpus)
    flag = noisy(o)
    if flag is not None:
        meta["pipepool_noisy"] = str(flag).lower()
    return meta


def hyperfine_document(outcomes: Sequence[ExportedRun]) -> dict:
    """hyperfine's --export-json: {"results": [{"command", "mean", "stddev", "median",
    "user", "system", "min", "max", "times", "exit_codes"}]}."""
    results = []
    for runs in _by_job(outcomes, failed=True):
        times = [o.runtime for o in runs]
        results.append(
            {
                "command": runs[0].command,
                "mean": statistics.fmean(times),
                "stddev": statistics.stdev(times) if len(times) > 1 else None,
                "median": statistics.median(times),
                "user": statistics.fmean(o.user for o in runs),
                "system": statistics.fmean(o.sys for o in runs),
                "min": min(times),
                "max": max(times),
                "times": times,
                "exit_codes": [_exit_code(o) for o in runs],
            }
        )
    return {"results": results}


def _exit_code(o: ExportedRun) -> int | None:
    """The run's exit code as hyperfine records it: 128 + N where signal N ended it (the
    timeout's included); None where none is known (its worker was lost)."""
    if o.signal:
        return 128 + o.signal
    return o.exitval if o.exitval >= 0 else None


def write_json(path: str, document: dict) -> None:
    with open(path, "w") as f:
        json.dump(document, f, indent=2)
        f.write("\n")


def _date(epoch: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(epoch).isoformat(timespec="seconds")
