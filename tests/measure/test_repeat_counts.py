"""``--repeat``'s per-job statistics count the runs each job had: fewer than N after a
stop (``--halt``, Ctrl-C), and with ``--resume`` the rows already in the joblog too."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_cli


def stats(proc) -> dict[int, dict]:
    return {s["job"]: s for s in json.loads(proc.stdout.splitlines()[-1])["repetitions"]}


def test_a_stopped_run_reports_the_runs_each_job_had(tmp_path: Path) -> None:
    log = tmp_path / "log"
    args = ["run", "-j", "1", "--repeat", "3", "--joblog", str(log), "--json"]
    proc = run_cli(*args, "--halt", "soon,done=3", "true {}", ":::", "a", "b")
    ran = stats(proc)
    assert {job: s["runs"] for job, s in ran.items()} == {1: 2, 2: 1}, ran
    assert "per job over 3 runs" not in proc.stderr, proc.stderr
    assert "per job, over the runs it had (of 3)" in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("  job ")]
    assert ", 2 runs)" in lines[0] and ", 1 run)" in lines[1], lines

    # --resume: the three rows in the joblog count with the three runs made now
    proc = run_cli(*args, "--resume", "true {}", ":::", "a", "b")
    assert proc.returncode == 0, proc.stderr
    resumed = stats(proc)
    assert {job: s["runs"] for job, s in resumed.items()} == {1: 3, 2: 3}, resumed
    assert {job: s["from_joblog"] for job, s in resumed.items()} == {1: 2, 2: 1}, resumed
    assert "per job over 3 runs" in proc.stderr, proc.stderr
    assert "2 from the joblog" in proc.stderr, proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert summary["ran"] == 3 and summary["skipped"] == 3  # run now: only the missing
