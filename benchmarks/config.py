"""The suite's configuration: its measures, the presets (full, quick, smoke) and what
each measure reports (title, unit, primary field, which way is better)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    "cancel",
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
    map_rounds: int = 5  # the headline chunked-map row: 3 samples were too few to median
    map_parent_cpu_us: float = 0.06  # map: the parent CPU target per item (issue 32)
    wait_cpu_us: float = 1.0  # tiny: what wait(fs) may add per future (issue 32)
    timeout_tasks: int = 16  # timeouts: a burst of tasks that all overrun their limit
    timeout_limit: float = 0.2  # s each may run
    timeout_sleep: float = 30.0  # s each would run
    cancel_calls: int = 500  # cancel: Future.cancel() calls timed per sample


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
    "cancel": {
        "title": "Cancel: Future.cancel() of a future handed over behind running work, "
        "{n:,} per sample ({batch} naps of {nap:g} ms on one warm worker; once the first "
        "returned, the last one handed over and not started is cancelled; `cancelled`: "
        "the share it cancelled)",
        "unit": "µs p50",
        "field": "p50_us",
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
