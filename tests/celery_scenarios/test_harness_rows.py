"""The benchmark harness's arithmetic (benchmarks/celery_pool): the recycle gap's
slot matching and the rows' ratios against issue 43's goals, on numbers made here; and a
smoke run of the rows on prefork at tiny sizes (its numbers are never judged)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import optional

ROOT = Path(__file__).resolve().parents[2]

if not (ROOT / "benchmarks" / "celery_pool" / "run.py").is_file():  # as conftest.py
    pytest.skip("no benchmarks/ beside tests/ (not a source checkout)", allow_module_level=True)
optional.require("celery", load=False)  # the harness imports it (its tasks' app)
# (benchmarks/ imports as tests/ does: pytest puts the root of the tests package, the
# checkout, on sys.path)
from benchmarks.celery_pool import measures, run  # noqa: E402


def test_each_freed_slot_is_matched_with_the_start_that_fills_it():
    # Two slots. Slot A: 0-1, then 1.2-2.0; slot B: 0-1.5, then 2.5-3; a fifth task
    # starts at 2.3 in A. Ends in order 1, 1.5, 2.0; starts 0, 0, 1.2, 2.3, 2.5.
    spans = [(0.0, 1.0), (0.0, 1.5), (1.2, 2.0), (2.5, 3.0), (2.3, 2.4)]
    gaps = measures.slot_gaps(spans, 2)
    assert gaps == pytest.approx([0.2, 0.8, 0.5])


def test_a_row_is_met_by_the_ratio_of_the_medians_against_its_bound():
    by_pool = {
        "pipepool": {
            "tiny": {"rate": 900.0},
            "latency": {"p50_ms": 2.0, "p99_ms": 9.0},
            "recycle": {"gap_ms": 40.0, "gap_mean_ms": 60.0},
            "resume": {"resume_ms": 30.0},
        },
        "prefork": {
            "tiny": {"rate": 1000.0},
            "latency": {"p50_ms": 2.5, "p99_ms": 9.0},
            "recycle": {"gap_ms": 100.0, "gap_mean_ms": 100.0},
            "resume": {"resume_ms": 100.0},
        },
    }
    rows = {(r["key"], r["field"]): r for r in run.evaluate(by_pool)}
    assert rows["tiny", "rate"]["ratio"] == pytest.approx(0.9)
    assert rows["tiny", "rate"]["met"] is False  # throughput: at least prefork's
    assert rows["latency", "p50_ms"]["met"] is True
    assert rows["latency", "p99_ms"]["met"] is True  # equal is at most prefork's
    assert rows["recycle", "gap_ms"]["met"] is True  # 0.4 <= 0.5
    assert rows["recycle", "gap_mean_ms"]["met"] is False  # 0.6 > 0.5
    assert rows["resume", "resume_ms"]["met"] is True
    alone = run.evaluate({"prefork": by_pool["prefork"]})
    assert {r["met"] for r in alone} == {None}  # no pipepool: no verdict, not a miss


@pytest.mark.timeout(200)
def test_the_rows_run_on_prefork_at_tiny_sizes(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")) if p
    )
    command = [sys.executable, "-m", "benchmarks.celery_pool", "--smoke", "--pools", "prefork",
               "--tasks", "40", "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    medians = data["medians"]["prefork"]
    assert set(medians) == {"tiny", "latency", "recycle", "resume"}
    assert medians["tiny"]["rate"] > 0 and medians["resume"]["resume_ms"] > 0
    assert len(data["samples"]["prefork"]["recycle"][0]["gaps_ms"]) == 8 - 2
    assert data["noise"]["load_1min_start"] is not None  # the machine's load is recorded
    table = (tmp_path / "results.md").read_text()
    assert table.count("\n| ") == 2 + len(run.ROWS), table  # header, rule, the rows
