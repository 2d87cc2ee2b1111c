"""``--compare``: A/B runs interleaved, the ratio with its bootstrap interval, and the
verdict, through the real CLI and on fixed numbers."""

from __future__ import annotations

import json
import re
import sys

import pytest

from helpers import run_cli
from pipepool.measure._compare import compare


def comparison(*args: str) -> dict:
    proc = run_cli("run", "--json", "--compare", *args, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "compare (B/A of median wall time" in proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])["comparison"]


def test_identical_cpu_bound_commands_give_a_ratio_near_one_and_an_honest_verdict() -> None:
    # A 95% interval on real times misses the truth in about one run in twenty by
    # design, and more under load (the suite's other tests share the two cores): so
    # the verdict on real times is checked against its own interval, and "no
    # difference" itself on fixed numbers (test_the_interval_is_reproducible_and_honest).
    burn = f"{sys.executable} -c 'sum(range(2 * 10**6))' {{}}"  # the value is not used
    result = comparison("-j", "2", "--repeat", "10", burn, ":::", "A", "B")
    assert result["runs"] == [10, 10], result
    assert 0.5 < result["ratio"] < 2, result
    assert result["low"] <= result["ratio"] <= result["high"], result
    if result["low"] <= 1 <= result["high"]:
        assert result["verdict"] == "no difference", result
    else:
        side = "slower" if result["ratio"] > 1 else "faster"
        assert result["verdict"].endswith(f"x {side} than A"), result


def test_a_ten_times_longer_sleep_is_found_slower() -> None:
    # Ten times as long, so that a loaded machine (a shell and a sleep that start late
    # add to A's time as much as to B's) cannot close the gap: the measure and its
    # direction are checked here, the arithmetic with exact times below.
    result = comparison("-j", "2", "--repeat", "5", ":::", "sleep 0.05", "sleep 0.5")
    assert result["ratio"] > 2, result
    # The verdict states the ratio to two places, from the unrounded ratio: compare its
    # number with the reported (4-place) ratio within that rounding, not by formatting
    # the rounded one again (8.9350 -> "8.94", but round(8.93504, 4) formats "8.93").
    stated = re.fullmatch(r"B is (\d+\.\d\d)x slower than A", result["verdict"])
    assert stated is not None, result
    assert abs(float(stated[1]) - result["ratio"]) <= 0.005 + 1e-9, result
    assert result["low"] > 1, result


def test_the_interval_is_reproducible_and_honest() -> None:
    a = [1.0, 1.1, 0.9, 1.05, 0.95]
    assert compare(a, [2 * x for x in a]) == compare(a, [2 * x for x in a])  # fixed seed
    doubled = compare(a, [2 * x for x in a])
    assert (
        doubled["ratio"] == 2
        and doubled["low"] > 1
        and doubled["verdict"].startswith("B is 2.00x slower")
    )
    faster = compare(a, [x / 2 for x in a])
    assert faster["verdict"] == "B is 2.00x faster than A"
    same = compare(a, list(reversed(a)))
    assert same["verdict"] == "no difference" and same["ratio"] == 1


def test_compare_needs_two_jobs_and_repeat() -> None:
    proc = run_cli("run", "--compare", "--repeat", "3", ":::", "true", "true", "true")
    assert proc.returncode == 255
    assert "--compare needs exactly two jobs (A and B) and --repeat N of at least 2" in proc.stderr
    with pytest.raises(ValueError):
        compare([], [1.0])


def test_a_side_without_a_successful_run_says_why_there_is_no_verdict() -> None:
    proc = run_cli(
        "run", "--json", "--compare", "-j", "1", "--repeat", "2", ":::", "true", "exit 3",
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr  # B's two runs failed
    result = json.loads(proc.stdout.splitlines()[-1])["comparison"]
    assert result is not None, "the comparison disappeared without a reason"
    assert result["verdict"] is None and result["ratio"] is None, result
    assert result["runs"] == [2, 0], result
    assert result["why"] == "B had no successful run (2 failed)", result
    assert "compare: no verdict: B had no successful run (2 failed)" in proc.stderr, proc.stderr
