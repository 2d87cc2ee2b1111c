"""CPU per item of a chunked ``map``, parent and workers apart: a load-robust measure.

    python -m benchmarks.map_cpu                       # 1,000,000 tiny calls, chunks of 10,000
    python -m benchmarks.map_cpu --items 200000 --chunks 1000,10000 --iterables 2
    python -m benchmarks.map_cpu --peers              # multiprocessing.Pool.map beside it

CPU time (``getrusage`` for the parent, every thread; ``/proc/<pid>/schedstat`` for the
workers) moves little with the machine's load, where items per second do not: use it to
develop the chunk path on a busy machine, and the suite's quiet runs for throughput.
``--iterables 2`` maps ``fn(x, y)`` over two lists (``zip`` semantics, a tuple per item).
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.pool
import time
from collections.abc import Callable
from typing import Any

from . import _cpu
from .tasks import noop


def add(x: int, y: int) -> int:
    """Two arguments, the several-iterables case."""
    return x + y


def measure(
    pool: Any, pids: list[int], fn: Callable[..., Any], inputs: list[list[int]], chunk: int
) -> tuple[float, float, float]:
    """``(parent µs/item, workers µs/item, items/s)`` of one ``list(pool.map(...))``."""
    n = len(inputs[0])
    out: list[Any] | None = None
    w0, c0, t0 = _cpu.snapshot(pids), _cpu.parent_seconds(), time.perf_counter()
    if len(inputs) == 1:
        out = list(pool.map(fn, inputs[0], chunksize=chunk))
    elif isinstance(pool, multiprocessing.pool.Pool):
        out = pool.starmap(fn, zip(*inputs, strict=False), chunksize=chunk)
    else:
        out = list(pool.map(fn, *inputs, chunksize=chunk))
    del out  # freeing the results is the caller's, and counted: Pool.map's is too
    t1, c1, w1 = time.perf_counter(), _cpu.parent_seconds(), _cpu.snapshot(pids)
    return 1e6 * (c1 - c0) / n, 1e6 * _cpu.used_since(w0, w1) / n, n / (t1 - t0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--chunks", default="10000", help="chunk sizes, comma-separated")
    parser.add_argument("--iterables", type=int, choices=(1, 2), default=1)
    parser.add_argument("-p", "--parallelism", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--peers", action="store_true", help="multiprocessing.Pool too")
    args = parser.parse_args(argv)
    import pipepool

    ctx = multiprocessing.get_context("fork")
    fn = noop if args.iterables == 1 else add
    inputs = [list(range(args.items)) for _ in range(args.iterables)]
    pools: list[tuple[str, Callable[[], Any]]] = [
        ("pipepool", lambda: pipepool.ProcessPoolExecutor(args.parallelism, mp_context=ctx))
    ]
    if args.peers:
        pools.append(("multiprocessing.Pool", lambda: ctx.Pool(args.parallelism)))
    print(f"{args.items} calls of {fn.__name__}, p={args.parallelism}, CPU µs per item")
    for name, make in pools:
        with make() as pool:
            warm = [i[: 20 * args.parallelism] for i in inputs]
            measure(pool, [], fn, warm, 1)
            pids = (
                pool.worker_pids()
                if hasattr(pool, "worker_pids")
                else [p.pid for p in pool._pool]  # multiprocessing.Pool's own list
            )
            for chunk in (int(c) for c in args.chunks.split(",")):
                for _ in range(args.repeat):
                    parent, workers, rate = measure(pool, pids, fn, inputs, chunk)
                    print(
                        f"{name:22s} chunksize={chunk:<7d} parent {parent:.3f}  "
                        f"workers {workers:.3f}  ({rate / 1e6:.2f}M items/s, load-bound)"
                    )


if __name__ == "__main__":
    main()
