"""The suite's configuration and its registry of measures: the presets (full, quick,
smoke) and, for each measure, what it reports (title, unit, primary field, which way is
better), what its ``n`` counts and which function runs it (``run``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    map_rounds: int = 5  # the headline chunked-map row: 3 samples were too few to median
    wait_cpu_us: float = 1.0  # tiny: what wait(fs) may add per future (issue 32)
    timeout_tasks: int = 16  # timeouts: a burst of tasks that all overrun their limit
    timeout_limit: float = 0.2  # s each may run
    timeout_sleep: float = 30.0  # s each would run
    cancel_calls: int = 500  # cancel: Future.cancel() calls timed per sample
    life_calls: int = 200  # startup-map: tiny calls mapped between the pool's start and end
    recycle_tasks: int = 6  # recycle: tasks in a row on one worker recycled after each
    idle_tasks: int = 36  # idle: tasks of idle_sleep seconds, waited on while they run
    idle_sleep: tuple[float, float] = (0.05, 0.3)  # idle: each task's nap, spread evenly


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
        cancel_calls=100,
        life_calls=200,
        recycle_tasks=4,
        idle_tasks=12,
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
        cancel_calls=10,
        life_calls=20,
        recycle_tasks=3,
        idle_tasks=4,
        idle_sleep=(0.02, 0.05),
    ),
}

# The registry of measures, in run order: what each reports (title, unit, the primary
# field and which way is better), the Config field its ``n`` is (None: one), the extra
# median fields its table shows (``columns``: header, field, unit) and ``run``, the
# function that runs it with the Suite: "Suite.method", or "module.function" of a family
# module of benchmarks/ (joblib_adapters, pool_life, idle...). A new family of measures
# is its module plus its entries here (and its target rows in targets.py).
MEASURE_INFO: dict[str, dict[str, Any]] = {
    "tiny": {
        "title": "Tiny tasks: {n:,} no-op calls submitted one by one, all collected",
        "unit": "tasks/s",
        "field": "rate",
        "better": "higher",
        "n": "tiny_tasks",
        "run": "Suite.run_tiny",
    },
    "mib": {
        "title": "Payload: {n:,} tasks each returning 1 MiB (copy bound: one copy of each "
        "into fresh pages, in this process)",
        "unit": "MB/s",
        "field": "mb_s",
        "better": "higher",
        "n": "mib_tasks",
        "run": "Suite.run_mib",
    },
    "kib64": {
        "title": "Payload: {n:,} tasks each sending 64 KiB",
        "unit": "MB/s",
        "field": "mb_s",
        "better": "higher",
        "n": "kib_tasks",
        "run": "Suite.run_kib64",
    },
    "latency": {
        "title": "Round-trip latency: one no-op at a time, {n:,} calls per sample",
        "unit": "µs p50",
        "field": "p50_us",
        "better": "lower",
        "n": "latency_calls",
        "run": "Suite.run_latency",
    },
    "startup": {
        "title": "Start-up: pool construction + first task's result",
        "unit": "ms",
        "field": "ms",
        "better": "lower",
        "n": None,
        "columns": [("close ms", "close_ms", "ms")],
        "run": "Suite.run_startup",
    },
    "startup-map": {
        "title": "Short-lived pool: made, map of {n:,} no-op calls, shutdown(wait=True) returned",
        "unit": "ms",
        "field": "ms",
        "better": "lower",
        "n": "life_calls",
        "run": "pool_life.run_startup_map",
    },
    "recycle": {
        "title": "Recycle gap: max_tasks_per_child=1, one worker, {n} tasks of a module "
        "that imports numpy: one task's end to the next one's start (stamped inside them)",
        "unit": "ms",
        "field": "gap_ms",
        "better": "lower",
        "n": "recycle_tasks",
        "columns": [("largest gap ms", "max_gap_ms", "ms")],
        "run": "pool_life.run_recycle",
    },
    "idle": {
        "title": "Idle waiting: {n} tasks of {idle_sleep[0]:g}-{idle_sleep[1]:g} s on 2 "
        "workers, waited on: the parent's voluntary context switches per second (all "
        "its threads)",
        "unit": "switches/s",
        "field": "switches_s",
        "better": "lower",
        "n": "idle_tasks",
        "columns": [("seconds", "seconds", "s")],
        "run": "idle.run_idle",
    },
    "calls": {
        "title": "Python-level calls per task in the parent: {n:,} no-op calls, counted by "
        "a profile function in every parent thread",
        "unit": "calls/task",
        "field": "py_calls",
        "better": "lower",
        "n": "tiny_tasks",
        "run": "Suite.run_calls",
    },
    "sweep": {
        "title": "Parallelism sweep: {n:,} no-op calls per point",
        "unit": "tasks/s",
        "field": "rate",
        "better": "higher",
        "n": "sweep_tasks",
        "run": "Suite.run_sweep",
    },
    "hol": {
        "title": "Long tasks: one {hol_long:g} s task, then {n:,} of {hol_short:g} s, on "
        "{hol_workers} workers: time until the short ones are done (cold: a fresh pool; "
        "warm: it ran no-ops first)",
        "unit": "s",
        "field": "seconds",
        "better": "lower",
        "n": "hol_count",
        "run": "Suite.run_hol",
    },
    "map": {
        "title": "Chunked map: {n:,} no-op calls from a list in one map, {chunk:,} per chunk "
        "or the pool's own default chunking (chunks2: two iterables, a pair per call; "
        "floor: the same chunks pickled and unpickled in this process, no pool)",
        "unit": "items/s",
        "field": "rate",
        "better": "higher",
        "n": "map_items",
        "run": "Suite.run_map",
    },
    "timeouts": {
        "title": "Per-task timeouts: a burst of {n} tasks of {timeout_sleep:g} s, each "
        "limited to {timeout_limit:g} s: seconds until all have failed with their timeout",
        "unit": "s",
        "field": "seconds",
        "better": "lower",
        "n": "timeout_tasks",
        "run": "Suite.run_timeouts",
    },
    "cancel": {
        "title": "Cancel: Future.cancel() of a future handed over behind running work, "
        "{n:,} per sample ({batch} naps of {nap:g} ms on one warm worker; once the first "
        "returned, the last one handed over and not started is cancelled; `cancelled`: "
        "the share it cancelled)",
        "unit": "µs p50",
        "field": "p50_us",
        "better": "lower",
        "n": "cancel_calls",
        "run": "Suite.run_cancel",
    },
    "joblib-tiny": {
        "title": "joblib Parallel(n_jobs=2): {n:,} no-op calls, auto-batching, pool reused",
        "unit": "tasks/s",
        "field": "rate",
        "better": "higher",
        "n": "tiny_tasks",
        "run": "joblib_adapters.run_tiny",
    },
    "joblib-mib": {
        "title": "joblib Parallel(n_jobs=2): {n:,} calls each returning a 1 MiB numpy array",
        "unit": "MB/s",
        "field": "mb_s",
        "better": "higher",
        "n": "mib_tasks",
        "run": "joblib_adapters.run_mib",
    },
    "joblib-arrays": {
        "title": "joblib Parallel(n_jobs=2): {n} calls each returning a fresh {array_mb} MB "
        "numpy array (mb_s), then {n} each taking the same one (args_mb_s; memmapped by both)",
        "unit": "MB/s",
        "field": "mb_s",
        "better": "higher",
        "n": "array_calls",
        "columns": [("arguments MB/s", "args_mb_s", "MB/s")],
        "run": "joblib_adapters.run_arrays",
    },
}
MEASURES = tuple(MEASURE_INFO)
