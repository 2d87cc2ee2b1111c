"""The benchmark suite's A/B mode (``python -m benchmarks --ab REV``): another checkout
built once and cached, both sides' rounds interleaved, each side importing its own
pipepool, and the report of both medians and the same-round ratios.

Small: HEAD exported and built pure (``PIPEPOOL_PURE=1``: no compile) into a temporary
cache, then one smoke measure, two rounds, this working tree against it.
Skipped where benchmarks/ is absent (a wheel's tests) or the tree is not a git checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _git_head() -> bool:
    try:
        subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", "HEAD"],
            capture_output=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return True


pytestmark = [
    pytest.mark.skipif(
        not (ROOT / "benchmarks" / "ab.py").is_file(),
        reason="no benchmarks/ beside tests/ (not a source checkout)",
    ),
    pytest.mark.skipif(not _git_head(), reason="not a git checkout: no revision to build"),
]


@pytest.fixture
def ab(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setenv("PIPEPOOL_PURE", "1")  # the build without a compile: seconds
    from benchmarks import ab

    return ab


@pytest.fixture
def head_tree(ab: Any, tmp_path: Path) -> Path:
    """HEAD, exported and built (pure) into a temporary cache: its tree's root."""
    src = ab.build(ab._git("rev-parse", "HEAD").strip(), str(tmp_path / "cache"))
    return Path(src).parent


def test_a_revision_is_built_once_and_found_again(ab: Any, head_tree: Path) -> None:
    assert (head_tree / "src" / "pipepool" / "__init__.py").is_file()
    assert head_tree.name.endswith("-pure")  # a pure build is cached apart
    marker = head_tree / ab.BUILT
    made = marker.stat().st_mtime_ns
    commit = head_tree.name.removesuffix("-pure")
    again = ab.resolve("HEAD", cache=str(head_tree.parent))
    assert again.src == str(head_tree / "src") and commit[:10] in again.label
    assert marker.stat().st_mtime_ns == made  # found, not built again
    assert sorted(p.name for p in head_tree.parent.iterdir()) == [head_tree.name]


def test_a_side_argv_drops_the_ab_options(ab: Any) -> None:
    argv = ["--ab", "v1", "--smoke", "--only", "tiny,latency", "--rounds=3", "--out", "x"]
    assert ab.side_argv(argv, "/o") == [
        "--smoke",
        "--only",
        "tiny,latency",
        "--rounds",
        "1",
        "--no-plots",
        "--pipepool-only",
        "--out",
        "/o",
    ]


@pytest.mark.timeout(300)
def test_an_ab_run_interleaves_both_sides_each_with_its_own_pipepool(
    head_tree: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ab"
    env = {**os.environ, "PIPEPOOL_IMPL": "python", "PIPEPOOL_PURE": "1"}
    env.pop("PYTHONPATH", None)
    args = ["--ab", str(head_tree), "--smoke", "--only", "tiny", "--rounds", "2"]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((out / "ab.json").read_text())
    assert report["orders"] == ["AB", "BA"] and report["measures"] == ["tiny"]
    sides = {"A": ROOT / "src", "B": head_tree / "src"}
    for r in (1, 2):
        for name, src in sides.items():
            data = json.loads((out / f"round{r}-{name}" / "results.json").read_text())
            assert data["machine"]["pipepool_path"] == str(src), (r, name)
            families = {c["family"] for c in data["contenders"].values()}
            assert families == {"pipepool"}, families  # the peers are not raced
    rows = {(r["contender"], r["field"]): r for r in report["rows"]}
    assert {("ppe-submit", "rate"), ("ppe-submit", "parent_cpu_us")} <= set(rows)
    for row in report["rows"]:
        assert len(row["ratios"]) == 2 and row["a"] > 0 and row["b"] > 0, row
        assert row["ratio"] == pytest.approx(sum(row["ratios"]) / 2)
    assert "| tiny | 2 | ppe-submit | rate |" in proc.stdout
    assert (out / "ab.md").read_text() == proc.stdout


def test_the_report_says_whether_the_rounds_agree(ab: Any) -> None:
    """The median ratio alone hides noise: the report gives the same-round ratios'
    range and how many were below 1, so a split (noise) reads apart from a difference
    every round shows."""
    q = ("tiny", "2", "ppe-map1", "parent_cpu_us")
    split = ("tiny", "2", "ppe-submit", "parent_cpu_us")
    rounds = [
        {"A": {q: 0.9, split: 1.2}, "B": {q: 1.0, split: 1.0}},
        {"A": {q: 1.8, split: 0.5}, "B": {q: 2.0, split: 1.0}},
        {"A": {q: 0.95, split: 1.1}, "B": {q: 1.0, split: 1.0}},
    ]
    rows = {r["contender"]: r for r in ab.compare(rounds)}
    agreed, noisy = rows["ppe-map1"], rows["ppe-submit"]
    assert (agreed["low"], agreed["high"], agreed["below"]) == (
        pytest.approx(0.9),
        pytest.approx(0.95),
        3,
    )
    assert (noisy["low"], noisy["high"], noisy["below"]) == (0.5, 1.2, 1)
    table = ab.markdown(
        ab.Side("A", "a", "a/src"), ab.Side("B", "b", "b/src"), list(rows.values()), 3
    )
    assert (
        "| tiny | 2 | ppe-map1 | parent_cpu_us | 0.95 | 1 | 0.900 | 0.900-0.950 | 3 of 3 |" in table
    )
    assert "| 1.100 | 0.500-1.200 | 1 of 3 |" in table
