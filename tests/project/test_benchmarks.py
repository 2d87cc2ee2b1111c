"""Smoke test of the benchmark suite in benchmarks/: it runs, and what it writes is well
formed. A tiny configuration (``--smoke``, a few seconds); the numbers are never checked,
only the shape of the table, the JSON and the plots.

Skipped where benchmarks/ is absent: a wheel's tests run from a copy of tests/ alone.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not (ROOT / "benchmarks" / "suite.py").is_file(),
    reason="no benchmarks/ beside tests/ (not a source checkout)",
)

MEASURES = {
    "tiny",
    "mib",
    "kib64",
    "latency",
    "startup",
    "startup-map",
    "recycle",
    "idle",
    "calls",
    "sweep",
    "hol",
    "map",
    "timeouts",
    "cancel",
}
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
    proc = _run(["-m", "benchmarks", "--smoke", "--out", str(out)], timeout=300)
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
            if name in ("startup-map", "idle"):  # each beside the stdlib's, same rounds
                assert any(data["contenders"][k]["family"] == "stdlib" for k in by_key), name
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
        "parent CPU per task, LocalExecutor vs the Airflow-style pair",
        "parent CPU per task, ProcessPoolExecutor vs LocalExecutor",
        "1 MiB results vs the copy bound",
        "chunked map, parent CPU per item vs the serialization floor",
        "start-up + first task, fork",
        "short-lived pool: made, map of 20 calls, shut down, fork",
        "idle wake-ups per second, tasks running, waited on with result()",
        "long tasks, no head-of-line blocking",
    ):
        assert any(n.startswith(expected) for n in names), expected
    for t in data["targets"]:
        # An overhead over a baseline (``over``) at or below zero in the smoke run's tiny
        # samples has no ratio and no verdict; a difference (``beyond``: what wait(fs) adds
        # over result()) is a value, which noise can put at or below zero, with a verdict.
        if t["ratio"] is None:
            assert t["met"] is None, t
        else:
            assert t["ratio"] > 0 or t["beyond"], t
            assert isinstance(t["met"], bool), t
    assert any(t["ratio"] is not None for t in data["targets"])
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
        "## Short-lived pool",
        "## Recycle gap",
        "## Idle waiting",
        "## Chunked map",
        "## Parallelism sweep",
        "## Long tasks",
    ):
        assert heading in table, heading
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert all(line.endswith("|") for line in rows)
    assert "vs stdlib PPE" in table and "vs Airflow-style" in table and "vs copy bound" in table


def test_plots_are_pngs_or_a_note(smoke_run: tuple[Path, str]) -> None:
    out, _ = smoke_run
    data = json.loads((out / "results.json").read_text())
    if _has("matplotlib"):
        assert data["plots"]["files"] == ["throughput_vs_parallelism.png", "latency.png"]
        for name in data["plots"]["files"]:
            assert (out / name).read_bytes().startswith(PNG_MAGIC)
    else:
        assert "matplotlib" in data["plots"]["note"]


# -- the machine's load: noisy runs are marked and never rewrite the README ------------------

README_TEXT = (
    "# project\n\nintro\n\n"
    "<!-- benchmarks:begin (python -m benchmarks --readme writes this block) -->\n\n"
    "the old table\n\n<!-- benchmarks:end -->\n\nafter the table\n"
)

# Runs the suite with the machine's readings replaced: a fake load average, and (QUIET)
# the machine's busy time equal to this process tree's own, so other processes used 0 s.
FAKED_RUN = """
import sys
from benchmarks import _noise
_noise.loadavg = lambda: {load}
if {quiet}:
    _noise.machine_busy = lambda: (_noise.tree_seconds(), 0.0)
from benchmarks.suite import main
sys.exit(main(sys.argv[1:]))
"""


def _faked_run(
    tmp_path: Path, load: float, quiet: bool
) -> tuple[subprocess.CompletedProcess, Path]:
    readme = tmp_path / "README.md"
    readme.write_text(README_TEXT)
    out = tmp_path / "results"
    code = FAKED_RUN.format(load=load, quiet=quiet)
    args = ["--smoke", "--only", "startup", "--no-plots", "--out", str(out)]
    proc = _run(["-c", code, *args, "--readme", str(readme)])
    return proc, out


def test_a_noisy_run_is_marked_and_does_not_rewrite_the_readme(tmp_path: Path) -> None:
    proc, out = _faked_run(tmp_path, load=99.0, quiet=True)
    assert proc.returncode == 3, proc.stderr[-4000:]  # --readme refused: EXIT_NOISY
    assert (tmp_path / "README.md").read_text() == README_TEXT
    data = json.loads((out / "results.json").read_text())
    assert data["noise"]["noisy"] is True
    assert data["noise"]["load_1min_start"] == 99.0
    assert any("load average 99.00" in r for r in data["noise"]["reasons"]), data["noise"]
    header = (out / "results.md").read_text().split("## Targets")[0]
    assert "**Noisy run**: 1-minute load average 99.00 at the start" in header
    assert "not rewritten: a noisy run" in proc.stderr


def test_a_quiet_run_rewrites_only_the_readme_block(tmp_path: Path) -> None:
    proc, out = _faked_run(tmp_path, load=0.0, quiet=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads((out / "results.json").read_text())
    assert data["noise"]["noisy"] is False, data["noise"]
    assert data["noise"]["other_cpu_s"] is not None  # the /proc path, not load only
    text = (tmp_path / "README.md").read_text()
    assert "the old table" not in text
    assert text.startswith("# project\n\nintro\n\n<!-- benchmarks:begin")
    assert text.endswith("<!-- benchmarks:end -->\n\nafter the table\n")
    assert "- **Load**: 1-minute load average 0.00 at the start" in text
    assert "(a quiet run)" in text and "Noisy run" not in text
    # The headline (at most ten rows) and its sentence, counted from the same rows.
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    startup = [t for t in data["targets"] if t["target"].startswith("start-up + first task")]
    assert len(rows) - 1 == 1 and "| start-up + first result (fork, p=2) |" in text
    met = sum(1 for t in startup[:1] if t["met"])
    assert f"{met} of these {len(rows) - 1} headline rows are met in this run" in text


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The benchmarks package, imported in this process (its pure-Python helpers)."""
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks import _noise, readme, suite

    return type("Bench", (), {"noise": _noise, "readme": readme, "suite": suite})


def _reading(noise: Any, at: float, load: float, busy: float, ours: float) -> Any:
    return noise.Reading(at=at, load=load, busy=(busy, 0.0), ours=ours)


def test_verdict_marks_load_above_half_the_cores_or_other_cpu_above_5_percent(
    bench: Any,
) -> None:
    n = bench.noise
    # 10 s on 4 cores = 40 s of CPU; we used 8 s.
    quiet = n.verdict(_reading(n, 0, 2.0, 100, 50), _reading(n, 10, 2.5, 109.9, 58), 4)
    assert not quiet["noisy"] and quiet["reasons"] == []
    assert abs(quiet["other_cpu_s"] - 1.9) < 1e-6 and quiet["other_share"] < 0.05
    busy_start = n.verdict(_reading(n, 0, 2.01, 100, 50), _reading(n, 10, 0, 108, 58), 4)
    assert busy_start["noisy"] and "load average 2.01" in busy_start["reasons"][0]
    others = n.verdict(_reading(n, 0, 0.1, 100, 50), _reading(n, 10, 0.1, 110.2, 58), 4)
    assert others["noisy"] and "5.5% of the CPU" in others["reasons"][0], others
    # One measure of a run: the load at its start is the run's own (it lags), so only
    # other processes' CPU decides, where it is measured.
    inside = n.verdict(_reading(n, 0, 2.01, 100, 50), _reading(n, 10, 0, 108, 58), 4, True)
    assert not inside["noisy"] and inside["reasons"] == []
    inside_busy = n.verdict(_reading(n, 0, 2.01, 100, 50), _reading(n, 10, 0.1, 110.2, 58), 4, True)
    assert inside_busy["noisy"] and "5.5% of the CPU" in inside_busy["reasons"][0]
    # No /proc (macOS): the load alone decides, and the header says what was not measured.
    no_proc = n.Reading(at=0, load=0.5, busy=None, ours=None)
    mac = n.verdict(no_proc, n.Reading(at=5, load=0.5, busy=None, ours=None), 4)
    assert not mac["noisy"] and mac["other_share"] is None
    assert "os.getloadavg only" in n.describe(mac)
    mac_busy = n.verdict(n.Reading(at=0, load=2.5, busy=None, ours=None), no_proc, 4, True)
    assert mac_busy["noisy"]  # within a run too: without /proc the load is all there is


def test_steadiness_is_the_spread_of_the_middle_probes_after_the_first(bench: Any) -> None:
    """The first probe warms the loop up and is left out; the spread is the 90th
    percentile over the 10th, so one hiccup does not make a run unsteady; above 1.25x
    the header calls the machine unsteady."""
    n = bench.noise
    assert n.steadiness([]) is None
    ten = [0.010 + 0.0002 * i for i in range(10)]  # 10.0 .. 11.8 ms
    steady = n.steadiness([0.050, *ten, 0.040])  # 50 ms: the warm-up; 40 ms: a hiccup
    assert (steady["probes"], steady["fastest_ms"], steady["slowest_ms"]) == (11, 10.0, 40.0)
    assert (steady["p10_ms"], steady["p90_ms"], steady["steady"]) == (10.2, 11.8, True)
    assert steady["spread"] == pytest.approx(11.8 / 10.2, abs=1e-3)
    line = n.describe_speed(steady)
    assert "took 10.2-11.8 ms of CPU in the middle 80% of the 11 probes" in line
    assert "(median 11.0, all 10.0-40.0): 1.16x apart, a steady machine" in line
    drifting = n.steadiness([0.010] + [0.010] * 5 + [0.016] * 5)
    assert drifting["spread"] == 1.6 and not drifting["steady"]
    assert "1.60x apart, an unsteady machine (above 1.25x)" in n.describe_speed(drifting)


def test_the_header_says_how_steady_the_machine_was(smoke_run: tuple[Path, str]) -> None:
    out, _ = smoke_run
    data = json.loads((out / "results.json").read_text())
    samples = sum(
        len(entry["samples"])
        for measure in data["measures"].values()
        for by_key in measure["params"].values()
        for entry in by_key.values()
    )
    speed = data["noise"]["speed"]
    assert speed["probes"] == samples - 1  # one before each sample, the first left out
    assert 0 < speed["fastest_ms"] <= speed["median_ms"] <= speed["slowest_ms"]
    assert "- **Speed**: a fixed pure-Python loop" in (out / "results.md").read_text()


def test_results_of_a_noisy_full_run_do_not_replace_the_published_ones(bench: Any) -> None:
    s = bench.suite
    published = os.path.join(s.HERE, "results", "")
    assert s.results_dir(None, "full", noisy=False) == published
    assert s.results_dir(None, "full", noisy=True) != published
    assert s.results_dir(None, "full", noisy=True).startswith(published)
    assert s.results_dir("/x", "full", noisy=True) == "/x"


def test_a_module_without_current_bytecode_is_stale(bench: Any, tmp_path: Path) -> None:
    # The suite compiles these before it measures: a spawned worker would compile them
    # again at every start, while the stdlib's workers load bytecode.
    import compileall

    source = tmp_path / "mod.py"
    source.write_text("x = 1\n")
    os.utime(source, (1_000_000_000, 1_000_000_000))
    assert bench.suite._stale(str(source))  # none at all
    assert compileall.compile_file(str(source), quiet=2)
    assert not bench.suite._stale(str(source))
    os.utime(source, (1_000_000_100, 1_000_000_100))  # edited since: another version
    assert bench.suite._stale(str(source))


def test_readme_refuses_a_run_that_recorded_no_noise(bench: Any, tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README_TEXT)
    with pytest.raises(bench.readme.NoisyRunError, match="no load figures"):
        bench.readme.update_readme({"targets": []}, str(readme))
    assert readme.read_text() == README_TEXT


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def _reap_a_burning_child(seconds: float, done: Any, release: Any) -> None:
    # A fork server's place: it reaps its children (their CPU goes to its cutime) and
    # lives on, so the CPU reaches the top process only through /proc/<pid>/stat.
    child = multiprocessing.get_context("fork").Process(target=_burn, args=(seconds,))
    child.start()
    child.join()
    done.set()
    release.wait(60)


@pytest.mark.timeout(60)
def test_cpu_of_descendants_reaped_by_a_live_child_counts_as_ours(bench: Any) -> None:
    n = bench.noise
    ctx = multiprocessing.get_context("fork")
    done, release = ctx.Event(), ctx.Event()
    before = n.tree_seconds()
    middle = ctx.Process(target=_reap_a_burning_child, args=(0.3, done, release))
    middle.start()
    try:
        assert done.wait(30)
        used = n.tree_seconds() - before  # the middle process is alive, its child reaped
    finally:
        release.set()
        middle.join(30)
    assert used >= 0.25, used  # /proc counts in clock ticks (10 ms), rounded down


def test_readme_writer_answers_help_and_names_a_missing_run(
    bench: Any, tmp_path: Path, capsys
) -> None:
    with pytest.raises(SystemExit) as done:
        bench.readme.main(["--help"])
    assert done.value.code == 0 and "results" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        bench.readme.main([str(tmp_path / "missing.json")])
    assert done.value.code == 2
    assert "cannot read the run" in capsys.readouterr().err
