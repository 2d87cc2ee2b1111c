"""The short-lived pool family (issue 44): what a command-line tool pays to make a pool,
use it a little and end it, and what a worker's recycling costs.

``startup-map``: per start method, a pool made, a ``map`` of ``life_calls`` no-op calls,
``shutdown(wait=True)`` returned, in one clock (pool made -> first result is the
``startup`` measure); pipepool's ProcessPoolExecutor beside the stdlib's (and the peers
with a map: ZooPool, InterpreterPoolExecutor) in the same rounds.

``recycle``: ``max_tasks_per_child=1`` on one worker, ``recycle_tasks`` tasks in a row
whose module imports numpy (``_heavy.py``): each task stamps its start and end on the
machine-wide monotonic clock, and a gap is one task's end to the next one's start (the
worker's exit, the next one's start, its imports, the hand-over). pipepool's
ProcessPoolExecutor beside the stdlib's, per start method (the stdlib refuses
``max_tasks_per_child`` with fork: that method has pipepool's row alone).
"""

from __future__ import annotations

import concurrent.futures
import gc
import importlib.util
import inspect
import itertools
import multiprocessing
import statistics
import time
from typing import TYPE_CHECKING, Any

import pipepool

from .contenders import PIPEPOOL, Adapter, Spec
from .measures import STARTUP_SETTLE, SampleError
from .tasks import noop

if TYPE_CHECKING:
    from .measures import Suite

LIFE_KEYS = ("ppe-map1", "std-map1", "zoo-map", "interp-map1")
LIFE_PARALLELISM = 2


def run_startup_map(suite: Suite) -> None:
    cfg = suite.cfg
    suite.interleave(
        "startup-map",
        [(m, LIFE_PARALLELISM) for m in cfg.methods],
        suite.specs(*LIFE_KEYS),
        cfg.startup_rounds,
        lambda s, mp: life_sample(s, mp[1], mp[0], cfg.life_calls),
    )


def life_sample(spec: Spec, parallelism: int, method: str, calls: int) -> dict[str, float]:
    """Pool made -> ``map`` of ``calls`` no-ops -> closed (``shutdown(wait=True)``)."""
    args = list(range(calls))
    gc.collect()
    time.sleep(STARTUP_SETTLE)
    started = time.perf_counter()
    adapter = spec.make(parallelism, method)
    try:
        if adapter.run(noop, args) != args:
            raise SampleError(f"{spec.label}: wrong results")
    except BaseException:
        adapter.abort()
        raise
    adapter.close()
    return {"ms": (time.perf_counter() - started) * 1e3}


# -- recycle ----------------------------------------------------------------------------


def preload_options() -> dict[str, Any]:
    """pipepool's options for the recycle row. THE PRELOAD HOOK (issue 44, item 2): once
    ProcessPoolExecutor takes a ``preload`` option, the row passes the task module's heavy
    import to it here, so that replacements are made from a process that has it. Until
    then, nothing: the row measures the recycle as it is."""
    from ._heavy import HEAVY_MODULE

    if "preload" in inspect.signature(pipepool.ProcessPoolExecutor).parameters:
        return {"preload": [HEAVY_MODULE]}
    return {}


class RecycleAdapter(Adapter):
    """One worker recycled after every task: ``map`` one task at a time, in a row."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def run(self, fn, args):
        return list(self.pool.map(fn, args))

    def close(self):
        self.pool.shutdown(wait=True)


def _pipepool(p: int, method: str | None) -> Adapter:
    ctx = multiprocessing.get_context(method) if method else None
    return RecycleAdapter(
        pipepool.ProcessPoolExecutor(p, mp_context=ctx, max_tasks_per_child=1, **preload_options())
    )


def _stdlib(p: int, method: str | None) -> Adapter:
    ctx = multiprocessing.get_context(method) if method else None
    return RecycleAdapter(
        concurrent.futures.ProcessPoolExecutor(p, mp_context=ctx, max_tasks_per_child=1)
    )


RECYCLE_SPECS = (
    Spec("ppe-recycle", "pipepool ProcessPoolExecutor(max_tasks_per_child=1)", PIPEPOOL, _pipepool),
    Spec("std-recycle", "stdlib ProcessPoolExecutor(max_tasks_per_child=1)", "stdlib", _stdlib),
)


def run_recycle(suite: Suite) -> None:
    cfg = suite.cfg
    if importlib.util.find_spec("numpy") is None:
        suite.notes.append("recycle: skipped, its task module imports numpy (pip install numpy)")
        return
    options = preload_options()
    note = (
        f"recycle: pipepool's row passes {options}"
        if options
        else "recycle: pipepool has no preload option yet (the row passes none)"
    )
    if note not in suite.notes:
        suite.notes.append(note)
    for method in cfg.methods:
        specs = [s for s in RECYCLE_SPECS if suite.runs(s)]
        if method == "fork":  # ValueError: incompatible with the 'fork' start method
            specs = [s for s in specs if s.family == PIPEPOOL]
        suite.interleave(
            "recycle",
            [method],
            specs,
            cfg.rounds,
            lambda s, m: recycle_sample(s, m, cfg.recycle_tasks),
        )


def recycle_sample(spec: Spec, method: str, tasks: int) -> dict[str, float]:
    """The gaps between ``tasks`` tasks in a row on one worker recycled after each."""
    from ._heavy import stamp

    adapter = spec.make(1, method)
    try:
        stamps = sorted(adapter.run(stamp, list(range(tasks))))
    except BaseException:
        adapter.abort()
        raise
    adapter.close()
    if len({pid for _, _, pid in stamps}) != tasks:
        raise SampleError(f"{spec.label}: a worker ran two tasks (not recycled)")
    gaps = [after[0] - before[1] for before, after in itertools.pairwise(stamps)]
    return {"gap_ms": statistics.median(gaps) * 1e3, "max_gap_ms": max(gaps) * 1e3}
