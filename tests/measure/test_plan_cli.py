"""``pipepool run --pin`` through the real CLI: the plan it prints (``--show-plan``, on
this machine or on a captured tree), each job's record and joblog row naming the CPUs it
ran on, and ``--pin-reserve``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import captured_topology, joblog_rows, run_cli

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux's"
)


AFFINITY = 'python3 -c "import os; print(sorted(os.sched_getaffinity(0)))"'


def test_show_plan_on_a_captured_machine(tmp_path: Path) -> None:
    root = captured_topology(tmp_path, "20em64t-hybrid-1p6c2t+2ca4co1t")
    args = ("run", "-j", "7", "--pin", "--show-plan", "--sysfs-root", str(root))
    proc = run_cli(*args, "touch", ":::", str(tmp_path / "ran"))
    assert proc.returncode == 0, proc.stderr
    assert "slot 7: CPU 12 (package 0, NUMA node 0, E-core; shares nothing)" in proc.stdout
    assert "given up: P-cores only: slot(s) 7 on E-cores" in proc.stdout
    assert not (tmp_path / "ran").exists()  # a plan, nothing run
    proc = run_cli(*args, "--json", "true", ":::", "x")
    placed = json.loads(proc.stdout)
    assert [s["cpus"] for s in placed["slots"]] == [[0], [2], [4], [6], [8], [10], [12]]


def test_each_record_and_joblog_row_names_the_cpus_the_job_ran_on(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    jobs = min(len(cpus), 2)
    log = tmp_path / "log"
    proc = run_cli(
        "run", "-j", str(jobs), "--pin", "--json", "--joblog", str(log), "-k",
        AFFINITY + " {}", ":::", "1", "2", "3",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    records = json.loads(lines[-1])["records"]
    seen = [json.loads(line) for line in lines[:-1]]  # what each job's process was given
    assert [r["cpus"] for r in records] == seen, (records, seen)
    rows = joblog_rows(log, extra=["CPUs", "Noisy"])  # GNU's nine columns, then these
    by_seq = {int(r[0]): r for r in rows}
    for record in records:
        row = by_seq[record["seq"]]
        assert row[8] == record["command"]  # GNU's nine columns are as they were
        assert row[9] == ",".join(map(str, record["cpus"]))


def test_resume_reads_a_joblog_with_the_cpus_column(tmp_path: Path) -> None:
    log = tmp_path / "log"
    args = ("run", "-j", "1", "--pin", "--joblog", str(log))
    proc = run_cli(*args, "--halt", "soon,done=2", "echo", ":::", "a", "b", "c")
    assert proc.stdout.split() == ["a", "b"], proc.stderr
    proc = run_cli(*args, "--resume", "echo", ":::", "a", "b", "c")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["c"]  # a and b were read back from their rows
    assert [r[8] for r in joblog_rows(log, extra=["CPUs", "Noisy"])] == [
        "echo a",
        "echo b",
        "echo c",
    ]


def test_pin_reserve_leaves_a_core_to_pipepool(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two usable CPUs")
    proc = run_cli("run", "-j", "1", "--pin", "--pin-reserve", "--json", AFFINITY, ":::", "x")
    assert proc.returncode == 0, proc.stderr
    (record,) = json.loads(proc.stdout.splitlines()[-1])["records"]
    assert json.loads(proc.stdout.splitlines()[0]) == record["cpus"]
    assert cpus[0] not in record["cpus"]  # the lowest CPU's core is left to pipepool
    everyone = run_cli("run", "-j", str(len(cpus)), "--pin", "--pin-reserve", "--show-plan", "true")
    assert "given up: a core left for pipepool" in everyone.stdout, everyone.stdout


def test_show_plan_needs_pin() -> None:
    proc = run_cli("run", "--show-plan", "true", ":::", "x")
    assert proc.returncode == 255
    assert "--show-plan and --pin-reserve go with --pin or --cpus-per-job K" in proc.stderr
