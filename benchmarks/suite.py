"""The benchmark suite: pipepool against the pools a user would pick instead, in one run.

Measures (at each parallelism of ``--parallelism``, 2 and 8 by default):

=========  ============================================================================
tiny       20,000 no-op calls submitted one by one and all collected: tasks/s, and the
           CPU time per task of the parent (all its threads) and of the workers
mib        200 tasks each returning 1 MiB: MB/s (10^6 bytes)
kib64      2,000 tasks each sending 64 KiB: MB/s
latency    one no-op at a time, 2,000 round trips: p50 and p99 in µs
startup    pool construction + first result, with fork, forkserver and spawn: ms
calls      Python-level calls per task in the parent over a tiny-task batch (a profile
           function in every parent thread): a count, which load does not move
sweep      tiny tasks (fewer per point) at parallelism 1, 2, 4, ... 64: tasks/s
hol        one 10 s task, then 1,000 tasks of 1 ms, on 4 workers: seconds until the
           short ones are done (head-of-line blocking), on a fresh pool (cold) and on
           one that ran no-ops first (warm: an adaptive dispatch depth has seen tiny tasks)
joblib-*   joblib's Parallel(n_jobs=2), backend "pipepool" vs "loky" (benchmarks/
           joblib_adapters.py): the tiny calls (auto-batching, the pool reused from a
           warm-up call), joblib's sequential backend on the same calls (what the
           backends' overhead is counted above), 200 calls each returning a 1 MiB
           numpy array, and 8 calls each returning a fresh 100 MB array, then 8
           taking one (memmapped by both)
=========  ============================================================================

Every measure runs its contenders interleaved (round 1: A B C, round 2: B C A, ...),
each sample on a fresh pool whose workers are up before the clock starts (except for
``startup``), and reports medians: on a shared machine noise then hits everyone alike.
Contenders whose package is missing (loky) are skipped with a note.

Every run records how busy the machine was (``benchmarks/_noise.py``): the 1-minute load
average at its start and end, and the CPU time other processes used while it ran. A run
on a busy machine is marked noisy in its header, its full-configuration results go to
``benchmarks/results/noisy/`` instead of replacing the published ones, and it never
rewrites the README's table (``--readme``, ``benchmarks/readme.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import gc
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pipepool

from . import _cpu, _noise, readme, report
from ._calls import CallCounter
from .contenders import (
    MAP_CHUNK,
    NO_ADAPTIVE,
    SPECS,
    Adapter,
    Spec,
    local_adaptive_prefetch,
    local_rounds_spec,
    local_spec,
    missing_requirement,
    pipepool_map_auto,
)
from .tasks import KIB64, MIB, make_mib, noop, take

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MEASURES = (
    "tiny",
    "mib",
    "kib64",
    "latency",
    "startup",
    "calls",
    "sweep",
    "hol",
    "map",
    "timeouts",
    "joblib-tiny",
    "joblib-mib",
    "joblib-arrays",
)
START_METHODS = ("fork", "forkserver", "spawn")


@dataclass
class Config:
    parallelism: list[int] = field(default_factory=lambda: [2, 8])
    rounds: int = 5  # interleaved rounds of tiny, mib, kib64, latency and startup
    tiny_tasks: int = 20_000
    mib_tasks: int = 200
    kib_tasks: int = 2_000
    latency_calls: int = 2_000
    methods: list[str] = field(default_factory=lambda: list(START_METHODS))
    startup_rounds: int = 9  # start-up samples are short and noisy: more of them (cheap)
    calls_rounds: int = 1  # a count, not a time: one round says it (profiled runs are slow)
    sweep: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64])
    sweep_tasks: int = 4_000  # per point: start-up is excluded, so a few thousand suffice
    sweep_rounds: int = 3
    hol_long: float = 10.0
    hol_short: float = 0.001
    hol_count: int = 1_000
    hol_workers: int = 4
    hol_rounds: int = 1  # a yes/no measure: blocked short tasks wait the long one out
    prefetches: list[int] = field(default_factory=lambda: [1, 16, 64])
    array_mb: int = 100  # joblib-arrays: the size of each array, MB (10^6 bytes)
    array_calls: int = 8  # joblib-arrays: calls per Parallel, each way
    sample_timeout: float = 300.0  # s; a sample that takes longer dumps stacks and exits
    map_items: int = 1_000_000  # map: tiny calls of one chunked map
    map_rounds: int = 3
    map_parent_cpu_us: float = 0.06  # map: the parent CPU target per item (issue 32)
    timeout_tasks: int = 16  # timeouts: a burst of tasks that all overrun their limit
    timeout_limit: float = 0.2  # s each may run
    timeout_sleep: float = 30.0  # s each would run


PRESETS = {
    "full": Config(),
    # A smoke run of every measure in about a minute: numbers indicative only.
    "quick": Config(
        rounds=2,
        tiny_tasks=2_000,
        mib_tasks=20,
        kib_tasks=200,
        latency_calls=200,
        startup_rounds=3,
        sweep=[1, 2, 4, 8, 16],
        sweep_tasks=1_000,
        sweep_rounds=1,
        hol_long=2.0,
        hol_count=200,
        hol_rounds=1,
        array_calls=4,
        map_items=100_000,
        map_rounds=1,
        timeout_tasks=8,
    ),
    # The test suite's configuration: a few seconds, checks the outputs, not the numbers.
    "smoke": Config(
        parallelism=[2],
        rounds=1,
        tiny_tasks=200,
        mib_tasks=4,
        kib_tasks=20,
        latency_calls=30,
        methods=["fork"],
        startup_rounds=1,
        sweep=[1, 2],
        sweep_tasks=100,
        sweep_rounds=1,
        hol_long=0.5,
        hol_count=20,
        hol_rounds=1,
        prefetches=[1, 16],
        sample_timeout=60.0,
        array_mb=2,
        array_calls=2,
        map_items=2_000,
        map_rounds=1,
        timeout_tasks=4,
        timeout_limit=0.1,
    ),
}

# What each measure reports: title, unit, the primary field and which way is better.
MEASURE_INFO: dict[str, dict[str, Any]] = {
    "tiny": {
        "title": "Tiny tasks: {n:,} no-op calls submitted one by one, all collected",
        "unit": "tasks/s",
        "field": "rate",
        "better": "higher",
    },
    "mib": {
        "title": "Payload: {n:,} tasks each returning 1 MiB",
        "unit": "MB/s",
        "field": "mb_s",
        "better": "higher",
    },
    "kib64": {
        "title": "Payload: {n:,} tasks each sending 64 KiB",
        "unit": "MB/s",
        "field": "mb_s",
        "better": "higher",
    },
    "latency": {
        "title": "Round-trip latency: one no-op at a time, {n:,} calls per sample",
        "unit": "µs p50",
        "field": "p50_us",
        "better": "lower",
    },
    "startup": {
        "title": "Start-up: pool construction + first task's result",
        "unit": "ms",
        "field": "ms",
        "better": "lower",
    },
    "calls": {
        "title": "Python-level calls per task in the parent: {n:,} no-op calls, counted by "
        "a profile function in every parent thread",
        "unit": "calls/task",
        "field": "py_calls",
        "better": "lower",
    },
    "sweep": {
        "title": "Parallelism sweep: {n:,} no-op calls per point",
        "unit": "tasks/s",
        "field": "rate",
        "better": "higher",
    },
    "joblib-tiny": {
        "title": "joblib Parallel(n_jobs=2): {n:,} no-op calls, auto-batching, pool reused",
        "unit": "tasks/s",
        "field": "rate",
        "better": "higher",
    },
    "joblib-mib": {
        "title": "joblib Parallel(n_jobs=2): {n:,} calls each returning a 1 MiB numpy array",
        "unit": "MB/s",
        "field": "mb_s",
        "better": "higher",
    },
    "joblib-arrays": {
        "title": "joblib Parallel(n_jobs=2): {n} calls each returning a fresh {mb} MB numpy "
        "array (mb_s), then {n} each taking the same one (args_mb_s; memmapped by both)",
        "unit": "MB/s",
        "field": "mb_s",
        "better": "higher",
    },
    "map": {
        "title": "Chunked map: {n:,} no-op calls from a list in one map, {chunk:,} per chunk "
        "or the pool's own default chunking (chunks2: two iterables, a pair per call)",
        "unit": "items/s",
        "field": "rate",
        "better": "higher",
    },
    "timeouts": {
        "title": "Per-task timeouts: a burst of {n} tasks of {sleep:g} s, each limited to "
        "{limit:g} s: seconds until all have failed with their timeout",
        "unit": "s",
        "field": "seconds",
        "better": "lower",
    },
    "hol": {
        "title": "Long tasks: one {long:g} s task, then {n:,} of {short:g} s, on {w} "
        "workers: time until the short ones are done (cold: a fresh pool; "
        "warm: it ran no-ops first)",
        "unit": "s",
        "field": "seconds",
        "better": "lower",
    },
}


class SampleError(Exception):
    """A sample whose results were wrong (a contender that lost or changed results)."""


# -- samples ---------------------------------------------------------------------------------


def _open(spec: Spec, parallelism: int, method: str | None = None, warm: bool = True) -> Adapter:
    adapter = spec.make(parallelism, method)
    if warm:
        try:
            # Enough work that every worker is up (some pools start them on demand).
            adapter.run(noop, list(range(4 * parallelism)))
        except BaseException:
            adapter.abort()
            raise
    return adapter


def throughput_sample(
    spec: Spec,
    parallelism: int,
    fn: Callable[[Any], Any],
    args: list[Any],
    check: Callable[[list[Any]], bool],
    nbytes: int = 0,
) -> dict[str, float]:
    """One timed ``run`` on a fresh, warm pool: rate, MB/s, parent and worker CPU."""
    adapter = _open(spec, parallelism)
    try:
        gc.collect()
        pids = adapter.pids()
        workers_before = _cpu.snapshot(pids)
        parent_before = _cpu.parent_seconds()
        started = time.perf_counter()
        results = adapter.run(fn, args)
        elapsed = time.perf_counter() - started
        parent_used = _cpu.parent_seconds() - parent_before
        workers_used = _cpu.used_since(
            workers_before, _cpu.snapshot(sorted(set(pids) | set(adapter.pids())))
        )
        if not check(results):
            raise SampleError(f"{spec.label}: wrong results")
    except BaseException:
        adapter.abort()
        raise
    adapter.close()
    n = len(args)
    out = {
        "seconds": elapsed,
        "rate": n / elapsed,
        "parent_cpu_us": parent_used / n * 1e6,
        "worker_cpu_us": workers_used / n * 1e6,
    }
    if nbytes:
        out["mb_s"] = nbytes * n / elapsed / 1e6
    return out


def calls_sample(
    spec: Spec, parallelism: int, args: list[Any], check: Callable[[list[Any]], bool]
) -> dict[str, float]:
    """Python-level and builtin calls per task in the parent (all its threads), over one
    ``run`` on a fresh, warm pool. The profile function is in place before the pool
    exists, so the threads the pool starts count too; it counts only during the run."""
    counter = CallCounter()
    counter.install()
    try:
        adapter = _open(spec, parallelism)
        try:
            counter.on = True
            results = adapter.run(noop, args)
            counter.on = False
            if not check(results):
                raise SampleError(f"{spec.label}: wrong results")
        except BaseException:
            counter.on = False
            adapter.abort()
            raise
        adapter.close()
    finally:
        counter.uninstall()
    n = len(args)
    return {"py_calls": counter.py_calls / n, "c_calls": counter.c_calls / n}


def arrays_sample(spec: Spec, parallelism: int, nbytes: int, calls: int) -> dict[str, float]:
    """One Parallel call of ``calls`` tasks each returning a fresh ``nbytes`` array, then
    one of ``calls`` tasks each taking the same such array, on a fresh, warm pool."""
    from .joblib_arrays import checksum, make_array

    adapter = _open(spec, parallelism)
    try:
        gc.collect()
        started = time.perf_counter()
        results = adapter.run(make_array, [nbytes] * calls)
        results_s = time.perf_counter() - started
        if not all(a.nbytes == nbytes for a in results):
            raise SampleError(f"{spec.label}: wrong results")
        array = results[0]
        del results
        expected = checksum(array)
        started = time.perf_counter()
        sums = adapter.run(checksum, [array] * calls)
        args_s = time.perf_counter() - started
        if sums != [expected] * calls:
            raise SampleError(f"{spec.label}: wrong checksums")
    except BaseException:
        adapter.abort()
        raise
    adapter.close()
    return {
        "seconds": results_s,
        "mb_s": nbytes * calls / results_s / 1e6,
        "args_seconds": args_s,
        "args_mb_s": nbytes * calls / args_s / 1e6,
    }


def latency_sample(spec: Spec, parallelism: int, calls: int) -> dict[str, Any]:
    adapter = _open(spec, parallelism)
    try:
        for i in range(min(50, calls)):
            adapter.call(noop, i)
        gc.collect()
        times = []
        clock = time.perf_counter_ns
        call = adapter.call
        for i in range(calls):
            started = clock()
            if call(noop, i) != i:
                raise SampleError(f"{spec.label}: wrong result")
            times.append((clock() - started) / 1000)
    except BaseException:
        adapter.abort()
        raise
    adapter.close()
    return {
        "p50_us": percentile(times, 50),
        "p99_us": percentile(times, 99),
        "mean_us": statistics.fmean(times),
        "_times": times,
    }


STARTUP_SETTLE = 0.02  # s of quiet before a start-up sample: the previous pool's workers
# have been joined, but the kernel may still be tearing their memory down


def startup_sample(spec: Spec, parallelism: int, method: str) -> dict[str, float]:
    gc.collect()
    time.sleep(STARTUP_SETTLE)
    started = time.perf_counter()
    adapter = _open(spec, parallelism, method, warm=False)
    try:
        if adapter.call(noop, 7) != 7:
            raise SampleError(f"{spec.label}: wrong result")
        elapsed = time.perf_counter() - started
    except BaseException:
        adapter.abort()
        raise
    closing = time.perf_counter()
    adapter.close()
    return {"ms": elapsed * 1e3, "close_ms": (time.perf_counter() - closing) * 1e3}


def timeouts_sample(spec: Spec, parallelism: int, cfg: Config) -> dict[str, float]:
    """A burst of tasks that all overrun their per-task timeout, on a warm pool."""
    adapter = _open(spec, parallelism)
    try:
        seconds = adapter.timeouts(cfg.timeout_tasks, cfg.timeout_limit, cfg.timeout_sleep)
    except BaseException:
        adapter.abort()
        raise
    adapter.abort()  # killed workers may still be replaced: do not wait on them
    return {"seconds": seconds}


def hol_sample(spec: Spec, cfg: Config, warm: bool) -> dict[str, float]:
    """Warm: the pool ran no-ops first (so an adaptive depth has seen tiny tasks, as in a
    pool that has been in use); cold: the long task is the pool's first."""
    adapter = _open(spec, cfg.hol_workers, warm=warm)
    try:
        seconds = adapter.shorts_done(cfg.hol_long, cfg.hol_short, cfg.hol_count)
    finally:
        adapter.abort()  # do not wait out the long task
    return {"seconds": seconds}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of unsorted values."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


# -- the run ---------------------------------------------------------------------------------


class Suite:
    def __init__(self, cfg: Config, log: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.log = log
        self.notes: list[str] = []
        self.measures: dict[str, dict[str, Any]] = {}
        self.latency_times: dict[str, dict[str, list[float]]] = {}
        self.contenders: dict[str, dict[str, str]] = {}
        self.skipped: set[str] = set()
        adaptive = local_adaptive_prefetch()
        self.adaptive_prefetch = adaptive is not NO_ADAPTIVE
        local = [local_spec(p) for p in cfg.prefetches]
        if self.adaptive_prefetch:
            # One setting for tiny and long tasks alike: the one to judge the design by.
            local.insert(0, local_spec(adaptive))
        self.local_specs = local
        if adaptive == "default":  # the defaults, driven the way the README shows
            self.local_specs = [local_rounds_spec(), *local]
        self.local: Spec = local[0]  # without an adaptive one: chosen after `tiny`
        self.local_why = (
            f"{local[0].label.split('(', 1)[1].rstrip(')')}: LocalExecutor's adaptive "
            "dispatch depth, used wherever one LocalExecutor row stands for pipepool "
            "(fixed depths are shown beside it in tiny and long tasks)"
            if self.adaptive_prefetch
            else f"prefetch {cfg.prefetches[0]}: `tiny` was not run to choose one"
        )
        for spec in [*local, *SPECS.values()]:
            note = missing_requirement(spec)
            if note:
                self.skipped.add(spec.key)
                if note not in self.notes:
                    self.notes.append(note)

    def specs(self, *keys: str) -> list[Spec]:
        chosen = []
        for key in keys:
            spec = self.local if key == "local" else SPECS[key]
            if spec.key not in self.skipped:
                chosen.append(spec)
        return chosen

    def interleave(
        self,
        measure: str,
        params: list[Any],
        specs: list[Spec],
        rounds: int,
        sample: Callable[[Spec, Any], dict[str, Any]],
    ) -> None:
        """``rounds`` rounds; in each, every param, every contender (rotated per round)."""
        table = self.measures.setdefault(measure, {"params": {}})["params"]
        for spec in specs:
            self.contenders[spec.key] = {"label": spec.label, "family": spec.family}
        for r in range(rounds):
            for param in params:
                shift = r % len(specs)
                for spec in specs[shift:] + specs[:shift]:
                    samples = table.setdefault(_param_key(param), {}).setdefault(spec.key, [])
                    faulthandler.dump_traceback_later(self.cfg.sample_timeout, exit=True)
                    try:
                        s = sample(spec, param)
                    except Exception as exc:  # one contender failing must not sink the run
                        s = {"error": f"{type(exc).__name__}: {exc}"}
                    finally:
                        faulthandler.cancel_dump_traceback_later()
                    times = s.pop("_times", None)
                    if times is not None:
                        self.latency_times.setdefault(_param_key(param), {}).setdefault(
                            spec.key, []
                        ).extend(times)
                    samples.append(s)
                    self.log(
                        f"{measure} round {r + 1}/{rounds} {_param_key(param)}: "
                        f"{spec.label}: {_brief(s)}"
                    )

    # -- each measure -------------------------------------------------------------------

    def run_tiny(self) -> None:
        cfg = self.cfg
        args = list(range(cfg.tiny_tasks))
        keys = [
            "ppe-submit",
            "ppe-map1",
            "ppe-map-auto",
            "std-submit",
            "std-map1",
            "std-map-auto",
            "mp-imap1",
            "mp-map1",
            "mp-apply",
            "loky-submit",
            "mpire-map1",
            "mpire-apply",
            "pebble-map1",
            "pebble-schedule",
            "airflow",
        ]
        specs = [s for s in self.local_specs if s.key not in self.skipped] + self.specs(*keys)
        self.interleave(
            "tiny",
            cfg.parallelism,
            specs,
            cfg.rounds,
            lambda s, p: throughput_sample(s, p, noop, args, lambda r: sorted(r) == args),
        )
        self.choose_local()

    def choose_local(self) -> None:
        """The LocalExecutor configuration every later measure uses (reported)."""
        if self.adaptive_prefetch:
            return
        params = self.measures["tiny"]["params"]
        p = "2" if "2" in params else next(iter(params))
        rates = {}
        for spec in self.local_specs:
            values = [s["rate"] for s in params[p].get(spec.key, []) if "rate" in s]
            if values:
                rates[spec.key] = statistics.median(values)
        if not rates:
            return
        best = max(rates, key=rates.__getitem__)
        self.local = next(s for s in self.local_specs if s.key == best)
        tried = ", ".join(
            f"{s.key[len('local-p') :]} ({rates.get(s.key, 0):,.0f} tasks/s)"
            for s in self.local_specs
        )
        self.local_why = (
            f"prefetch {best[len('local-p') :]}, the best median tasks/s in "
            f"`tiny` at p={p} of prefetch {tried} (LocalExecutor has no "
            "adaptive default yet)"
        )

    PAYLOAD_KEYS = (
        "local",
        "ppe-submit",
        "std-submit",
        "mp-apply",
        "mp-imap1",
        "loky-submit",
        "mpire-apply",
        "pebble-schedule",
        "airflow",
    )

    def run_mib(self) -> None:
        args = list(range(self.cfg.mib_tasks))
        self.interleave(
            "mib",
            self.cfg.parallelism,
            self.specs(*self.PAYLOAD_KEYS, "raw-pipe"),
            self.cfg.rounds,
            lambda s, p: throughput_sample(
                s,
                p,
                make_mib,
                args,
                lambda r: len(r) == len(args) and all(len(b) == MIB for b in r),
                nbytes=MIB,
            ),
        )

    def run_kib64(self) -> None:
        blob = bytes(KIB64)  # pickled anew for every call, as any argument is
        args = [blob] * self.cfg.kib_tasks
        self.interleave(
            "kib64",
            self.cfg.parallelism,
            self.specs(*self.PAYLOAD_KEYS),
            self.cfg.rounds,
            lambda s, p: throughput_sample(
                s, p, take, args, lambda r: r == [KIB64] * len(args), nbytes=KIB64
            ),
        )

    def run_joblib(self) -> None:
        """joblib's Parallel on both process backends, at n_jobs=2 (the issue's row)."""
        from .joblib_adapters import JOBLIB_SEQUENTIAL, JOBLIB_SPECS, make_mib_array

        specs = [s for s in JOBLIB_SPECS if not missing_requirement(s)]
        for note in filter(None, map(missing_requirement, JOBLIB_SPECS)):
            if note not in self.notes:
                self.notes.append(note)
        if not specs:
            return
        tiny, mib = list(range(self.cfg.tiny_tasks)), list(range(self.cfg.mib_tasks))
        self.interleave(
            "joblib-tiny",
            [2],
            [*specs, JOBLIB_SEQUENTIAL],
            self.cfg.rounds,
            lambda s, p: throughput_sample(s, p, noop, tiny, lambda r: r == tiny),
        )
        self.interleave(
            "joblib-mib",
            [2],
            specs,
            self.cfg.rounds,
            lambda s, p: throughput_sample(
                s, p, make_mib_array, mib, lambda r: all(a.nbytes == MIB for a in r), nbytes=MIB
            ),
        )
        self.interleave(
            "joblib-arrays",
            [2],
            specs,
            self.cfg.rounds,
            lambda s, p: arrays_sample(s, p, self.cfg.array_mb * 10**6, self.cfg.array_calls),
        )

    PEERS_ONE = ("mpire-apply", "pebble-schedule")  # mpire's and pebble's one-call idiom

    def run_latency(self) -> None:
        keys = ["local", "ppe-submit", "std-submit", "mp-apply", "loky-submit", *self.PEERS_ONE]
        keys.append("airflow")
        self.interleave(
            "latency",
            self.cfg.parallelism,
            self.specs(*keys),
            self.cfg.rounds,
            lambda s, p: latency_sample(s, p, self.cfg.latency_calls),
        )

    def run_startup(self) -> None:
        keys = ["local", "ppe-submit", "std-submit", "mp-apply", "loky-submit", *self.PEERS_ONE]
        keys.append("airflow")
        params = [(m, p) for m in self.cfg.methods for p in self.cfg.parallelism]
        self.interleave(
            "startup",
            params,
            self.specs(*keys),
            self.cfg.startup_rounds,
            lambda s, mp: startup_sample(s, mp[1], mp[0]),
        )

    COST_KEYS = ("local", "ppe-submit", "airflow", "std-submit")  # the cost-per-task rows

    def run_calls(self) -> None:
        args = list(range(self.cfg.tiny_tasks))
        self.interleave(
            "calls",
            self.cfg.parallelism,
            self.specs(*self.COST_KEYS),
            self.cfg.calls_rounds,
            lambda s, p: calls_sample(s, p, args, lambda r: sorted(r) == args),
        )

    def run_sweep(self) -> None:
        args = list(range(self.cfg.sweep_tasks))
        keys = [
            "local",
            "ppe-submit",
            "ppe-map1",
            "std-submit",
            "mp-imap1",
            "loky-submit",
            "airflow",
        ]
        self.interleave(
            "sweep",
            self.cfg.sweep,
            self.specs(*keys),
            self.cfg.sweep_rounds,
            lambda s, p: throughput_sample(s, p, noop, args, lambda r: sorted(r) == args),
        )

    MAP_FAMILIES = ("ppe", "mp", "mpire", "loky", "std", "pebble")

    def run_map(self) -> None:
        """One chunked map of many tiny calls at p=2: 10,000 per chunk for every pool,
        the automatic default of those that have one, and two iterables."""
        args = list(range(self.cfg.map_items))
        keys = [f"{f}-chunks" for f in self.MAP_FAMILIES]
        keys += ["mp-map-default", "mpire-map-default"]
        keys += [f"{f}-chunks2" for f in self.MAP_FAMILIES]
        self.interleave(
            "map",
            [2],
            self.specs(*keys),
            self.cfg.map_rounds,
            lambda s, p: throughput_sample(s, p, noop, args, lambda r: r == args),
        )

    def run_timeouts(self) -> None:
        """pipepool's with_options(timeout=) against pebble's and mpire's per-task
        timeouts, under a burst of tasks that all time out."""
        self.interleave(
            "timeouts",
            [2],
            self.specs("ppe-submit", "pebble-schedule", "mpire-apply"),
            self.cfg.rounds,
            lambda s, p: timeouts_sample(s, p, self.cfg),
        )

    def run_hol(self) -> None:
        specs = [s for s in self.local_specs if s.key not in self.skipped] + self.specs(
            "ppe-submit", "std-submit", "mp-imap1", "mp-apply", "loky-submit", "airflow"
        )
        self.interleave(
            "hol",
            [("cold", self.cfg.hol_workers), ("warm", self.cfg.hol_workers)],
            specs,
            self.cfg.hol_rounds,
            lambda s, param: hol_sample(s, self.cfg, param[0] == "warm"),
        )


def _param_key(param: Any) -> str:
    if isinstance(param, tuple):
        return f"{param[0]}:{param[1]}"
    return str(param)


def _brief(sample: dict[str, Any]) -> str:
    if "error" in sample:
        return "ERROR " + sample["error"]
    return ", ".join(f"{k} {v:,.4g}" for k, v in sample.items() if not k.startswith("_"))


# -- summary ---------------------------------------------------------------------------------


def summarize(suite: Suite, cfg: Config) -> None:
    """Medians (and min/max of the primary field) of every measure/param/contender."""
    for measure, data in suite.measures.items():
        info = MEASURE_INFO[measure]
        data.update(info)
        n = {
            "tiny": cfg.tiny_tasks,
            "mib": cfg.mib_tasks,
            "kib64": cfg.kib_tasks,
            "latency": cfg.latency_calls,
            "sweep": cfg.sweep_tasks,
            "hol": cfg.hol_count,
            "startup": 1,
            "calls": cfg.tiny_tasks,
            "joblib-tiny": cfg.tiny_tasks,
            "joblib-mib": cfg.mib_tasks,
            "joblib-arrays": cfg.array_calls,
            "map": cfg.map_items,
            "timeouts": cfg.timeout_tasks,
        }[measure]
        data["title"] = info["title"].format(
            n=n,
            long=cfg.hol_long,
            short=cfg.hol_short,
            w=cfg.hol_workers,
            mb=cfg.array_mb,
            chunk=MAP_CHUNK,
            sleep=cfg.timeout_sleep,
            limit=cfg.timeout_limit,
        )
        for by_key in data["params"].values():
            for key, samples in list(by_key.items()):
                good = [s for s in samples if "error" not in s]
                entry: dict[str, Any] = {"samples": samples, "ok": len(good)}
                if good:
                    fields = [k for k in good[0] if not k.startswith("_")]
                    entry["median"] = {f: statistics.median(s[f] for s in good) for f in fields}
                    primary = [s[info["field"]] for s in good]
                    entry["min"], entry["max"] = min(primary), max(primary)
                errors = sorted({s["error"] for s in samples if "error" in s})
                if errors:
                    entry["errors"] = errors
                by_key[key] = entry


def latency_cdf(suite: Suite) -> dict[str, dict[str, list[list[float]]]]:
    """Pooled round-trip times as (percentile, µs) points: what the latency plot draws."""
    points = [*range(0, 100), 99.5, 99.9, 100]
    return {
        param: {
            key: [[q, percentile(times, q) if q else min(times)] for q in points]
            for key, times in by_key.items()
            if times
        }
        for param, by_key in suite.latency_times.items()
    }


def median_of(
    data: dict[str, Any], measure: str, param: str, key: str, field_name: str | None = None
) -> float | None:
    m = data["measures"].get(measure)
    if m is None:
        return None
    entry = m["params"].get(param, {}).get(key)
    if not entry or "median" not in entry:
        return None
    return entry["median"].get(field_name or m["field"])


@dataclass(frozen=True)
class Target:
    """One target: the median of ``ours`` over that of ``peer`` (or over a fixed number,
    ``absolute``: a Config field) in ``measure`` at ``param``, held to ``goal bound``.

    ``name``, ``param``, ``ours`` and ``peer`` are format strings over the parameters of
    the row's group (``TARGETS``): ``p``, ``method``, ``state``, ``who``, ``key``, and
    ``local`` (the LocalExecutor variant this run chose) and the Config's fields.
    """

    name: str
    measure: str
    param: str
    ours: str
    peer: str
    goal: str  # ">=" or "<="
    bound: float
    field: str | None = None  # the measure's own primary field if None
    absolute: str | None = None  # a Config field to compare with instead of a peer
    if_measured: bool = False  # no row where ``ours`` was not measured (an optional key)
    over: str | None = None  # a contender whose median is subtracted from both first:
    # the ratio of the overheads above it (joblib's sequential backend)


# The targets (issues 6 and 13), in report order: each group's targets are evaluated for
# every value of its parameters (``target_params``), the group's rows alternating per value.
TARGETS: tuple[tuple[str, tuple[Target, ...]], ...] = (
    (
        "each p",  # issue 13: what a scheduler copying the README gets
        (
            Target(
                "default LocalExecutor, sync() rounds, tiny tasks, p={p}",
                "tiny", "{p}", "local-default-sync", "airflow", ">=", 2, if_measured=True,
            ),
        ),
    ),
    (
        "p=2",
        (Target("LocalExecutor tiny tasks, p={p}", "tiny", "{p}", "{local}", "airflow", ">=", 2),),
    ),
    (
        "each p",
        (
            Target(
                "ProcessPoolExecutor submit+result, p={p}",
                "tiny", "{p}", "ppe-submit", "std-submit", ">=", 10,
            ),
        ),
    ),
    (
        "each p",
        (
            Target(
                "ProcessPoolExecutor.map chunksize 1, p={p}",
                "tiny", "{p}", "ppe-map1", "mp-imap1", ">=", 2,
            ),
        ),
    ),
    (
        "each p",  # issue 32: one item at a time, against every peer's chunksize-1 map
        (
            Target(
                "ProcessPoolExecutor.map chunksize 1 vs the best peer's, p={p}",
                "tiny", "{p}", "ppe-map1", "mp-map1,mp-imap1,mpire-map1,pebble-map1,std-map1",
                ">=", 5,
            ),
        ),
    ),
    (
        "p=2",  # issue 32: the chunked map, where most users start
        (
            Target(
                "chunked map of {map_items:,} tiny calls vs the best peer",
                "map", "2", "ppe-chunks",
                "mp-chunks,mp-map-default,mpire-chunks,mpire-map-default,loky-chunks,"
                "pebble-chunks,std-chunks",
                ">=", 1.5, if_measured=True,
            ),
            Target(
                "chunked map, parent CPU per item (µs) vs {map_parent_cpu_us:g} µs",
                "map", "2", "ppe-chunks", "{map_parent_cpu_us:g} µs", "<=", 1,
                "parent_cpu_us", absolute="map_parent_cpu_us", if_measured=True,
            ),
            Target(
                "per-task timeouts, a burst of {timeout_tasks}: with_options(timeout=) vs "
                "pebble's schedule(timeout=)",
                "timeouts", "2", "ppe-submit", "pebble-schedule", "<=", 1, if_measured=True,
            ),
        ),
    ),
    (
        "each p",
        (
            Target(
                "round-trip latency p50, p={p}",
                "latency", "{p}", "ppe-submit", "std-submit", "<=", 0.4, "p50_us",
            ),
            Target(
                "round-trip latency p50 vs pipepool's own LocalExecutor, p={p}",
                "latency", "{p}", "ppe-submit", "{local}", "<=", 1.3, "p50_us",
            ),
            Target(
                "round-trip latency p99, p={p}",  # issue 25: p50 and p99 at most 0.4x
                "latency", "{p}", "ppe-submit", "std-submit", "<=", 0.4, "p99_us",
            ),
        ),
    ),
    (
        "each p",
        (
            Target("1 MiB results, p={p}", "mib", "{p}", "ppe-submit", "std-submit", ">=", 4),
            Target(
                "1 MiB results vs a raw pipe, p={p}",
                "mib", "{p}", "ppe-submit", "raw-pipe", ">=", 0.6,
            ),
        ),
    ),
    (
        "each p",  # issue 25: CPU time, which load barely moves
        (
            Target(
                "parent CPU per task, LocalExecutor vs the Airflow-style pair, p={p}",
                "tiny", "{p}", "{local}", "airflow", "<=", 0.4, "parent_cpu_us",
            ),
            Target(
                "parent CPU per task, ProcessPoolExecutor vs LocalExecutor, p={p}",
                "tiny", "{p}", "ppe-submit", "{local}", "<=", 1.5, "parent_cpu_us",
            ),
            Target(
                "worker CPU per task, LocalExecutor vs the Airflow-style pair, p={p}",
                "tiny", "{p}", "{local}", "airflow", "<=", 0.4, "worker_cpu_us",
            ),
        ),
    ),
    (
        "joblib",
        (
            Target(
                "joblib overhead above its sequential backend, {tiny_tasks:,} calls, n_jobs=2",
                "joblib-tiny", "2", "joblib-pipepool", "joblib-loky", "<=", 0.5, "seconds",
                over="joblib-sequential",
            ),
        ),
    ),
    (
        "p=2",  # issue 26: joblib's numpy arrays, each way, at least as fast as loky's
        (
            Target(
                "joblib 1 MiB numpy results vs loky",
                "joblib-mib", "2", "joblib-pipepool", "joblib-loky", ">=", 1, if_measured=True,
            ),
            Target(
                "joblib {array_mb} MB numpy results vs loky",
                "joblib-arrays", "2", "joblib-pipepool", "joblib-loky", ">=", 1,
                if_measured=True,
            ),
            Target(
                "joblib {array_mb} MB numpy arguments (memmapped) vs loky",
                "joblib-arrays", "2", "joblib-pipepool", "joblib-loky", ">=", 1, "args_mb_s",
                if_measured=True,
            ),
        ),
    ),
    (
        "each method and p",
        (
            Target(
                "start-up + first task, {method}, p={p}",
                "startup", "{method}:{p}", "ppe-submit", "std-submit", "<=", 1,
            ),
        ),
    ),
    (
        "each state and executor",
        (
            Target(
                "long tasks, no head-of-line blocking: {who}, {state} pool",
                "hol", "{state}:{hol_workers}", "{key}", "the long task ({hol_long:g} s)",
                "<=", 0.2, absolute="hol_long",
            ),
        ),
    ),
)  # fmt: skip


def target_params(group: str, cfg: Config, local: str) -> list[dict[str, Any]]:
    """The values a group of ``TARGETS`` is evaluated for, in report order (``local``:
    the key of the LocalExecutor variant this run chose)."""
    ps = [str(p) for p in cfg.parallelism]
    if group == "each p":
        return [{"p": p} for p in ps]
    if group == "p=2":
        return [{"p": "2" if "2" in ps else ps[0]}]
    if group == "joblib":
        return [{}]
    if group == "each method and p":
        methods = [m for m in START_METHODS if m in cfg.methods]
        return [{"method": m, "p": p} for m in methods for p in ps]
    if group == "each state and executor":
        return [
            {"state": state, "key": key, "who": who}
            for state in ("cold", "warm")
            for key, who in (("ppe-submit", "ProcessPoolExecutor"), (local, "LocalExecutor"))
        ]
    raise ValueError(f"unknown group of targets {group!r}")


def best_peer(
    data: dict[str, Any], t: Target, param: str, keys: list[str]
) -> tuple[str, float | None]:
    """``(key, median)`` of the best of ``keys`` measured in this run: the highest for a
    ``>=`` goal (the peer hardest to beat), the lowest for ``<=``."""
    found = [(m, k) for k in keys if (m := median_of(data, t.measure, param, k, t.field))]
    if not found:
        return keys[0], None
    value, key = (max if t.goal == ">=" else min)(found)
    return key, value


def evaluate_targets(data: dict[str, Any], cfg: Config) -> list[dict[str, Any]]:
    """The rows of ``TARGETS``, each a ratio of two medians measured in this run."""
    local = data["local_choice"]["key"]
    rows: list[dict[str, Any]] = []
    for group, targets in TARGETS:
        for params in target_params(group, cfg, local):
            env = {**dataclasses.asdict(cfg), **params, "local": local}
            for t in targets:
                param, ours, peer = (s.format(**env) for s in (t.param, t.ours, t.peer))
                measured = data["measures"].get(t.measure, {}).get("params", {}).get(param, {})
                if t.if_measured and ours not in measured:
                    continue
                a = median_of(data, t.measure, param, ours, t.field)
                if "," in peer and not t.absolute:  # the best of several peers
                    peer, b = best_peer(data, t, param, peer.split(","))
                else:
                    b = (
                        env[t.absolute]
                        if t.absolute
                        else median_of(data, t.measure, param, peer, t.field)
                    )
                base = median_of(data, t.measure, param, t.over, t.field) if t.over else None
                if t.over and (base is None or a is None or b is None):
                    a = b = None  # an overhead needs all three medians
                elif base is not None and a is not None and b is not None:
                    a, b = a - base, b - base
                # A peer at or below the baseline has no overhead to compare with: n/a.
                ratio = a / b if a is not None and b is not None and b > 0 else None
                met = (
                    None
                    if ratio is None
                    else (ratio >= t.bound if t.goal == ">=" else ratio <= t.bound)
                )
                rows.append(
                    {
                        "target": t.name.format(**env),
                        "measure": t.measure,
                        "param": param,
                        "ours": ours,
                        "peer": peer,
                        "ours_value": a,
                        "peer_value": b,
                        "ratio": ratio,
                        "goal": f"{t.goal} {t.bound:g}x",
                        "met": met,
                        "field": t.field or data["measures"].get(t.measure, {}).get("field"),
                        "over": t.over,
                        "over_value": base,
                    }
                )
    return rows


# -- machine and command ----------------------------------------------------------------------


def byte_compile() -> str | None:
    """Compile pipepool's modules and this suite's to bytecode where they have none, as
    an install from a wheel does; a note saying so, or None if there was nothing to do.

    The standard library's modules are compiled, and every spawn or forkserver worker
    imports its pool's code afresh: a checkout run with PYTHONDONTWRITEBYTECODE=1 (or
    from a read-only tree) would make pipepool's workers compile ~1,800 lines at each
    start while the stdlib's load bytecode, a start-up handicap no user has. Compiling
    the suite's own modules (every worker of every pool imports them) keeps that cost
    out of all the start-up figures alike.
    """
    import compileall

    compiled = []
    for folder in (os.path.dirname(pipepool.__file__), HERE):
        missing = [p for p in _sources(folder) if _stale(p)]
        if missing and compileall.compile_dir(folder, quiet=2):
            compiled.append(f"{os.path.relpath(folder, ROOT)} ({len(missing)} modules)")
    if not compiled:
        return None
    return (
        "byte-compiled before the run, as a wheel's install is (there was no bytecode, "
        "or only a stale one): " + ", ".join(compiled)
    )


def _stale(source: str) -> bool:
    """No bytecode for ``source``, or bytecode of another version of it (its header's
    timestamp is not the file's): an import would compile it again, in every worker."""
    import importlib.util

    try:
        with open(importlib.util.cache_from_source(source), "rb") as f:
            header = f.read(16)
        mtime = int(os.stat(source).st_mtime) & 0xFFFFFFFF
    except OSError:
        return True
    if header[:4] != importlib.util.MAGIC_NUMBER:
        return True
    if int.from_bytes(header[4:8], "little"):  # hash-based: checked at import, not here
        return False
    return int.from_bytes(header[8:12], "little") != mtime


def _sources(folder: str) -> list[str]:
    return [
        os.path.join(d, name)
        for d, _, names in os.walk(folder)
        if "__pycache__" not in d
        for name in names
        if name.endswith(".py")
    ]


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "pipepool": f"{pipepool.__version__} ({pipepool.IMPLEMENTATION} loop)",
        "default_start_method": __import__("multiprocessing").get_start_method(),
    }
    with contextlib.suppress(AttributeError):  # not on Linux
        info["usable_cores"] = len(os.sched_getaffinity(0))
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    for module in ("loky", "matplotlib"):
        try:
            info[module] = __import__(module).__version__
        except ImportError:
            info[module] = None
    info["git"] = _git_state()
    return info


def _git_state() -> str | None:
    try:
        head = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        dirty = subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--", "src", "pyx"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    files = [line[3:] for line in dirty.splitlines()]
    return head.strip() + (f" + uncommitted changes in {', '.join(files)}" if files else "")


# -- command line ----------------------------------------------------------------------------


def build_parser(prog: str = "python -m benchmarks") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n\n")[0],
        epilog="Measures: " + ", ".join(MEASURES) + ". See benchmarks/suite.py.",
    )
    preset = parser.add_mutually_exclusive_group()
    preset.add_argument(
        "--quick",
        action="store_const",
        const="quick",
        dest="preset",
        help="fewer rounds and tasks (about a minute): a smoke run",
    )
    preset.add_argument(
        "--smoke",
        action="store_const",
        const="smoke",
        dest="preset",
        help="the test suite's tiny configuration (seconds; numbers meaningless)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=MEASURES,
        metavar="MEASURE",
        help="run only these measures (targets that need others show n/a)",
    )
    parser.add_argument(
        "-p", "--parallelism", type=int, nargs="+", help="parallelism levels (default: 2 8)"
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds per measure")
    parser.add_argument("--tasks", type=int, help="tasks per tiny-task sample")
    parser.add_argument(
        "--prefetch",
        type=int,
        nargs="+",
        help="LocalExecutor prefetch depths to try (default: 1 16 64)",
    )
    parser.add_argument(
        "--out",
        help="output directory (default: benchmarks/results, "
        "or benchmarks/results/<preset> with --quick/--smoke)",
    )
    parser.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    parser.add_argument(
        "--readme",
        nargs="?",
        const=readme.README,
        metavar="PATH",
        help="after the run, rewrite the benchmark table in the README (or PATH) from "
        "it; refused, with exit status 3, if the run was noisy",
    )
    return parser


def results_dir(out: str | None, preset: str, noisy: bool) -> str:
    """Where a run writes: ``--out``, else ``benchmarks/results`` (the published results,
    which docs/benchmarks.md includes) for a quiet full run, ``benchmarks/results/noisy``
    for a noisy one (it must not replace them), ``benchmarks/results/<preset>`` else."""
    if out:
        return out
    if preset == "full":
        return os.path.join(HERE, "results", "noisy" if noisy else "")
    return os.path.join(HERE, "results", preset)


def main(argv: list[str] | None = None, prog: str = "python -m benchmarks") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(argv)
    preset = args.preset or "full"
    cfg = dataclasses.replace(PRESETS[preset])
    if args.parallelism:
        cfg.parallelism = args.parallelism
    if args.rounds:
        cfg.rounds = cfg.startup_rounds = args.rounds
        cfg.sweep_rounds = min(cfg.sweep_rounds, args.rounds)
        cfg.hol_rounds = min(cfg.hol_rounds, args.rounds)
    if args.tasks:
        cfg.tiny_tasks = args.tasks
    if args.prefetch:
        cfg.prefetches = args.prefetch
    measures = args.only or list(MEASURES)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    command = " ".join([prog, *map(shlex.quote, argv)])
    log(f"{command}: {preset} configuration, measures {', '.join(measures)}")
    began, start = time.time(), _noise.read()
    cores = os.cpu_count() or 1
    log("machine at the start: " + _noise.describe(_noise.verdict(start, start, cores)))
    compiled = byte_compile()
    suite = Suite(cfg, log)
    if compiled:
        suite.notes.append(compiled)
    for note in suite.notes:
        log("note: " + note)
    steps = {
        "tiny": suite.run_tiny,
        "mib": suite.run_mib,
        "kib64": suite.run_kib64,
        "latency": suite.run_latency,
        "startup": suite.run_startup,
        "calls": suite.run_calls,
        "sweep": suite.run_sweep,
        "hol": suite.run_hol,
        "map": suite.run_map,
        "timeouts": suite.run_timeouts,
        "joblib-tiny": suite.run_joblib,  # runs every joblib measure
    }
    if {"joblib-mib", "joblib-arrays"} & set(measures) and "joblib-tiny" not in measures:
        measures.append("joblib-tiny")
    by_measure: dict[str, Any] = {}  # how busy the machine was during each measure
    for name, step in steps.items():
        if name in measures:
            before = _noise.read()
            step()
            by_measure[name] = _noise.verdict(before, _noise.read(), cores)
        if name == "tiny":
            log(f"LocalExecutor configuration for the other measures: {suite.local_why}")
    noise = _noise.verdict(start, _noise.read(), cores)
    noise["measures"] = by_measure
    if noise["noisy"]:
        log("NOISY RUN: " + "; ".join(noise["reasons"]))
    out_dir = results_dir(args.out, preset, noise["noisy"])
    summarize(suite, cfg)
    _, _, map_note = pipepool_map_auto()
    data: dict[str, Any] = {
        "command": command,
        "preset": preset,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(began)),
        "elapsed_s": round(time.time() - began, 1),
        "load_1min": {"before": noise["load_1min_start"], "after": noise["load_1min_end"]},
        "noise": noise,
        "machine": machine(),
        "config": dataclasses.asdict(cfg),
        "notes": suite.notes,
        "local_choice": {
            "key": suite.local.key,
            "label": suite.local.label,
            "why": suite.local_why,
        },
        "map_auto_chunksize": map_note,
        "contenders": suite.contenders,
        "measures": suite.measures,
        "latency_cdf": latency_cdf(suite),
    }
    data["targets"] = evaluate_targets(data, cfg)
    paths = report.write_all(data, out_dir, plots=not args.no_plots)
    print(report.targets_markdown(data))
    log("wrote " + ", ".join(os.path.relpath(p) for p in paths))
    if args.readme:
        try:
            readme.update_readme(data, args.readme)
        except readme.NoisyRunError as exc:
            log(f"{args.readme} not rewritten: {exc}")
            return readme.EXIT_NOISY
        log(f"rewrote the benchmark table in {os.path.relpath(args.readme)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
