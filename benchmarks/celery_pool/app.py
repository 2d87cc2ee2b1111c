"""The Celery app every worker of the harness runs (``celery -A benchmarks.celery_pool.app``)
and its tasks. The broker and result backend are the harness's own Redis server, named by
``CELERYBENCH_REDIS`` (a ``redis://127.0.0.1:PORT`` URL) in the worker's environment and
the client's alike.

Timestamps are ``time.monotonic()``: CLOCK_MONOTONIC, one clock for every process of the
machine, so a task's start read in a child compares with a kill read in the harness.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from celery import Celery, signals

# The tests' (shipped in the sdist, which lacks benchmarks/); a checkout has both.
from tests.celery_pool.atomic_fs import TRANSPORT as ATOMIC_FILESYSTEM

REDIS_ENV = "CELERYBENCH_REDIS"
INIT_SLEEP_ENV = "CELERYBENCH_INIT_SLEEP"  # s each child sleeps in worker_process_init
ALIVE_ENV = "CELERYBENCH_PROC_ALIVE_TIMEOUT"  # worker_proc_alive_timeout, if set (default 4 s)
CONF_ENV = "CELERYBENCH_CONF"  # JSON: more settings ({"worker_disable_prefetch": true})
FS_ENV = "CELERYBENCH_FS_BROKER"  # a folder: the filesystem transport instead of Redis (no
# event loop: Celery runs its blocking loop, and prefork billiard's blocking Pool)
RELEASE_KEY = "celerybench:release"  # block() returns once a value is pushed here
STARTED_KEY = "celerybench:started"  # block() and mark() push "pid start" here
EFFECTS_KEY = "celerybench:effects"  # effect() counts each run of a task id here

URL = os.environ.get(REDIS_ENV, "redis://127.0.0.1:6379")

app = Celery("celerybench", broker=URL + "/0", backend=URL + "/1")
if os.environ.get(FS_ENV):
    _folder = os.environ[FS_ENV]
    app.conf.broker_url = "filesystem://"
    app.conf.broker_transport_options = {
        "data_folder_in": _folder,
        "data_folder_out": _folder,
        "control_folder": os.path.join(_folder, "control"),  # not the worker's cwd
        "polling_interval": 0.05,
    }
    app.conf.broker_transport = ATOMIC_FILESYSTEM  # messages written whole (atomic_fs.py)
if os.environ.get(CONF_ENV):
    app.conf.update(json.loads(os.environ[CONF_ENV]))
if os.environ.get(ALIVE_ENV):
    app.conf.worker_proc_alive_timeout = float(os.environ[ALIVE_ENV])
app.conf.update(
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_redirect_stdouts=False,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_expires=600,
    # The harness reads results as soon as they exist: no result is ever waited for
    # on a stale pub/sub subscription.
    redis_backend_health_check_interval=None,
)

_redis: Any = None


def redis_client() -> Any:
    """This process's connection to the harness's Redis (db 2: the tasks' own keys)."""
    global _redis
    if _redis is None:
        import redis

        _redis = redis.Redis.from_url(URL + "/2")
    return _redis


@signals.worker_process_init.connect
def _slow_init(**_: Any) -> None:
    """A child initializer that takes ``CELERYBENCH_INIT_SLEEP`` seconds (celery#1715)."""
    delay = float(os.environ.get(INIT_SLEEP_ENV) or 0)
    if delay:
        time.sleep(delay)


@app.task(name="cb.noop")
def noop(i: int) -> int:
    """Return the argument: the pool's and the broker's overhead and nothing else."""
    return i


@app.task(name="cb.stamp")
def stamp(i: int) -> tuple[int, int, float, float]:
    """``(i, pid, start, end)``: when the task began and ended in its child."""
    start = time.monotonic()
    return i, os.getpid(), start, time.monotonic()


@app.task(name="cb.block")
def block(timeout: float) -> int:
    """Say "pid start" on STARTED_KEY, then wait (at most ``timeout`` s) for a release:
    a long task that the harness holds a child with, and ends when it is done."""
    r = redis_client()
    r.rpush(STARTED_KEY, f"{os.getpid()} {time.monotonic()}")
    r.blpop([RELEASE_KEY], timeout=timeout)
    return os.getpid()


@app.task(name="cb.sleep")
def sleep(seconds: float) -> int:
    """Say "pid start" on STARTED_KEY, sleep, return the pid: a long task that needs
    neither the broker nor Redis while it runs (it outlives a Redis restart)."""
    redis_client().rpush(STARTED_KEY, f"{os.getpid()} {time.monotonic()}")
    time.sleep(seconds)
    return os.getpid()


@app.task(name="cb.effect", acks_late=True, reject_on_worker_lost=True)
def effect(key: str) -> int:
    """Count one run of ``key`` (a side effect that a second run shows), return the pid."""
    redis_client().hincrby(EFFECTS_KEY, key, 1)
    return os.getpid()


@app.task(name="cb.grow")
def grow(kib: int) -> int:
    """Keep ``kib`` KiB alive in the child for its lifetime: its RSS grows past a
    ``max_memory_per_child`` after the task, as a leaking task's would."""
    _kept.append(bytearray(os.urandom(1024)) * kib)
    return os.getpid()


_kept: list[bytearray] = []


@app.task(name="cb.hog")
def hog(mib: int) -> int:
    """Touch ``mib`` MiB at once: in a memory cgroup smaller than that, the OOM killer's
    SIGKILL ends the child (celery#1406)."""
    chunks = [b"\1" * (1 << 20) for _ in range(mib)]
    return len(chunks)
