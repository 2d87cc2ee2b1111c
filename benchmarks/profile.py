"""The suite's profile mode: where a contender's time goes, cProfile of the parent and
CPU per task of each side.

    python -m benchmarks profile ppe-submit                 # tiny tasks, parallelism 2
    python -m benchmarks profile local-adaptive --measure mib -p 8
    python -m benchmarks profile ppe-map1 --tasks 50000 --top 30 --sort cumulative

One warm pool, one timed run (the suite's own sample), profiled: the calling thread
with cProfile, and for pipepool's ProcessPoolExecutor its driver thread too (a profiler
sees one thread only, so the driver's ``run`` is wrapped to profile itself). Then the
CPU time per task of every parent thread (``/proc/self/task/<tid>/schedstat``) and of
the workers (``/proc/<pid>/schedstat``), beside the wall time per task: a side whose
CPU per task is close to the wall time per task is the bottleneck.

Contender keys are those of the suite's JSON (``local-p16``, ``local-adaptive``,
``ppe-submit``, ``ppe-map1``, ``std-submit``, ...).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from . import _cpu
from .contenders import (
    NO_ADAPTIVE,
    SPECS,
    Spec,
    local_adaptive_prefetch,
    local_rounds_spec,
    local_spec,
)
from .tasks import KIB64, make_mib, noop, take

# measure -> (task function, its argument list for n calls, the default n)
MEASURES: dict[str, tuple[Callable[..., Any], Callable[[int], list[Any]], int]] = {
    "tiny": (noop, lambda n: list(range(n)), 20_000),
    "mib": (make_mib, lambda n: list(range(n)), 200),
    "kib64": (take, lambda n: [bytes(KIB64)] * n, 2_000),
    "latency": (noop, lambda n: list(range(n)), 2_000),  # one call at a time
    "startup": (noop, lambda n: [7], 1),  # pool construction + first call, --method
}


def find_spec(key: str) -> Spec:
    if key in SPECS:
        return SPECS[key]
    if key == "local-adaptive":
        adaptive = local_adaptive_prefetch()
        if adaptive is NO_ADAPTIVE:
            raise SystemExit("LocalExecutor has no adaptive prefetch")
        return local_spec(adaptive)
    if key.startswith("local-p") and key[len("local-p") :].isdigit():
        return local_spec(int(key[len("local-p") :]))
    rounds = local_rounds_spec()  # the scheduler-rounds row's contender
    if key == rounds.key:
        return rounds
    raise SystemExit(
        f"unknown contender {key!r}; one of local-adaptive, local-pN, {rounds.key}, "
        + ", ".join(SPECS)
    )


def _thread_seconds() -> dict[int, float]:
    """CPU seconds of each thread of this process, by native thread id."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError):
            pass
    return out


class DriverProfile:
    """Profile pipepool's ProcessPoolExecutor driver thread from the inside."""

    def __init__(self) -> None:
        self.profile: cProfile.Profile | _NoProfile = cProfile.Profile()
        self.tid: int | None = None
        self._original: Any = None

    def install(self) -> None:
        from pipepool import futures

        original = self._original = futures.Driver.run
        me = self

        def run(driver: Any) -> None:
            me.tid = threading.get_native_id()
            me.profile.enable()
            try:
                original(driver)
            finally:
                me.profile.disable()

        futures.Driver.run = run  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        if self._original is not None:
            from pipepool import futures

            futures.Driver.run = self._original  # type: ignore[method-assign]


# From 3.12 cProfile is built on sys.monitoring, whose profiler slot holds one profiler
# per interpreter: a second enable() raises "Another profiling tool is already active".
ONE_PROFILER = (
    "cProfile runs one profiler at a time (sys.monitoring)" if sys.version_info >= (3, 12) else None
)


class _NoProfile:
    def enable(self) -> None:
        pass

    def disable(self) -> None:
        pass


def _stats_text(profile: cProfile.Profile, sort: str, top: int) -> str:
    buf = io.StringIO()
    pstats.Stats(profile, stream=buf).strip_dirs().sort_stats(sort).print_stats(top)
    return buf.getvalue()


def main(argv: list[str] | None = None, prog: str = "python -m benchmarks profile") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("contender", help="a contender key (ppe-submit, local-p16, ...)")
    parser.add_argument("--measure", choices=sorted(MEASURES), default="tiny")
    parser.add_argument("-p", "--parallelism", type=int, default=2)
    parser.add_argument("--tasks", type=int, help="tasks in the run (default: the suite's)")
    parser.add_argument(
        "--method",
        choices=("fork", "forkserver", "spawn"),
        help="start method (default: the platform's)",
    )
    parser.add_argument("--top", type=int, default=25, help="functions to list")
    parser.add_argument("--sort", default="tottime", help="pstats sort key")
    parser.add_argument(
        "--thread",
        choices=("both", "calling", "driver"),
        default="both" if ONE_PROFILER is None else "calling",
        help="which parent thread(s) cProfile profiles (default: both; from Python 3.12 "
        "one profiler at a time, so the calling thread)",
    )
    parser.add_argument(
        "--cpu-only",
        action="store_true",
        help="no cProfile: CPU per task of each thread and the workers, "
        "undistorted by the profiler",
    )
    args = parser.parse_args(argv)
    if args.thread == "both" and ONE_PROFILER is not None:
        parser.error(f"--thread both: {ONE_PROFILER}; choose calling or driver")
    spec = find_spec(args.contender)
    fn, make_args, default_n = MEASURES[args.measure]
    calls = make_args(args.tasks or default_n)
    n = len(calls)

    driver = DriverProfile()
    driver.install()
    main_profile: cProfile.Profile | _NoProfile = cProfile.Profile()
    # A profile not asked for is a stand-in: the driver's wrapper still records its
    # thread id, for the CPU lines.
    if args.cpu_only or args.thread == "driver":
        main_profile = _NoProfile()
    if args.cpu_only or args.thread == "calling":
        driver.profile = _NoProfile()
    try:
        if args.measure == "startup":
            pids: list[int] = []
            workers_before: dict[int, float] = {}
            threads_before = _thread_seconds()
            process_before = _cpu.parent_seconds()
            started = time.perf_counter()
            main_profile.enable()
            adapter = spec.make(args.parallelism, args.method)
            results = [adapter.call(fn, calls[0])]
            main_profile.disable()
        else:
            adapter = spec.make(args.parallelism, args.method)
            adapter.run(noop, list(range(4 * args.parallelism)))  # warm: every worker up
            pids = adapter.pids()
            workers_before = _cpu.snapshot(pids)
            threads_before = _thread_seconds()
            process_before = _cpu.parent_seconds()
            started = time.perf_counter()
            main_profile.enable()
            if args.measure == "latency":
                results = [adapter.call(fn, a) for a in calls]
            else:
                results = adapter.run(fn, calls)
            main_profile.disable()
        elapsed = time.perf_counter() - started
        threads_after = _thread_seconds()
        process_used = _cpu.parent_seconds() - process_before
        workers_after = _cpu.snapshot(sorted(set(pids) | set(adapter.pids())))
        assert len(results) == n
        adapter.close()
    finally:
        driver.uninstall()

    per_task = 1e6 / n
    how = (
        "not profiled"
        if args.cpu_only
        else "profiled (cProfile slows the parent: read the shares, not the rate)"
    )
    print(f"{spec.label}: {args.measure}, {n:,} tasks, parallelism {args.parallelism}, {how}")
    print(f"wall {elapsed:.3f} s = {elapsed * per_task:,.1f} µs/task ({n / elapsed:,.0f} tasks/s)")
    main_tid = threading.get_native_id()
    for tid, after in sorted(threads_after.items()):
        used = after - threads_before.get(tid, 0.0)
        if used < 0.001:
            continue
        name = (
            "main thread"
            if tid == main_tid
            else "driver thread"
            if tid == driver.tid
            else f"thread {tid}"
        )
        print(f"  parent {name:<14} CPU {used * per_task:8.1f} µs/task")
    # The suite's figure: threads that ended before the run did (a feeder) count here only.
    print(f"  parent, every thread CPU {process_used * per_task:8.1f} µs/task (getrusage)")
    workers_used = _cpu.used_since(workers_before, workers_after)
    print(
        f"  workers (all {len(workers_after)}) CPU {workers_used * per_task:8.1f} µs/task "
        f"({workers_used / len(workers_after) * per_task if workers_after else 0:.1f} "
        "per worker)"
    )
    if args.cpu_only:
        return 0
    if ONE_PROFILER is not None:
        print(f"\n(Python 3.12+: {ONE_PROFILER}; it may list other threads' calls too)")
    if isinstance(main_profile, cProfile.Profile):
        print(f"\n== parent, calling thread: top {args.top} by {args.sort} ==")
        print(_stats_text(main_profile, args.sort, args.top))
    if driver.tid is not None and isinstance(driver.profile, cProfile.Profile):
        print(f"== parent, driver thread: top {args.top} by {args.sort} ==")
        print(_stats_text(driver.profile, args.sort, args.top))
    return 0
