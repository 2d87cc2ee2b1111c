"""The benchmark suite's peers of issue 32 (mpire, pebble) and its chunked-map and
per-task-timeout measures: they run, every installed peer is measured (a missing one is
named in a note), and a target against several peers is held to the best of them.

Skipped where benchmarks/ is absent: a wheel's tests run from a copy of tests/ alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not (ROOT / "benchmarks" / "suite.py").is_file(),
    reason="no benchmarks/ beside tests/ (not a source checkout)",
)

PEERS = ("mpire", "pebble")


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def peers_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "results"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    args = ["--smoke", "--only", "map", "timeouts", "--no-plots", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((out / "results.json").read_text())


def test_every_installed_peer_runs_the_chunked_map_and_the_timeouts(peers_run: dict) -> None:
    data = peers_run
    chunked = data["measures"]["map"]["params"]["2"]
    for key, entry in chunked.items():
        assert "errors" not in entry, (key, entry.get("errors"))
        assert entry["median"]["rate"] > 0 and entry["median"]["parent_cpu_us"] > 0, key
    assert {"ppe-chunks", "ppe-chunks2", "mp-chunks", "mp-map-default"} <= set(chunked)
    timeouts = data["measures"]["timeouts"]["params"]["2"]
    for key, entry in timeouts.items():
        assert "errors" not in entry, (key, entry.get("errors"))
    for peer in PEERS:
        if _has(peer):
            assert {f"{peer}-chunks", f"{peer}-chunks2"} <= set(chunked), peer
            own = {"mpire": "mpire-apply", "pebble": "pebble-schedule"}[peer]
            assert own in timeouts, peer
        else:
            assert any(peer in note for note in data["notes"]), peer


def test_the_chunked_map_target_is_held_to_the_best_peer(peers_run: dict) -> None:
    data = peers_run
    rows = {t["target"]: t for t in data["targets"]}
    (name,) = [n for n in rows if n.startswith("chunked map of")]
    row = rows[name]
    chunked = data["measures"]["map"]["params"]["2"]
    peers = {
        k: e["median"]["rate"]
        for k, e in chunked.items()
        if not k.startswith("ppe-") and data["contenders"][k]["family"] != "bound"
    }
    singles = {k: v for k, v in peers.items() if "chunks2" not in k}
    assert row["peer"] == max(singles, key=singles.__getitem__)
    assert row["peer_value"] == max(singles.values())
    cpu = rows["chunked map, parent CPU per item vs the serialization floor"]
    assert cpu["peer_value"] == chunked["map-floor"]["median"]["parent_cpu_us"] > 0
    assert cpu["ours_value"] == chunked["ppe-chunks"]["median"]["parent_cpu_us"]
    timeouts = [n for n in rows if n.startswith("per-task timeouts")]
    if _has("pebble"):
        assert len(timeouts) == 1 and rows[timeouts[0]]["peer"] == "pebble-schedule"


def test_best_peer_is_the_hardest_to_beat() -> None:
    from benchmarks.suite import Target, best_peer

    data = {
        "measures": {
            "m": {
                "field": "rate",
                "params": {"2": {k: {"median": {"rate": v}} for k, v in [("a", 3), ("b", 9)]}},
            }
        }
    }
    faster = Target("t", "m", "2", "x", "a,b,c", ">=", 1.5)
    assert best_peer(data, faster, "2", ["a", "b", "c"]) == ("b", 9)
    sooner = Target("t", "m", "2", "x", "a,b,c", "<=", 1)
    assert best_peer(data, sooner, "2", ["a", "b", "c"]) == ("a", 3)
    assert best_peer(data, faster, "2", ["c"]) == ("c", None)


def test_the_wait_row_subtracts_result_and_the_stdlibs_own_wait_cost() -> None:
    """wait(fs)'s own cost per future: (submit+wait - submit+result) of pipepool, minus
    (wait - result) of the stdlib on bare Futures, against 1 µs."""
    from benchmarks.config import Config
    from benchmarks.targets import evaluate_targets

    cpu = {"ppe-submit-wait": 5.0, "ppe-submit": 3.5, "bare-wait": 2.0, "bare-result": 1.2}
    by_key = {k: {"median": {"parent_cpu_us": v, "rate": 1.0}} for k, v in cpu.items()}
    data = {
        "local_choice": {"key": "local-adaptive"},
        "contenders": {},
        "measures": {"tiny": {"field": "rate", "params": {"2": by_key}}},
    }
    rows = evaluate_targets(data, Config(parallelism=[2]))
    (row,) = [r for r in rows if r["target"].startswith("CPU wait(fs) adds per future")]
    assert row["ours_value"] == (5.0 - 3.5) - (2.0 - 1.2)
    assert row["peer_value"] == 1.0 and row["met"] is True


@pytest.mark.timeout(60)
def test_the_warm_up_of_a_chunked_row_starts_every_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pipepool starts workers on demand: a warm-up of 4 x p items made one chunk, one
    worker ran it, and the timed map started the second. Four chunks per worker start
    them all before the clock."""
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.contenders import SPECS
    from benchmarks.measures import _open

    adapter = _open(SPECS["ppe-chunks"], 2)
    try:
        assert len(adapter.pids()) == 2
    finally:
        adapter.close()
