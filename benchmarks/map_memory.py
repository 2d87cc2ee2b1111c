"""Parent memory of ``ProcessPoolExecutor.map`` over an endless input, with ``buffersize``.

``map(fn, itertools.count(), buffersize=B)`` reads its input lazily and keeps at most B
tasks (chunks) in flight, so it yields its first result at once and the parent's memory
stays flat however many items pass through. Without ``buffersize`` (``--eager``, over a
finite ``range``) the stdlib semantics apply: every input is submitted up front, one
Future per chunk, and the parent grows with the input. This prints RSS samples; it is a
benchmark to read, not a timed test.

    PYTHONPATH=src python benchmarks/map_memory.py                 # 1,000,000 items
    PYTHONPATH=src python benchmarks/map_memory.py --eager --items 200000
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import resource
import time
from collections.abc import Generator

from pipepool import IMPLEMENTATION, ProcessPoolExecutor


def work(i: int) -> int:
    return i


def rss_mib() -> float:
    """Resident set size of this process now (Linux /proc; peak RSS elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mib()


def peak_rss_mib() -> float:
    # ru_maxrss is KiB on Linux (bytes on macOS, where this is only approximate).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--chunksize", type=int, default=100)
    parser.add_argument("--buffersize", type=int, default=8, help="chunks in flight")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--start-method", default=None, help="fork, spawn or forkserver")
    parser.add_argument("--samples", type=int, default=10, help="RSS samples printed")
    parser.add_argument(
        "--eager",
        action="store_true",
        help="no buffersize, over range(items): the stdlib behaviour",
    )
    args = parser.parse_args()

    context = multiprocessing.get_context(args.start_method)
    every = max(1, args.items // args.samples)
    mode = "eager, range(items)" if args.eager else f"buffersize={args.buffersize}, count()"
    print(
        f"pipepool {IMPLEMENTATION} loop, {args.workers} workers "
        f"({context.get_start_method()}), chunksize={args.chunksize}, {mode}"
    )
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        pool.submit(work, 0).result()  # workers up: start-up is not what this measures
        baseline = rss_mib()
        start = time.perf_counter()
        if args.eager:
            results = pool.map(work, range(args.items), chunksize=args.chunksize)
        else:
            results = pool.map(
                work, itertools.count(), chunksize=args.chunksize, buffersize=args.buffersize
            )
        print(f"map() returned after {time.perf_counter() - start:.3f} s")
        first = next(results)
        assert first == 0
        print(f"first result after {time.perf_counter() - start:.3f} s")
        print(f"{'items':>10} {'seconds':>8} {'items/s':>9} {'RSS MiB':>8} {'vs start':>9}")
        samples = []
        for n, value in enumerate(results, start=1):
            if value != n:
                raise AssertionError(f"item {n} came back as {value}")
            if (n + 1) % every == 0 or n + 1 == args.items:
                elapsed = time.perf_counter() - start
                rss = rss_mib()
                samples.append(rss)
                print(
                    f"{n + 1:>10,} {elapsed:>8.2f} {(n + 1) / elapsed:>9,.0f} "
                    f"{rss:>8.1f} {rss - baseline:>+9.1f}"
                )
            if n + 1 >= args.items:
                break
        assert isinstance(results, Generator)  # map's results are a generator, so:
        results.close()  # stop reading count(); the chunks still in flight are cancelled
    print(
        f"RSS before map {baseline:.1f} MiB; samples min {min(samples):.1f}, "
        f"max {max(samples):.1f}, last-first {samples[-1] - samples[0]:+.1f} MiB; "
        f"peak RSS of the process {peak_rss_mib():.1f} MiB"
    )


if __name__ == "__main__":
    main()
