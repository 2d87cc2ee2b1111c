"""pyperf's warnings that a result may be unstable, for ``--repeat``'s per-job times:
on fixed numbers, and in a real run's summary."""

from __future__ import annotations

import json

from helpers import run_cli
from pipepool.measure._report import _instability


def test_steady_times_draw_no_warning() -> None:
    assert _instability([1.0, 1.01, 0.99, 1.0, 1.02], 0) == []


def test_each_of_pyperf_s_rules() -> None:
    spread = _instability([1.0, 1.0, 1.0, 1.0, 3.0], 0)  # stdev and maximum
    assert any(w.startswith("the standard deviation") for w in spread), spread
    assert any(w.startswith("the maximum (3 s) is 114% above the mean") for w in spread), spread
    low = _instability([0.2, 1.0, 1.0, 1.0], 0)
    assert any(w.startswith("the minimum (0.2 s)") for w in low), low
    assert _instability([1.0, 1.0], 0) == ["only 2 runs: too few to judge"]
    short = _instability([0.0004, 0.0004, 0.0004], 0)
    assert short == ["the shortest run took 400 us: start-up and timer dominate"]
    assert _instability([1.0, 1.0, 1.0], 2) == ["2 of 3 runs were noisy"]


def test_a_run_s_summary_carries_the_warnings() -> None:
    proc = run_cli("run", "-j", "1", "--repeat", "2", "--json", "true", ":::", "x")
    assert proc.returncode == 0, proc.stderr
    (stats,) = json.loads(proc.stdout.splitlines()[-1])["repetitions"]
    assert "only 2 runs: too few to judge" in stats["warnings"]
    assert "warning: job 1 may be unstable: only 2 runs: too few to judge" in proc.stderr
