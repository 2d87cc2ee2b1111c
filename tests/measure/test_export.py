"""``--export-pyperf`` and ``--export-hyperfine``: every run's times in files other tools
read, checked by those tools' own readers: pyperf from PyPI loads the file and its
``stats`` command reads it; the hyperfine file has the keys and JSON types of a file the
real hyperfine (Debian's package) writes for the same commands."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_cli

COMMANDS = ("sleep 0.01", "true")


def exported(tmp_path: Path, option: str) -> tuple[Path, dict]:
    out = tmp_path / "export.json"
    proc = run_cli("run", "-j", "1", "--repeat", "3", "--json", option, str(out), *_cmds())
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout.splitlines()[-1])


def _cmds() -> list[str]:
    return [":::", *COMMANDS]  # no command: each argument is the job


def test_pyperf_reads_the_exported_runs(tmp_path: Path) -> None:
    pyperf = pytest.importorskip("pyperf")  # in the test extra
    path, summary = exported(tmp_path, "--export-pyperf")
    suite = pyperf.BenchmarkSuite.load(str(path))
    assert suite.get_benchmark_names() == list(COMMANDS)
    for name in COMMANDS:
        bench = suite.get_benchmark(name)
        mine = [r["runtime"] for r in summary["records"] if r["command"] == name]
        assert bench.get_nrun() == 3 and bench.get_unit() == "second"
        assert bench.get_values() == pytest.approx(mine, abs=1e-6)  # records: 6 digits
    meta = suite.get_metadata()
    assert {"hostname", "cpu_count", "kernel", "platform"} <= set(meta), meta
    stats = subprocess.run(
        [sys.executable, "-m", "pyperf", "stats", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert stats.returncode == 0, stats.stderr
    assert "Number of run with values: 3" in stats.stdout


def _types(value: object) -> object:
    if isinstance(value, dict):
        return {k: _types(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sorted({type(v).__name__ for v in value})]
    return (
        "number"
        if isinstance(value, (int, float)) and not isinstance(value, bool)
        else (type(value).__name__)
    )


def test_the_hyperfine_export_matches_real_hyperfine_s(tmp_path: Path) -> None:
    if shutil.which("hyperfine") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("hyperfine is not installed (.ci/run installs Debian's package)")
        pytest.skip("hyperfine is not installed (apt-get install hyperfine)")
    real = tmp_path / "real.json"
    proc = subprocess.run(
        ["hyperfine", "--runs", "3", "--style", "none", "--export-json", str(real), *COMMANDS],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    path, summary = exported(tmp_path, "--export-hyperfine")
    theirs, mine = json.loads(real.read_text()), json.loads(path.read_text())
    assert list(mine) == list(theirs) == ["results"]
    assert [r["command"] for r in mine["results"]] == [r["command"] for r in theirs["results"]]
    for a, b in zip(mine["results"], theirs["results"], strict=True):
        assert list(a) == list(b)  # the same keys, in the same order
        assert _types(a) == _types(b), (a, b)  # and the same JSON types
        runtimes = [r["runtime"] for r in summary["records"] if r["command"] == a["command"]]
        assert a["times"] == pytest.approx(runtimes, abs=1e-6)  # the records: 6 digits
        assert a["exit_codes"] == [0, 0, 0]
        assert a["min"] <= a["median"] <= a["max"]


def test_the_hyperfine_export_carries_each_run_s_real_exit_code(tmp_path: Path) -> None:
    # As hyperfine --ignore-failure writes them: every run that ended, with its exit
    # code; 128 + N for a run signal N ended (what hyperfine 1.15 writes for one).
    out = tmp_path / "export.json"
    proc = run_cli(
        "run", "-j", "1", "--repeat", "2", "--export-hyperfine", str(out),
        ":::", "exit 3", "true", "kill -KILL $$",
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    results = {r["command"]: r for r in json.loads(out.read_text())["results"]}
    assert results["exit 3"]["exit_codes"] == [3, 3], results
    assert results["true"]["exit_codes"] == [0, 0], results
    assert results["kill -KILL $$"]["exit_codes"] == [137, 137], results
    for r in results.values():
        assert len(r["times"]) == len(r["exit_codes"]) == 2, r
