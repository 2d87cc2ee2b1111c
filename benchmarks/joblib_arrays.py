"""Large numpy arrays through joblib: pipepool against loky, 1 to 100 MB.

    python -m benchmarks.joblib_arrays [--rounds 5] [--sizes 1 10 100]

Arguments: 8 calls of ``Parallel(n_jobs=2)``, each taking the same array (loky and
pipepool both memmap arrays above ``max_nbytes``, 1 MB by default, with joblib's
reducers; ``max_nbytes=None`` shows what a plain pipe transfer costs). Results: 8 calls
each returning a fresh array of that size (no memmapping on the way back, in either).
Each cell is the median of rounds (contenders rotated) on a warm pool, each contender
warmed right before its block (loky restarts its executor when max_nbytes changes); the ratio is
loky's time over pipepool's (above 1: pipepool is faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

CALLS = 8


def checksum(a):
    return float(a[:: 4096 // a.itemsize].sum())  # touch every page, cheaply


def make_array(nbytes):
    import numpy as np

    return np.ones(nbytes, dtype=np.uint8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.joblib_arrays")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100], help="MB")
    args = parser.parse_args(argv)

    import numpy as np
    from joblib import Parallel, delayed

    import pipepool.joblib  # registers the backend

    contenders: dict[str, dict[str, Any]] = {
        "loky (memmap)": dict(backend="loky"),
        "pipepool (memmap)": dict(backend="pipepool"),
        "loky (max_nbytes=None)": dict(backend="loky", max_nbytes=None),
        "pipepool (max_nbytes=None)": dict(backend="pipepool", max_nbytes=None),
    }
    times: dict[tuple[str, str, int], list[float]] = {}
    names = list(contenders)
    arrays = {mb: np.ones(mb * 10**6, dtype=np.uint8) for mb in args.sizes}
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            kw = contenders[name]
            # Untimed: loky restarts its executor when its arguments change (max_nbytes
            # does), pipepool keeps its pool; each contender is timed on a warm pool.
            Parallel(n_jobs=2, **kw)(delayed(abs)(i) for i in range(8))
            for mb, a in arrays.items():
                started = time.perf_counter()
                Parallel(n_jobs=2, **kw)(delayed(checksum)(a) for _ in range(CALLS))
                times.setdefault(("args", name, mb), []).append(time.perf_counter() - started)
                if "None" in name:
                    continue  # results are never memmapped: one row per backend
                started = time.perf_counter()
                out = Parallel(n_jobs=2, **kw)(delayed(make_array)(a.nbytes) for _ in range(CALLS))
                assert all(o.nbytes == a.nbytes for o in out)
                del out
                times.setdefault(("results", name, mb), []).append(time.perf_counter() - started)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    pipepool.joblib.shutdown_pool()

    print(f"\n{CALLS} calls per Parallel, n_jobs=2; medians of {args.rounds} rounds (ms)\n")
    print("| direction | size | " + " | ".join(names) + " | loky / pipepool (memmap) |")
    print("|---|---|" + "---|" * len(names) + "---|")
    for direction in ("args", "results"):
        for mb in args.sizes:
            cells: list[str] = []
            med: dict[str, float] = {}
            for name in names:
                values = times.get((direction, name, mb))
                if values:
                    med[name] = statistics.median(values)
                cells.append(f"{med[name] * 1e3:,.1f}" if values else "-")
            pair = (med.get("loky (memmap)"), med.get("pipepool (memmap)"))
            ratio = f"{pair[0] / pair[1]:.2f}x" if pair[0] and pair[1] else "-"
            print(f"| {direction} | {mb} MB | " + " | ".join(cells) + f" | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
