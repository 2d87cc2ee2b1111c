"""``--compare``: two jobs run interleaved (``--repeat N``), reported as a ratio with
a confidence interval and a verdict.

The ratio is B's median wall time over A's (A the first job, B the second). Its 95%
confidence interval comes from a percentile bootstrap: 2000 resamples of each job's
times (with replacement), the ratio of their medians each time, the 2.5th and 97.5th
percentiles of those ratios. The seed is fixed, so one set of times always gives the
same interval. "no difference" when the interval holds 1; else B is the ratio times
slower (or faster) than A.
"""

from __future__ import annotations

import random
import statistics

RESAMPLES = 2000
LEVEL = 0.95
SEED = 20240604  # fixed: the same times give the same interval, run after run


def compare(a: list[float], b: list[float], *, seed: int = SEED) -> dict[str, object]:
    """The ratio B/A of the median times, its bootstrap interval and the verdict."""
    if not a or not b or min(a) <= 0:
        raise ValueError("each side needs at least one positive time")
    rng = random.Random(seed)
    ratio = statistics.median(b) / statistics.median(a)
    ratios = sorted(
        statistics.median(rng.choices(b, k=len(b))) / statistics.median(rng.choices(a, k=len(a)))
        for _ in range(RESAMPLES)
    )
    low = ratios[int((1 - LEVEL) / 2 * RESAMPLES)]
    high = ratios[min(int((1 + LEVEL) / 2 * RESAMPLES), RESAMPLES - 1)]
    if low <= 1 <= high:
        verdict = "no difference"
    elif ratio > 1:
        verdict = f"B is {ratio:.2f}x slower than A"
    else:
        verdict = f"B is {1 / ratio:.2f}x faster than A"
    return {
        "ratio": round(ratio, 4),
        "low": round(low, 4),
        "high": round(high, 4),
        "level": LEVEL,
        "runs": [len(a), len(b)],
        "verdict": verdict,
    }


def no_verdict(runs: list[int], why: str) -> dict[str, object]:
    """The comparison when there is none to make (a side without a successful run):
    ``compare``'s keys, nulls for its numbers and verdict, and ``why``."""
    return {
        "ratio": None,
        "low": None,
        "high": None,
        "level": LEVEL,
        "runs": runs,
        "verdict": None,
        "why": why,
    }


def describe(result: dict[str, object], a: str, b: str) -> list[str]:
    head = ["compare (B/A of median wall time, runs interleaved):", f"  A: {a}", f"  B: {b}"]
    if result["verdict"] is None:
        return [*head, f"  compare: no verdict: {result['why']}"]
    return [
        *head,
        f"  ratio {result['ratio']:.3f}, {float(str(result['level'])):.0%} interval "
        f"{result['low']:.3f}-{result['high']:.3f} (bootstrap, fixed seed): {result['verdict']}",
    ]
