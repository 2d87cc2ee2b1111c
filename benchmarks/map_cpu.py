"""CPU per item of a chunked ``map``, parent and workers apart: a load-robust measure.

    python -m benchmarks.map_cpu                       # 1,000,000 tiny calls, chunks of 10,000
    python -m benchmarks.map_cpu --items 200000 --chunks 1000,10000 --iterables 2
    python -m benchmarks.map_cpu --peers              # multiprocessing.Pool.map beside it
    python -m benchmarks.map_cpu --peers --fresh --floor   # the suite's way, and the floor

CPU time (``getrusage`` for the parent, every thread; ``/proc/<pid>/schedstat`` for the
workers) moves little with the machine's load, where items per second do not: use it to
develop the chunk path on a busy machine, and the suite's quiet runs for throughput.
``--iterables 2`` maps ``fn(x, y)`` over two lists (``zip`` semantics, a tuple per item);
``--source range`` maps over a ``range`` instead of a list.

``--fresh`` measures each map on a new pool (warmed with a few calls), as the suite does:
the input list was made before the pool forked, so the parent's first touch of each of its
pages (the reference counts that slicing and pickling change) copies that page, which it
shares with the workers (copy-on-write); a pool reused for several maps pays that once.
``--floor`` prints what the parent cannot avoid without a pool: slicing and pickling the
arguments, unpickling the results, handing them out into the caller's list and freeing
it, in one process with no pipe: the floor of any pool that pickles, without the freeing
(as the suite's parent CPU target counts) and with it (as this tool's rows count).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import multiprocessing.pool
import pickle
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


def floor(inputs: list[Any], chunk: int) -> tuple[float, float]:
    """Parent CPU µs per item a pickling pool cannot avoid: a chunk sliced and pickled,
    the same bytes unpickled as its results and handed out into one list; without, then
    with, the caller's freeing of that list (the first input only)."""
    source = inputs[0]
    n = len(source)
    c0 = _cpu.parent_seconds()
    out = list(
        itertools.chain.from_iterable(
            pickle.loads(pickle.dumps(source[i : i + chunk], pickle.HIGHEST_PROTOCOL))
            for i in range(0, n, chunk)
        )
    )
    c1 = _cpu.parent_seconds()
    del out
    c2 = _cpu.parent_seconds()
    return 1e6 * (c1 - c0) / n, 1e6 * (c2 - c0) / n


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--chunks", default="10000", help="chunk sizes, comma-separated")
    parser.add_argument("--iterables", type=int, choices=(1, 2), default=1)
    parser.add_argument("-p", "--parallelism", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--peers", action="store_true", help="multiprocessing.Pool too")
    parser.add_argument("--source", choices=("list", "range"), default="list")
    parser.add_argument("--fresh", action="store_true", help="a new pool for each map")
    parser.add_argument("--floor", action="store_true", help="the parent's floor, no pool")
    args = parser.parse_args(argv)
    import pipepool

    ctx = multiprocessing.get_context("fork")
    fn = noop if args.iterables == 1 else add
    make_input = range if args.source == "range" else lambda n: list(range(n))
    inputs: list[Any] = [make_input(args.items) for _ in range(args.iterables)]
    pools: list[tuple[str, Callable[[], Any]]] = [
        ("pipepool", lambda: pipepool.ProcessPoolExecutor(args.parallelism, mp_context=ctx))
    ]
    if args.peers:
        pools.append(("multiprocessing.Pool", lambda: ctx.Pool(args.parallelism)))
    print(f"{args.items} calls of {fn.__name__}, p={args.parallelism}, CPU µs per item")
    chunks = [int(c) for c in args.chunks.split(",")]
    if args.floor:
        for chunk in chunks:
            runs = sorted(floor(inputs, chunk) for _ in range(args.repeat))
            work, freed = runs[args.repeat // 2]
            print(
                f"{'floor (one process)':22s} chunksize={chunk:<7d} parent {work:.3f}  "
                f"({freed:.3f} with the caller's freeing, as the rows below count)"
            )
    for name, make in pools:
        for chunk in chunks:
            # One pool for every repeat, or (--fresh) a new pool for each.
            for maps in [1] * args.repeat if args.fresh else [args.repeat]:
                with make() as pool:
                    measure(pool, [], fn, [seq[: 20 * args.parallelism] for seq in inputs], 1)
                    pids = (
                        pool.worker_pids()
                        if hasattr(pool, "worker_pids")
                        else [p.pid for p in pool._pool]  # multiprocessing.Pool's own list
                    )
                    for _ in range(maps):
                        parent, workers, rate = measure(pool, pids, fn, inputs, chunk)
                        print(
                            f"{name:22s} chunksize={chunk:<7d} parent {parent:.3f}  "
                            f"workers {workers:.3f}  ({rate / 1e6:.2f}M items/s, load-bound)"
                        )


if __name__ == "__main__":
    main()
