"""``pipepool bench``: a quick race of pipepool against the standard library's pools.

The workload is built in: many no-op calls, so what is measured is the pool's own
overhead per task (dispatch, pipes, pickling, bookkeeping), which is what decides how
small a task can be before parallelism stops paying.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .executor import LocalExecutor
from .futures import ProcessPoolExecutor


def noop(x: int) -> int:
    """The built-in task: return the argument (pickled both ways, no work)."""
    return x


def run_local(tasks: int, workers: int, prefetch: int | None, impl: str | None = None) -> float:
    """Tasks/s of ``tasks`` no-ops through a warm LocalExecutor (``impl``: which loop)."""
    with LocalExecutor(workers, prefetch=prefetch, _loop_impl=impl) as ex:
        ex.queue(-1, noop, -1)
        ex.wait_until_done()  # warm: workers are up before the clock starts
        ex.get_event_buffer()
        started = time.perf_counter()
        for i in range(tasks):
            ex.queue(i, noop, i)
        ex.wait_until_done()
        elapsed = time.perf_counter() - started
        events = ex.get_event_buffer()
    assert len(events) == tasks and all(e.result == k for k, e in events.items())
    return tasks / elapsed


def run_submit(tasks: int, workers: int, pool_class: type = ProcessPoolExecutor) -> float:
    with pool_class(workers) as pool:
        list(pool.map(noop, range(workers)))
        started = time.perf_counter()
        futures = [pool.submit(noop, i) for i in range(tasks)]
        results = [f.result() for f in futures]
        elapsed = time.perf_counter() - started
    assert results == list(range(tasks))
    return tasks / elapsed


def run_mp_pool(tasks: int, workers: int) -> float:
    with multiprocessing.Pool(workers) as pool:
        pool.map(noop, range(workers))
        started = time.perf_counter()
        results = sorted(pool.imap_unordered(noop, range(tasks), chunksize=1))
        elapsed = time.perf_counter() - started
    assert results == list(range(tasks))
    return tasks / elapsed


def race(
    tasks: int = 20000,
    workers: int | None = None,
    rounds: int = 3,
    out: Callable[[str], object] = print,
) -> dict[str, float]:
    """Run every contender ``rounds`` times, interleaved; print and return median tasks/s."""
    workers = workers or os.cpu_count() or 1
    contenders: dict[str, Callable[[], float]] = {
        "pipepool LocalExecutor (prefetch=None, adaptive)": lambda: run_local(tasks, workers, None),
        "pipepool LocalExecutor (prefetch 1)": lambda: run_local(tasks, workers, 1),
        "pipepool ProcessPoolExecutor submit": lambda: run_submit(tasks, workers),
        "concurrent.futures.ProcessPoolExecutor submit": lambda: run_submit(
            tasks, workers, concurrent.futures.ProcessPoolExecutor
        ),
        "multiprocessing.Pool imap_unordered(chunksize=1)": lambda: run_mp_pool(tasks, workers),
    }
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    out(
        f"pipepool bench: {tasks} no-op tasks, {workers} workers, {rounds} rounds, "
        f"median tasks/s (machine: {os.cpu_count()} cores)"
    )
    for _ in range(rounds):
        for name, run in contenders.items():  # interleaved: noise hits everyone alike
            samples[name].append(run())
    medians = {name: statistics.median(values) for name, values in samples.items()}
    stdlib = medians["concurrent.futures.ProcessPoolExecutor submit"]
    width = max(map(len, medians))
    out(f"{'contender':<{width}}  {'tasks/s':>10}  {'vs stdlib':>9}")
    for name, value in medians.items():
        out(f"{name:<{width}}  {value:>10,.0f}  {value / stdlib:>8.2f}x")
    return medians


def find_suite_root() -> Path | None:
    """The source checkout this very pipepool was imported from, or None.

    Only a checkout whose ``src/pipepool`` is this package counts (an editable install,
    or ``PYTHONPATH=src``): its ``benchmarks/`` is part of the code already running. The
    current directory never counts: any folder may hold a ``benchmarks/suite.py``, and
    importing it would run whatever it holds. An installed wheel has no suite at all.
    """
    package = Path(__file__).resolve().parent
    root = package.parents[1]
    if package.parent.name != "src" or not (root / "pyproject.toml").is_file():
        return None
    if not (root / "benchmarks" / "suite.py").is_file():
        return None
    return root


def run_suite(argv: list[str]) -> int:
    """``pipepool bench --full ARGS``: the suite of this checkout's ``benchmarks/``."""
    root = find_suite_root()
    if root is None:
        print(
            "pipepool bench --full: the full benchmark suite is not installed with the "
            "package; from the root of a pipepool source checkout run: "
            f"python -m benchmarks {' '.join(argv)}".rstrip(),
            file=sys.stderr,
        )
        return 2
    # First on sys.path (spawned workers get the parent's path): ahead of the current
    # directory, which ``python -m pipepool`` puts there.
    sys.path.insert(0, str(root))
    import benchmarks

    where = Path(benchmarks.__file__ or "").resolve().parent
    if where != root / "benchmarks":  # imported earlier from somewhere else
        print(
            f"pipepool bench --full: 'benchmarks' was imported from {where}, not {root}",
            file=sys.stderr,
        )
        return 2
    from benchmarks.suite import main

    return main(argv, prog="pipepool bench --full")
