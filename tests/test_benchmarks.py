"""Smoke test of the benchmark suite in benchmarks/: it runs, and what it writes is well
formed. A tiny configuration (``--smoke``, a few seconds); the numbers are never checked,
only the shape of the table, the JSON and the plots.

Skipped where benchmarks/ is absent: a wheel's tests run from a copy of tests/ alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not (ROOT / "benchmarks" / "suite.py").is_file(),
    reason="no benchmarks/ beside tests/ (not a source checkout)",
)

MEASURES = {"tiny", "mib", "kib64", "latency", "startup", "sweep", "hol"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _env() -> dict[str, str]:
    # Uninstalled checkouts import pipepool from src/ (benchmarks/__init__.py does that too).
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p
    )
    return env


def _run(args: list[str], timeout: float = 100) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("bench") / "results"
    proc = _run(["-m", "benchmarks", "--smoke", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, proc.stdout


def test_json_has_every_measure_with_medians(smoke_run: tuple[Path, str]) -> None:
    out, _ = smoke_run
    data = json.loads((out / "results.json").read_text())
    assert data["command"].startswith("python -m benchmarks --smoke")
    for field in ("cores", "python", "kernel", "pipepool"):
        assert data["machine"][field]
    joblib_rows = {"joblib-tiny", "joblib-mib", "joblib-arrays"} if _has("joblib") else set()
    assert set(data["measures"]) == MEASURES | joblib_rows
    for name, measure in data["measures"].items():
        assert measure["params"], name
        for param, by_key in measure["params"].items():
            assert any(data["contenders"][k]["family"] == "pipepool" for k in by_key), name
            for key, entry in by_key.items():
                assert "errors" not in entry, (name, param, key, entry.get("errors"))
                assert entry["median"][measure["field"]] > 0, (name, param, key)
    # Optional peers are either measured or named in a note, never silently missing.
    if not _has("loky"):
        assert any("loky" in note for note in data["notes"])
        assert "loky-submit" not in data["contenders"]
    else:
        assert "loky-submit" in data["contenders"]
    assert data["local_choice"]["key"] in data["contenders"]


def test_every_target_has_a_ratio_and_a_verdict(smoke_run: tuple[Path, str]) -> None:
    out, stdout = smoke_run
    data = json.loads((out / "results.json").read_text())
    names = [t["target"] for t in data["targets"]]
    for expected in (
        "LocalExecutor tiny tasks",
        "ProcessPoolExecutor submit+result",
        "ProcessPoolExecutor.map chunksize 1",
        "round-trip latency p50",
        "round-trip latency p99",
        "1 MiB results",
        "start-up + first task, fork",
        "long tasks, no head-of-line blocking",
    ):
        assert any(n.startswith(expected) for n in names), expected
    for t in data["targets"]:
        assert t["ratio"] > 0 and isinstance(t["met"], bool), t
    table = (out / "results.md").read_text()
    assert "## Targets" in table and data["command"] in table
    for t in data["targets"]:
        assert f"| {t['target']} |" in table and f"| {t['target']} |" in stdout


def test_markdown_has_a_table_per_measure(smoke_run: tuple[Path, str]) -> None:
    out, _ = smoke_run
    table = (out / "results.md").read_text()
    for heading in (
        "## Tiny tasks",
        "## Payload: 4 tasks each returning 1 MiB",
        "## Payload: 20 tasks each sending 64 KiB",
        "## Round-trip latency",
        "## Start-up",
        "## Parallelism sweep",
        "## Long tasks",
    ):
        assert heading in table, heading
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert all(line.endswith("|") for line in rows)
    assert "vs stdlib PPE" in table and "vs Airflow-style" in table


def test_plots_are_pngs_or_a_note(smoke_run: tuple[Path, str]) -> None:
    out, _ = smoke_run
    data = json.loads((out / "results.json").read_text())
    if _has("matplotlib"):
        assert data["plots"]["files"] == ["throughput_vs_parallelism.png", "latency.png"]
        for name in data["plots"]["files"]:
            assert (out / name).read_bytes().startswith(PNG_MAGIC)
    else:
        assert "matplotlib" in data["plots"]["note"]
