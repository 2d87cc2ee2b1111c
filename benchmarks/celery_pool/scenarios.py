"""The hang scenarios of issue 43 that Celery's prefork pool still shows, each run the same
way against prefork and against pipepool's pool: what a user sees (tasks that never run,
a shutdown that never ends, a task run twice), observed within a bounded wait.

Each scenario is a function ``(pool, redis_url, **sizes) -> Outcome``; the benchmark
harness runs them all (``python -m benchmarks.celery_pool --scenarios``) and
tests/celery_scenarios/ runs the quick ones with small sizes. ``passed`` is the healthy
behaviour: False on prefork is the bug reproduced.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.celery_pool.atomic_fs import TRANSPORT as ATOMIC_FILESYSTEM

from . import app as tasks
from .services import MemoryCgroup, Worker

# The mechanism, per scenario: what the issue reported, and why prefork still does it.
EXPLAINED = {
    "lock_holder_killed": (
        "billiard#457, celery#2917: with a transport that has no event loop (filesystem, "
        "MongoDB, SQS...), prefork runs billiard's blocking Pool, whose children share one "
        "job pipe behind a multiprocessing lock; the idle child blocked reading it holds "
        "the lock. SIGKILLed there, it never releases it: every other child and every "
        "replacement waits on the lock forever, no task runs again, and a warm shutdown "
        "never ends"
    ),
    "slow_init_respawn": (
        "celery#1715, #2431: a replacement child must say WORKER_UP within "
        "worker_proc_alive_timeout (4 s) or AsynPool SIGKILLs it ('Timed out waiting for "
        "UP message') and forks another, which is as slow: with a worker_process_init "
        "slower than the timeout, every recycled slot is lost in a respawn loop"
    ),
    "reconnect_free_worker": (
        "celery#10346: on a broker reconnect AsynPool.flush() cleared _busy_workers, and "
        "a task queued after it waited behind a running long task instead of going to "
        "the idle child (fixed in Celery 5.7.0; Celery 5.6.3 still has it)"
    ),
    "recycle_duplicates": (
        "celery#5120, billiard#278: a child recycled by max_tasks_per_child exits right "
        "after sending its last result; if the parent reaps it before reading that "
        "result, the task fails with WorkerLostError and, with acks_late and "
        "reject_on_worker_lost, is redelivered and run again"
    ),
    "maxmem_respawn": (
        "celery#4809: children recycled by max_memory_per_child after each task, their "
        "replacements said to deadlock"
    ),
    "shutdown_results": (
        "billiard#435: results of tasks that finish during a warm shutdown were lost"
    ),
    "oom_named": (
        "celery#1406: a child the kernel's OOM killer ended is reported as 'Worker exited "
        "prematurely: signal 9 (SIGKILL)', which does not say out of memory; the user "
        "is left to guess from dmesg"
    ),
    "recycle_soak": (
        "celery#4185, #2431, #4321: workers that stop consuming after many recycles "
        "(max_tasks_per_child), with the parent blocked on a pipe"
    ),
}


@dataclass
class Outcome:
    """What one scenario did on one pool: ``passed`` is the healthy behaviour."""

    scenario: str
    pool: str
    passed: bool
    observed: str
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)


def _count_ready(results: list[Any], window: float, worker: Worker | None = None) -> int:
    """How many of ``results`` are ready after at most ``window`` s (sooner if all are)."""
    deadline = time.monotonic() + window
    while time.monotonic() < deadline:
        if all(r.ready() for r in results):
            break
        if worker is not None and not worker.alive():
            break
        time.sleep(0.05)
    return sum(r.ready() for r in results)


def _pool_pids(worker: Worker, client: Any, tries: int = 6) -> set[int]:
    """The pids of the pool's children, as seen by the tasks they ran (a zygote or fork
    server runs none): stamp tasks until ``concurrency`` different pids have answered."""
    seen: set[int] = set()
    for _ in range(tries):
        batch = [client.send_task("cb.stamp", (i,), queue=worker.queue) for i in range(8)]
        seen |= {r.get(timeout=60)[1] for r in batch}
        if len(seen) >= worker.concurrency:
            break
    return seen


def lock_holder_killed(
    pool: str, redis_url: str, window: float = 10.0, stop_window: float = 30.0,
    python: str = sys.executable,
) -> Outcome:  # fmt: skip
    """The blocking loop (filesystem transport), ``-c 2``: every idle child SIGKILLed (so
    the one holding prefork's queue lock is among them), then 4 tasks watched ``window``
    s, then a warm shutdown given ``stop_window`` s (a healthy one of prefork's blocking
    pool takes about 5 s here: its threads poll)."""
    from celery import Celery

    folder = tempfile.mkdtemp(prefix="celerybench-fs-")
    client = Celery("celerybench-fs", broker="filesystem://", backend=tasks.app.conf.result_backend)
    client.conf.broker_transport_options = {
        "data_folder_in": folder,
        "data_folder_out": folder,
        "control_folder": os.path.join(folder, "control"),
    }
    client.conf.broker_transport = ATOMIC_FILESYSTEM  # as the worker's (atomic_fs.py)
    worker = Worker(pool, redis_url, env={tasks.FS_ENV: folder}, python=python)
    started = time.monotonic()
    try:
        worker.start(warm=False)
        victims = _pool_pids(worker, client)
        time.sleep(0.5)  # idle: each child back in its wait for a job
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        results = [client.send_task("cb.noop", (i,), queue=worker.queue) for i in range(4)]
        done = _count_ready(results, window, worker)
        stopping = time.monotonic()
        code = worker.stop(timeout=stop_window)
        stop_s = time.monotonic() - stopping
        shut = code is not None and code >= 0
        return Outcome(
            "lock_holder_killed", pool, done == 4 and shut,
            f"{done} of 4 tasks ran within {window:g} s after {len(victims)} idle children "
            f"were SIGKILLed; warm shutdown "
            + (f"took {stop_s:.1f} s" if shut else f"did not end in {stop_window:g} s (killed)"),
            time.monotonic() - started, {"done": done, "exit": code},
        )  # fmt: skip
    finally:
        worker.cleanup()
        client.close()
        shutil.rmtree(folder, ignore_errors=True)


def slow_init_respawn(
    pool: str, redis_url: str, init_s: float = 1.5, alive_s: float = 1.0,
    count: int = 4, window: float = 20.0, python: str = sys.executable,
) -> Outcome:  # fmt: skip
    """``-c 2 --max-tasks-per-child 1`` with a worker_process_init of ``init_s`` s, above
    worker_proc_alive_timeout ``alive_s`` (the harness: 6 s and the default 4 s)."""
    env = {tasks.INIT_SLEEP_ENV: str(init_s)}
    if alive_s:
        env[tasks.ALIVE_ENV] = str(alive_s)
    worker = Worker(pool, redis_url, options=["--max-tasks-per-child", "1"], env=env, python=python)
    started = time.monotonic()
    try:
        worker.start(warm=False)
        results = [tasks.stamp.apply_async((i,), queue=worker.queue) for i in range(count)]
        done = _count_ready(results, window, worker)
        with open(worker.log, errors="replace") as f:
            timeouts = f.read().count("Timed out waiting for UP message")
        return Outcome(
            "slow_init_respawn", pool, done == count,
            f"{done} of {count} tasks ran within {window:g} s; {timeouts} children killed "
            "for 'Timed out waiting for UP message'",
            time.monotonic() - started, {"done": done, "up_timeouts": timeouts},
        )  # fmt: skip
    finally:
        worker.cleanup()


def reconnect_free_worker(
    pool: str, redis_url: str, restart: Callable[[], None], long_s: float = 20.0,
    window: float = 8.0, python: str = sys.executable,
) -> Outcome:  # fmt: skip
    """``-c 2``, one child on a ``long_s`` task, the broker restarted (``restart``), then a
    task queued: does it start on the free child within ``window`` s?"""
    worker = Worker(
        pool, redis_url, python=python,
        env={tasks.CONF_ENV: json.dumps({"worker_disable_prefetch": True})},
    )  # fmt: skip
    r = tasks.redis_client()
    started = time.monotonic()
    try:
        worker.start()
        r.delete(tasks.STARTED_KEY)
        tasks.sleep.apply_async((long_s,), queue=worker.queue)
        if not r.blpop([tasks.STARTED_KEY], timeout=60):
            raise RuntimeError(f"the long task did not start\n{worker.log_tail()}")
        restart()
        tasks._redis = None  # the old connection died with the server
        time.sleep(2.0)  # the worker notices, reconnects (kombu retries at once, then 2 s)
        queued = time.monotonic()
        probe = tasks.stamp.apply_async((1,), queue=worker.queue)
        ready = _count_ready([probe], window, worker)
        wait = probe.get(timeout=long_s + 60)[2] - queued
        return Outcome(
            "reconnect_free_worker", pool, ready == 1,
            f"a task queued after the broker restart started after {wait:.1f} s "
            f"(the long task ran {long_s:g} s on the other child)",
            time.monotonic() - started, {"start_after_s": round(wait, 3)},
        )  # fmt: skip
    finally:
        worker.cleanup()


def recycle_duplicates(
    pool: str, redis_url: str, count: int = 300, python: str = sys.executable
) -> Outcome:
    """``-c 2 --max-tasks-per-child 1``, ``count`` acks_late + reject_on_worker_lost tasks
    each counting its runs: any run twice, any lost?"""
    worker = Worker(pool, redis_url, options=["--max-tasks-per-child", "1"], python=python)
    r = tasks.redis_client()
    started = time.monotonic()
    try:
        worker.start()
        r.delete(tasks.EFFECTS_KEY)
        results = [tasks.effect.apply_async((f"k{i}",), queue=worker.queue) for i in range(count)]
        done = _count_ready(results, 60 + count, worker)
        runs = [int(v) for v in r.hgetall(tasks.EFFECTS_KEY).values()]
        failed = [repr(x.result)[:120] for x in results if x.ready() and x.failed()]
        twice = sum(n > 1 for n in runs)
        return Outcome(
            "recycle_duplicates", pool, done == count and not twice and not failed,
            f"{done} of {count} done, {len(runs)} ran, {twice} ran more than once, "
            f"{len(failed)} failed" + (f" ({failed[0]})" if failed else ""),
            time.monotonic() - started, {"twice": twice, "failed": failed[:5]},
        )  # fmt: skip
    finally:
        worker.cleanup()


def maxmem_respawn(
    pool: str, redis_url: str, count: int = 12, python: str = sys.executable
) -> Outcome:
    """``-c 1 --max-memory-per-child 1000`` (KiB: every child is over it after a task),
    ``count`` tasks each keeping 20 MiB: do all run, and how long does each recycle
    hold up the next task (the longest wait between two results)?"""
    worker = Worker(
        pool, redis_url, concurrency=1, options=["--max-memory-per-child", "1000"],
        python=python,
    )  # fmt: skip
    started = time.monotonic()
    try:
        worker.start()
        results = [tasks.grow.apply_async((20 * 1024,), queue=worker.queue) for _ in range(count)]
        window = 30 + 10 * count
        finished: list[float] = []
        deadline = time.monotonic() + window
        while len(finished) < count and time.monotonic() < deadline and worker.alive():
            ready = sum(r.ready() for r in results)
            finished += [time.monotonic()] * (ready - len(finished))
            time.sleep(0.02)
        pids = {x.result for x in results if x.ready() and x.successful()}
        waits = [b - a for a, b in itertools.pairwise(finished)]
        longest = max(waits, default=0.0)
        return Outcome(
            "maxmem_respawn", pool, len(finished) == count,
            f"{len(finished)} of {count} tasks ran, on {len(pids)} children, within "
            f"{time.monotonic() - started:.0f} s; longest wait between two results "
            f"{longest:.1f} s (median {statistics.median(waits) if waits else 0:.1f} s)",
            time.monotonic() - started,
            {"done": len(finished), "longest_wait_s": round(longest, 3)},
        )  # fmt: skip
    finally:
        worker.cleanup()


def shutdown_results(
    pool: str, redis_url: str, task_s: float = 2.0, python: str = sys.executable
) -> Outcome:
    """``-c 2``, two tasks of ``task_s`` s running, a warm shutdown (SIGTERM): both
    results stored?"""
    worker = Worker(pool, redis_url, python=python)
    r = tasks.redis_client()
    started = time.monotonic()
    try:
        worker.start()
        r.delete(tasks.STARTED_KEY)
        results = [tasks.sleep.apply_async((task_s,), queue=worker.queue) for _ in range(2)]
        for _ in range(2):
            if not r.blpop([tasks.STARTED_KEY], timeout=60):
                raise RuntimeError(f"the tasks did not start\n{worker.log_tail()}")
        code = worker.stop(timeout=task_s + 30)
        states = [x.state for x in results]
        return Outcome(
            "shutdown_results", pool, states == ["SUCCESS"] * 2 and code == 0,
            f"warm shutdown with 2 running tasks: exit {code}, results {states}",
            time.monotonic() - started, {"states": states},
        )  # fmt: skip
    finally:
        worker.cleanup()


def oom_named(
    pool: str, redis_url: str, limit_mib: int = 512, python: str = sys.executable
) -> Outcome:
    """``-c 2`` in a memory cgroup of ``limit_mib`` MiB; a task touching twice that is
    OOM-killed: does the task's error say out of memory, and does the worker go on?"""
    cgroup = MemoryCgroup(limit_mib).make()
    worker = Worker(pool, redis_url, cgroup=cgroup, python=python)
    started = time.monotonic()
    try:
        worker.start()
        failed = tasks.hog.apply_async((2 * limit_mib,), queue=worker.queue)
        error = ""
        try:
            failed.get(timeout=120)
        except Exception as exc:  # the worker-lost error the task fails with
            error = f"{type(exc).__name__}: {exc}"
        after = tasks.noop.apply_async((7,), queue=worker.queue).get(timeout=60)
        named = "oom" in error.lower() or "out of memory" in error.lower()
        return Outcome(
            "oom_named", pool, named and after == 7,
            f"the OOM-killed task failed with {error!r}; a task after it "
            + ("ran" if after == 7 else "did not run"),
            time.monotonic() - started, {"error": error, "named": named},
        )  # fmt: skip
    finally:
        worker.cleanup()
        cgroup.remove()


def recycle_soak(
    pool: str, redis_url: str, count: int = 1000, python: str = sys.executable
) -> Outcome:
    """``-c 2 --max-tasks-per-child 1``, ``count`` tasks: every one runs (each recycle
    is a fork, a WORKER_UP and a reap, the steps those hangs were in)."""
    worker = Worker(pool, redis_url, options=["--max-tasks-per-child", "1"], python=python)
    started = time.monotonic()
    try:
        worker.start()
        results = [tasks.noop.apply_async((i,), queue=worker.queue) for i in range(count)]
        window = 60 + count * 1.0  # prefork stalls up to 5 s on some recycles
        done = _count_ready(results, window, worker)
        return Outcome(
            "recycle_soak", pool, done == count,
            f"{done} of {count} recycled tasks ran within {window:g} s",
            time.monotonic() - started, {"done": done},
        )  # fmt: skip
    finally:
        worker.cleanup()
