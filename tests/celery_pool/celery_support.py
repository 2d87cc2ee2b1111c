"""What the Celery pool's tests share: the CI rule for a missing Celery or redis-server,
a Redis server of their own (the benchmark harness's ``RedisServer``, the one home of it:
Debian's ``redis-server`` on a free port of 127.0.0.1, no persistence, stopped at the
end; conftest.py's ``redis_server``), and a real ``celery worker`` on pipepool's pool, started
as a user starts one (``-P custom`` with CELERY_CUSTOM_WORKER_POOL, the ``worker_pool``
setting, or ``pool_cls=`` from Python) and stopped, or killed, whatever the test did.

Every wait here is bounded: a worker that does not come up, a task that does not end, a
process that does not exit fail the test with the worker's log, never hang it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import leakcheck
import optional
from helpers import ENV, wait_for

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]  # the checkout or the sdist: tests.celery_pool imports from there
POOL = "pipepool.celery.prefork:TaskPool"
START_LIMIT = 90.0  # s for a worker to say "ready" (a loaded 2-core machine, spawn)
TASK_LIMIT = 60.0  # s for any one result


def require() -> None:
    """Skip the calling module without Celery, unless CI=true: then fail (tests/optional.py,
    the one rule for every integration)."""
    optional.require("celery", load=False)


def require_redis() -> str:
    """The redis-server binary: skip without it locally, fail with CI=true."""
    found = shutil.which("redis-server")
    if found is None:
        how = "apt-get install redis-server"
        if optional.in_ci():
            raise RuntimeError(f"CI=true but redis-server is not installed ({how})")
        pytest.skip(f"redis-server is not installed ({how})", allow_module_level=True)
    return found


_clients: list[Any] = []  # every client app made, closed after each test


def client(broker: str, backend: str, transport: dict | None = None):
    """A Celery app for the test's side: it sends tasks by name and reads results."""
    from celery import Celery

    app = Celery("celery_test_client", broker=broker, backend=backend, set_as_current=False)
    app.conf.broker_transport_options = transport or {}
    app.conf.result_backend_transport_options = transport or {}
    app.conf.broker_connection_retry_on_startup = True
    if broker.startswith("filesystem://"):  # messages written whole, as the worker's
        from tests.celery_pool.atomic_fs import TRANSPORT

        app.conf.broker_transport = TRANSPORT
    _clients.append(app)
    return app


def close_clients() -> None:
    """Close every connection the tests' client apps opened (they open them again when
    used): the broker's pools, the result backend's, and any kombu connection still
    open (the control mailbox's), so that no socket or poller outlives a test."""
    import gc

    from kombu import Connection

    for app in _clients:
        with contextlib.suppress(Exception):
            app.close()
        backend = app.__dict__.get("backend")  # only a backend that was made
        if backend is None:
            continue
        consumer = getattr(backend, "result_consumer", None)
        with contextlib.suppress(Exception):
            if consumer is not None:
                consumer.stop()
                # Forgotten, so that a result collected later does not open a connection
                # again to unsubscribe (AsyncResult.__del__).
                consumer.subscribed_to.clear()
                consumer._pending_unsubscribe.clear()
        pool = getattr(getattr(backend, "client", None), "connection_pool", None)
        with contextlib.suppress(Exception):
            if pool is not None:
                pool.disconnect()
    from redis.client import PubSub
    from redis.connection import ConnectionPool

    for obj in gc.get_objects():
        try:  # (a weak proxy whose object is gone raises even on isinstance)
            if isinstance(obj, Connection | PubSub):
                obj.close()
            elif isinstance(obj, ConnectionPool):
                obj.disconnect()
        except Exception:
            continue


def filesystem_transport(directory: Path) -> dict[str, Any]:
    """kombu's filesystem transport's options: every message a file in ``directory``."""
    for sub in ("queue", "processed", "control"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(directory / "queue"),
        "data_folder_out": str(directory / "queue"),
        "processed_folder": str(directory / "processed"),
        "control_folder": str(directory / "control"),
        "store_processed": False,
        "polling_interval": 0.05,
    }


class Worker:
    """A ``celery -A celery_proj worker`` process on pipepool's pool, and its files.

    ``route``: "custom" (``-P custom``, CELERY_CUSTOM_WORKER_POOL: the docs' command),
    "setting" (``worker_pool`` in the app's configuration, no ``-P``) or "pool_cls"
    (``app.Worker(pool_cls=TaskPool)`` from a Python script)."""

    def __init__(
        self,
        directory: Path,
        name: str,
        *,
        broker: str,
        backend: str,
        concurrency: int = 2,
        args: tuple[str, ...] = (),
        conf: dict[str, Any] | None = None,
        transport: dict[str, Any] | None = None,
        start_method: str = "fork",
        route: str = "custom",
        env: dict[str, str] | None = None,
        queue: str | None = None,
    ) -> None:
        self.directory = directory
        self.name = name
        self.hostname = f"{name}@pipepool-tests"
        self.broker, self.backend, self.transport = broker, backend, transport or {}
        self.runs_file = directory / f"{name}.runs"
        self.log_file = directory / f"{name}.log"
        # Only this worker's, unless told (a second worker on a first one's queue).
        self.queue = queue or f"q-{name}-{os.getpid()}-{time.monotonic_ns()}"
        self.env = {
            **ENV,
            **(env or {}),
            "CELERY_CUSTOM_WORKER_POOL": POOL,
            "CELERY_TEST_BROKER": broker,
            "CELERY_TEST_BACKEND": backend,
            "CELERY_TEST_TRANSPORT": json.dumps(self.transport),
            "CELERY_TEST_CONF": json.dumps(conf or {}),
            "CELERY_TEST_RUNS": str(self.runs_file),
            "CELERY_TEST_QUEUE": self.queue,
            "CELERY_TEST_START_METHOD": start_method,
            # celery_proj (HERE), and tests.celery_pool.atomic_fs, the filesystem broker it
            # shares with benchmarks/celery_pool (ROOT):
            "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), ENV.get("PYTHONPATH", "")]),
        }
        options = [
            "-c",
            str(concurrency),
            "-n",
            self.hostname,
            "-Q",
            self.queue,
            "-l",
            "info",
            "--without-mingle",
            "--without-gossip",
            *args,
        ]
        if route == "custom":
            command = [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "celery_proj",
                "worker",
                "-P",
                "custom",
                *options,
            ]
        elif route == "setting":
            self.env["CELERY_TEST_WORKER_POOL"] = POOL
            command = [sys.executable, "-m", "celery", "-A", "celery_proj", "worker", *options]
        else:
            command = [sys.executable, str(HERE / "celery_pool_cls.py"), *options]
        self.command = command
        self.proc: subprocess.Popen | None = None
        self.app = client(broker, backend, self.transport)
        self.start()

    # -- the process ------------------------------------------------------------------

    def start(self) -> None:
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                cwd=HERE,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        if not wait_for(
            lambda: "ready." in self.log() or self.proc.poll() is not None, START_LIMIT, 0.05
        ):
            self.kill()
            pytest.fail(f"worker {self.name} did not start:\n{self.log()[-5000:]}")
        if self.proc.poll() is not None:
            pytest.fail(f"worker {self.name} exited at start:\n{self.log()[-5000:]}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def children(self) -> set[int]:
        """The worker's child processes now (its pool's children, and the zygote)."""
        kids: set[int] = set()
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{self.pid}/task"):
                with (
                    contextlib.suppress(OSError),
                    open(f"/proc/{self.pid}/task/{tid}/children") as f,
                ):
                    kids.update(int(p) for p in f.read().split())
        return kids

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signum)

    def wait(self, limit: float) -> int | None:
        """The worker's exit status once it exited within ``limit`` s, else None."""
        assert self.proc is not None
        try:
            return self.proc.wait(limit)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, limit: float = 30.0) -> int | None:
        """Warm shutdown (SIGTERM), then SIGKILL past ``limit``; its children gone too."""
        if self.proc is None:
            return None
        kids = self.children()
        self.signal(signal.SIGTERM)
        code = self.wait(limit)
        if code is None:
            self.kill()
            code = self.proc.returncode
        # The pool's children exit when the worker has (their lifeline): bounded.
        assert wait_for(lambda: not any(_alive(p) for p in kids), 30), f"children left: {kids}"
        return code

    def kill(self) -> None:
        if self.proc is None:
            return
        kids = self.children()
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        for pid in kids:  # a child's lifeline ends it too; this makes sure, at teardown
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def held(self) -> leakcheck.Held:
        return leakcheck.Held(
            pids={self.proc.pid} if self.proc and self.proc.poll() is None else set()
        )

    # -- talking to it ----------------------------------------------------------------

    def send(self, name: str, *args: Any, **options: Any):
        """Send task ``celery_proj.<name>`` to this worker's queue; its AsyncResult."""
        return self.app.send_task(f"celery_proj.{name}", args=args, queue=self.queue, **options)

    def run(self, name: str, *args: Any, limit: float = TASK_LIMIT, **options: Any) -> Any:
        return self.send(name, *args, **options).get(timeout=limit)

    def inspect(self, timeout: float = 10.0):
        return self.app.control.inspect(destination=[self.hostname], timeout=timeout)

    def stats(self) -> dict[str, Any]:
        """``celery inspect stats`` of this worker (retried: a busy worker may miss one)."""
        for _ in range(5):
            answer = self.inspect().stats() or {}
            if self.hostname in answer:
                return answer[self.hostname]
        raise AssertionError(f"no stats from {self.hostname}:\n{self.log()[-3000:]}")

    def pool(self) -> dict[str, Any]:
        return self.stats()["pool"]

    def control(self, command: str, **arguments: Any) -> Any:
        return self.app.control.broadcast(
            command, arguments=arguments, destination=[self.hostname], reply=True, timeout=10
        )

    def runs(self) -> list[list[str]]:
        try:
            text = self.runs_file.read_text()
        except FileNotFoundError:
            return []
        return [line.split() for line in text.splitlines() if line.strip()]

    def count(self, what: str) -> Counter:
        """How many lines of ``what`` ("start", "done", "init", ...) each key has."""
        return Counter(words[1] for words in self.runs() if words[0] == what)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def alive(pid: int) -> bool:
    """Is ``pid`` a live process (not gone, not a zombie)?"""
    return _alive(pid)
