"""The idle family (issue 41, item 8): how often a parent wakes while its tasks run and
nothing arrives.

``idle``: 2 warm workers, ``idle_tasks`` tasks each sleeping between ``idle_sleep``'s two
bounds (spread evenly, in a fixed shuffled order), submitted at once and waited on with
``result()`` one by one, or with ``concurrent.futures.wait(fs)``: the parent's voluntary
context switches (``getrusage``: every thread, those that ended included) per second of
the wait. pipepool's futures face beside the stdlib's ProcessPoolExecutor, same rounds.
"""

from __future__ import annotations

import gc
import resource
import time
from typing import TYPE_CHECKING

from .contenders import Spec
from .measures import SampleError, _open
from .tasks import sleep_s

if TYPE_CHECKING:
    from .measures import Suite

IDLE_KEYS = ("ppe-submit", "ppe-submit-wait", "std-submit", "std-submit-wait")
IDLE_WORKERS = 2


def naps(count: int, low: float, high: float) -> list[float]:
    """``count`` sleeps from ``low`` to ``high``, evenly spaced, in a fixed shuffled
    order (a stride coprime with the count: short and long ones alternate)."""
    if count == 1:
        return [low]
    stride = next(s for s in (7, 5, 3, 2, 1) if count % s)
    return [low + (high - low) * (i * stride % count) / (count - 1) for i in range(count)]


def run_idle(suite: Suite) -> None:
    cfg = suite.cfg
    sleeps = naps(cfg.idle_tasks, *cfg.idle_sleep)
    suite.interleave(
        "idle",
        [IDLE_WORKERS],
        suite.specs(*IDLE_KEYS),
        cfg.rounds,
        lambda s, p: idle_sample(s, p, sleeps),
    )


def idle_sample(spec: Spec, parallelism: int, sleeps: list[float]) -> dict[str, float]:
    adapter = _open(spec, parallelism)  # warm: its workers are up before the count
    try:
        gc.collect()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        started = time.perf_counter()
        results = adapter.run(sleep_s, sleeps)
        seconds = time.perf_counter() - started
        switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before
        if results != sleeps:
            raise SampleError(f"{spec.label}: wrong results")
    except BaseException:
        adapter.abort()
        raise
    adapter.close()
    return {"switches_s": switches / seconds, "switches": switches, "seconds": seconds}
