"""``--repeat``'s statistics are over the successful runs only: a failed or timed-out run
is counted, by kind, in the summary and in the JSON, and never enters a median; a job
with no successful run has no median and says why."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_cli

# Job 1 runs as seq 1, 3, 5 (two jobs, interleaved): the third run fails, the fifth runs
# past --timeout; job 2 (seq 2, 4, 6) always fails.
JOB_1 = "sleep 0.05; case $PARALLEL_SEQ in 3) exit 4;; 5) sleep 30;; esac"
JOB_2 = "exit 3"


def test_failed_and_timed_out_runs_are_counted_not_measured(tmp_path: Path) -> None:
    proc = run_cli(
        "run", "-j", "1", "--repeat", "3", "--timeout", "1", "--json",
        ":::", JOB_1, JOB_2, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 5, proc.stderr  # runs 3, 5 of job 1 and all three of job 2
    summary = json.loads(proc.stdout.splitlines()[-1])
    stats = {s["job"]: s for s in summary["repetitions"]}
    first = {r["seq"]: r for r in summary["records"]}[1]
    one, two = stats[1], stats[2]
    assert (one["runs"], one["failed_runs"], one["timed_out_runs"]) == (1, 1, 1), one
    # the median is the one good run's time, not the 1 s of the run that timed out
    assert one["median"] == one["min"] == one["max"] == round(first["runtime"], 6), one
    assert one["median"] < 0.9, one
    assert (two["runs"], two["failed_runs"], two["timed_out_runs"]) == (0, 3, 0), two
    assert two["median"] is None and two["min"] is None and two["spread"] is None, two
    lines = {
        line.split()[1]: line for line in proc.stderr.splitlines() if line.startswith("  job ")
    }
    assert "1 failed, 1 timed out" in lines["1"], proc.stderr
    assert "no successful run (3 failed)" in lines["2"], proc.stderr
    assert "over its successful runs (of 3)" in proc.stderr, proc.stderr
