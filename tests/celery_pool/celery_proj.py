"""The Celery project the pool's tests start workers with (``celery -A celery_proj
worker``), as a user's project is started: its settings come from the environment each
test gives its worker (``celery_support.Worker``), and its tasks write what they do to a
file of runs, one line per event (O_APPEND: whole lines, in order), so a test counts
real runs, not results."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_process_init, worker_process_shutdown

app = Celery("celery_proj")
app.conf.update(
    broker_url=os.environ["CELERY_TEST_BROKER"],
    result_backend=os.environ["CELERY_TEST_BACKEND"],
    broker_transport_options=json.loads(os.environ.get("CELERY_TEST_TRANSPORT", "{}")),
    result_backend_transport_options=json.loads(os.environ.get("CELERY_TEST_TRANSPORT", "{}")),
    broker_connection_retry_on_startup=True,
    worker_pool_restarts=True,
    task_default_queue=os.environ.get("CELERY_TEST_QUEUE", "celery"),
    pipepool_start_method=os.environ.get("CELERY_TEST_START_METHOD", "fork"),
    worker_prefetch_multiplier=int(os.environ.get("CELERY_TEST_PREFETCH", "4")),
    **json.loads(os.environ.get("CELERY_TEST_CONF", "{}")),
)
if app.conf.broker_url.startswith("filesystem://"):  # messages written whole (atomic_fs.py)
    from tests.celery_pool.atomic_fs import TRANSPORT

    app.conf.broker_transport = TRANSPORT
if os.environ.get("CELERY_TEST_WORKER_POOL"):  # the route by setting (no -P)
    app.conf.worker_pool = os.environ["CELERY_TEST_WORKER_POOL"]

RUNS = os.environ.get("CELERY_TEST_RUNS", os.devnull)


def record(*words: object) -> None:
    """One line in the file of runs: what happened, in this process, and when (the wall
    clock, last: the same clock in every process)."""
    with open(RUNS, "a") as f:
        f.write(" ".join(str(w) for w in (*words, time.time())) + "\n")


@worker_process_init.connect
def _child_ready(**_: object) -> None:
    record("init", os.getpid(), os.environ.get("FORKED_BY_MULTIPROCESSING", "-"))


@worker_process_shutdown.connect
def _child_gone(pid: int, exitcode: int, **_: object) -> None:
    record("shutdown", pid, exitcode)


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def whoami() -> dict:
    """Which child ran it, and whether the fast tracer's registry is set up there."""
    from celery.app import trace

    return {
        "pid": os.getpid(),
        "fast_tracer": len(trace._localized) == 3,  # set by setup_worker_optimizations
        "forked_by_multiprocessing": os.environ.get("FORKED_BY_MULTIPROCESSING"),
        "sigusr1": str(signal.getsignal(signal.SIGUSR1)),
    }


@app.task
def sleep(seconds: float, key: str = "") -> float:
    record("start", key or "sleep", os.getpid())
    time.sleep(seconds)
    record("done", key or "sleep", os.getpid())
    return seconds


@app.task(acks_late=True)
def sleep_late(seconds: float, key: str) -> float:
    """``sleep`` acknowledged only once it ends (``acks_late``)."""
    return sleep(seconds, key)


@app.task
def soft_limited(seconds: float, key: str) -> str:
    """Sleeps past its soft limit; says whether SoftTimeLimitExceeded came, and when."""
    began = time.monotonic()
    try:
        time.sleep(seconds)
    except SoftTimeLimitExceeded:
        record("soft", key, os.getpid(), round(time.monotonic() - began, 3))
        return "soft limit"
    return "no limit"


@app.task
def hard_limited(key: str, pidfile: str) -> None:
    """Starts a grandchild (in the child's process group) and sleeps past every limit."""
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(pidfile, "w") as f:
        f.write(f"{os.getpid()} {grandchild.pid}")
    record("start", key, os.getpid())
    time.sleep(600)


@app.task(acks_late=True, reject_on_worker_lost=True)
def die_once(key: str, marker: str) -> str:
    """Kills its own child the first time it runs (the marker file says it ran)."""
    record("start", key, os.getpid())
    if not os.path.exists(marker):
        with open(marker, "w"):
            pass
        os.kill(os.getpid(), signal.SIGKILL)
    record("done", key, os.getpid())
    return "second run"


@app.task
def die(key: str, signum: int = signal.SIGKILL) -> None:
    record("start", key, os.getpid())
    os.kill(os.getpid(), signum)


@app.task(acks_late=True)
def die_after_result(key: str, delay: float) -> str:
    """Returns its result, then its child is killed ``delay`` s later (idle by then)."""
    record("start", key, os.getpid())

    def later() -> None:
        time.sleep(delay)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=later, daemon=True).start()
    record("done", key, os.getpid())
    return "sent"


@app.task
def echo_size(data: bytes, size: int) -> bytes:
    """A big argument in, a big result out."""
    return data[:16] + b"\0" * (size - 16)


@app.task(bind=True, max_retries=3, default_retry_delay=0.2)
def retry_twice(self, key: str) -> int:
    record("try", key, self.request.retries)
    if self.request.retries < 2:
        raise self.retry(countdown=0.2)
    return self.request.retries


@app.task
def total(numbers: list) -> int:
    return sum(numbers)


@app.task
def bloat(megabytes: int) -> int:
    """Grows this child's memory (kept until the child exits)."""
    _kept.append(bytearray(megabytes << 20))
    for block in _kept:  # touched: resident, not only reserved
        block[::4096] = b"\1" * len(block[::4096])
    return os.getpid()


_kept: list[bytearray] = []


@app.task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def chaos(key: int) -> None:
    """The chaos run's task: its start and its end, each a line."""
    record("start", key, os.getpid())
    record("done", key, os.getpid())
