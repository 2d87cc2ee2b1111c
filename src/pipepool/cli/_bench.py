"""``pipepool bench``: a quick race of pipepool against the standard library's pools.

The workload is built in: many no-op calls, so what is measured is the pool's own
overhead per task (dispatch, pipes, pickling, bookkeeping), which is what decides how
small a task can be before parallelism stops paying.

The full benchmark suite is development tooling in the source repository
(``python -m benchmarks`` from a checkout); the package never imports it.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable

from .._cli_common import default_jobs
from ..executor import LocalExecutor
from ..futures import ProcessPoolExecutor


def noop(x: int) -> int:
    """The built-in task: return the argument (pickled both ways, no work)."""
    return x


def run_local(tasks: int, workers: int, prefetch: int | None, impl: str | None = None) -> float:
    """Tasks/s of ``tasks`` no-ops through a warm LocalExecutor (``impl``: which loop)."""
    with LocalExecutor(workers, prefetch=prefetch, loop_impl=impl) as ex:
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
    if tasks < 1 or rounds < 1:
        raise ValueError(f"tasks and rounds must be at least 1, not {tasks} and {rounds}")
    workers = workers or default_jobs()
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
    load_before = _load()
    for _ in range(rounds):
        for name, run in contenders.items():  # interleaved: noise hits everyone alike
            samples[name].append(run())
    medians = {name: statistics.median(values) for name, values in samples.items()}
    stdlib = medians["concurrent.futures.ProcessPoolExecutor submit"]
    width = max(map(len, medians))
    out(f"{'contender':<{width}}  {'tasks/s':>10}  {'vs stdlib':>9}")
    for name, value in medians.items():
        out(f"{name:<{width}}  {value:>10,.0f}  {value / stdlib:>8.2f}x")
    if load_before is not None:
        # Other work slows the peers' helper threads more than pipepool: a busy machine
        # flatters the ratios, so say how busy it was.
        out(
            f"1-minute load average {load_before:.2f} before, {_load():.2f} after "
            f"({os.cpu_count()} cores): other work slows the peers most, so a busy "
            "machine flatters these ratios"
        )
    return medians


def _load() -> float | None:
    """The 1-minute load average, None where the system has none."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None
