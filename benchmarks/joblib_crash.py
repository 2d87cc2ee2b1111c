"""A worker killed mid-call, on joblib's loky backend and on pipepool's.

    python -m benchmarks.joblib_crash [--rounds 5]

1,000 tasks through ``Parallel(n_jobs=2)``, one of which SIGKILLs its own worker: what
each backend raises, how long the failing call takes, and how long the *next*
``Parallel`` call (20 tiny tasks) takes: loky rebuilds its executor, pipepool's pool
goes on (the killed worker and the ones the abort stopped are replaced). Medians of
``--rounds`` rounds, backends interleaved.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time

TASKS = 1_000
VICTIM = 500


def task(i: int) -> int:
    if i == VICTIM:
        os.kill(os.getpid(), signal.SIGKILL)
    return i


def one_round(backend: str) -> tuple[BaseException | None, float, float, float]:
    from joblib import Parallel, delayed

    Parallel(n_jobs=2, backend=backend)(delayed(abs)(i) for i in range(20))  # warm
    started = time.perf_counter()
    Parallel(n_jobs=2, backend=backend)(delayed(abs)(i) for i in range(20))
    normal = time.perf_counter() - started
    error = None
    started = time.perf_counter()
    try:
        Parallel(n_jobs=2, backend=backend)(delayed(task)(i) for i in range(TASKS))
    except BaseException as exc:  # what the user sees
        error = exc
    failing = time.perf_counter() - started
    started = time.perf_counter()
    assert Parallel(n_jobs=2, backend=backend)(delayed(abs)(i) for i in range(20)) == list(
        range(20)
    )
    return error, failing, time.perf_counter() - started, normal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.joblib_crash")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    import pipepool.joblib  # registers the backend

    backends = ["loky", "pipepool"]
    seen: dict[str, BaseException | None] = {}
    failing: dict[str, list[float]] = {b: [] for b in backends}
    following: dict[str, list[float]] = {b: [] for b in backends}
    normal: dict[str, list[float]] = {b: [] for b in backends}
    for r in range(args.rounds):
        for backend in backends[r % 2 :] + backends[: r % 2]:
            error, fail_s, next_s, normal_s = one_round(backend)
            normal[backend].append(normal_s)
            seen.setdefault(backend, error)
            failing[backend].append(fail_s)
            following[backend].append(next_s)
    pipepool.joblib.shutdown_pool()
    for backend in backends:
        error = seen[backend]
        kind = type(error)
        print(f"== {backend}")
        print(f"raises: {kind.__module__}.{kind.__qualname__}")
        print("  mro: " + " < ".join(c.__name__ for c in kind.__mro__[1:5]))
        print(f"  message: {error}")
        print(
            f"failing call: median {statistics.median(failing[backend]) * 1e3:,.0f} ms; "
            f"next Parallel call: median {statistics.median(following[backend]) * 1e3:,.1f} ms "
            f"(of {args.rounds}: {', '.join(f'{t * 1e3:.1f}' for t in following[backend])}); "
            "the same call before the crash: median "
            f"{statistics.median(normal[backend]) * 1e3:,.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
