"""One sample of each benchmark row, on a running worker (``services.Worker``), read from
the client (publish and result times) or from inside the tasks (their start and end,
``time.monotonic()`` in the child: one clock for every process of the machine).

tiny      ``tasks`` no-op tasks published at once: tasks/s from the first publish to the
          last result
latency   one no-op at a time, ``calls`` round trips: publish-to-result p50 and p99 in ms
recycle   ``max_tasks_per_child=1`` (the worker started so): the gap a recycle leaves, from
          one task's end in its child to the start of the task that took its slot, ms:
          median and mean (prefork's replacement waits for its 5 s maintain_pool tick
          when no other child is free: a few long gaps among short ones)
resume    both children held by a long task, one more task queued, one holder SIGKILLed:
          from the kill to the queued task's start on a replacement, ms
"""

from __future__ import annotations

import gc
import os
import signal
import statistics
import time
from typing import Any

from . import app as tasks
from .services import Worker

RESULT_TIMEOUT = 120.0  # s a sample may wait for its results before it fails
HOLD_TIMEOUT = 60.0  # s a held child waits for its release (a failed sample frees it so)


class SampleError(Exception):
    """A sample whose results were wrong, or that did not finish in time."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _results(worker: Worker, results: list[Any]) -> list[Any]:
    from celery.result import ResultSet

    try:
        return list(ResultSet(results).get(timeout=RESULT_TIMEOUT, propagate=True))
    except Exception as exc:
        raise SampleError(f"{worker.pool}: {exc!r}\n{worker.log_tail()}") from exc


def tiny(worker: Worker, n: int) -> dict[str, float]:
    gc.collect()
    send = tasks.noop.apply_async
    queue = worker.queue
    started = time.perf_counter()
    results = [send((i,), queue=queue) for i in range(n)]
    values = _results(worker, results)
    elapsed = time.perf_counter() - started
    if values != list(range(n)):
        raise SampleError(f"{worker.pool}: wrong results")
    return {"rate": n / elapsed, "seconds": elapsed}


def latency(worker: Worker, calls: int) -> dict[str, Any]:
    send = tasks.noop.apply_async
    queue = worker.queue
    times = []
    gc.collect()
    for i in range(calls):
        started = time.perf_counter()
        if send((i,), queue=queue).get(timeout=RESULT_TIMEOUT) != i:
            raise SampleError(f"{worker.pool}: wrong result")
        times.append((time.perf_counter() - started) * 1e3)
    return {
        "p50_ms": percentile(times, 50),
        "p99_ms": percentile(times, 99),
        "mean_ms": statistics.fmean(times),
    }


def slot_gaps(spans: list[tuple[float, float]], c: int) -> list[float]:
    """For tasks run ``c`` at a time from a backlog, each ``(start, end)``: how long each
    freed slot stayed empty. The k-th end (in time) frees the slot that the (k+c)-th
    start (in time) fills, so the gap is that start minus that end."""
    starts = sorted(s for s, _ in spans)
    ends = sorted(e for _, e in spans)
    return [starts[k + c] - ends[k] for k in range(len(spans) - c)]


def recycle(worker: Worker, n: int) -> dict[str, Any]:
    """Gaps between one task's end and the start of the task that took its slot, every
    task on a fresh child (``slot_gaps``)."""
    results = [tasks.stamp.apply_async((i,), queue=worker.queue) for i in range(n)]
    stamps = _results(worker, results)
    pids = {pid for _, pid, _, _ in stamps}
    if len(pids) != n:
        raise SampleError(
            f"{worker.pool}: {n} tasks ran in {len(pids)} children: not one child per task"
        )
    gaps = [g * 1e3 for g in slot_gaps([(s, e) for _, _, s, e in stamps], worker.concurrency)]
    return {
        "gap_ms": statistics.median(gaps),
        "gap_mean_ms": statistics.fmean(gaps),  # what a stream of recycling tasks loses
        "gap_p90_ms": percentile(gaps, 90),
        "gaps_ms": [round(g, 3) for g in gaps],
    }


def _held(worker: Worker, count: int) -> list[tuple[int, float]]:
    """Wait for ``count`` block() tasks to say they started: their (pid, start)."""
    r = tasks.redis_client()
    found: list[tuple[int, float]] = []
    deadline = time.monotonic() + RESULT_TIMEOUT
    while len(found) < count:
        item = r.blpop([tasks.STARTED_KEY], timeout=1)
        if item:
            pid, start = item[1].split()
            found.append((int(pid), float(start)))
        elif time.monotonic() > deadline or not worker.alive():
            raise SampleError(
                f"{worker.pool}: {len(found)} of {count} long tasks started\n{worker.log_tail()}"
            )
    return found


QUEUED_SETTLE = 0.3  # s between queueing the task that waits and the kill: long enough
# for the worker to have received it, so the resume time is the pool's, not the broker's


def resume(worker: Worker) -> dict[str, float]:
    """Kill one of the children running a long task; how soon a queued task starts."""
    r = tasks.redis_client()
    r.delete(tasks.STARTED_KEY, tasks.RELEASE_KEY)
    holds = [
        tasks.block.apply_async((HOLD_TIMEOUT,), queue=worker.queue)
        for _ in range(worker.concurrency)
    ]
    held = _held(worker, worker.concurrency)
    if len({pid for pid, _ in held}) != worker.concurrency:
        raise SampleError(f"{worker.pool}: the long tasks share a child: {held}")
    waiting = tasks.stamp.apply_async((0,), queue=worker.queue)
    time.sleep(QUEUED_SETTLE)
    if waiting.ready():
        raise SampleError(f"{worker.pool}: the queued task ran while every child was held")
    victim = held[0][0]
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    try:
        _, pid, start, _ = waiting.get(timeout=RESULT_TIMEOUT)
    except Exception as exc:
        raise SampleError(f"{worker.pool}: {exc!r}\n{worker.log_tail()}") from exc
    finally:
        r.rpush(tasks.RELEASE_KEY, *["go"] * worker.concurrency)
    if pid in {p for p, _ in held}:
        raise SampleError(f"{worker.pool}: the queued task ran on a held child, {pid}")
    for h in holds:  # one lost with its child, the other released: both end
        h.get(timeout=RESULT_TIMEOUT, propagate=False)
    r.delete(tasks.RELEASE_KEY)
    return {"resume_ms": (start - killed) * 1e3}
