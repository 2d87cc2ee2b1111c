"""The processes the harness runs: a Redis server of its own (Debian's ``redis-server``, on
a free local port, nothing saved, stopped at the end; never the system service) and
``celery worker`` processes, each on its own queue, with prefork's pool or pipepool's.

Every process started here is ended by its ``stop()``, within a bounded wait: a worker is
started in a session of its own, and whatever is still in that session when it is stopped
(children a hung pool never reaped, replacements it started meanwhile) is SIGKILLed, so a
hang reproduced against prefork cannot outlive its sample.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APP = "benchmarks.celery_pool.app"
PIPEPOOL_POOL = "pipepool.celery.prefork:TaskPool"
POOLS = ("prefork", "pipepool")  # the contenders, in the order of round 1
START_TIMEOUT = 60.0  # s for a worker to run its first tasks (a loaded machine is slow)
STOP_TIMEOUT = 20.0  # s a warm shutdown may take before the worker is killed
REDIS_START_TIMEOUT = 30.0  # s for redis-server to answer PING (a loaded 2-core machine)
LOGLEVEL_ENV = "CELERYBENCH_LOGLEVEL"  # the workers' log level: "debug" logs each apply
_queues = itertools.count()


def redis_server_path() -> str | None:
    """Debian's redis-server, or None where it is not installed."""
    return shutil.which("redis-server")


def pipepool_pool_missing() -> str | None:
    """Why pipepool's Celery pool cannot run here, or None if it can."""
    import importlib.util

    try:
        found = importlib.util.find_spec(PIPEPOOL_POOL.split(":")[0])
    except ImportError as exc:
        return f"{PIPEPOOL_POOL} cannot be imported: {exc}"
    return None if found else f"{PIPEPOOL_POOL} is not installed"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session(sid: int) -> list[int]:
    """Every live process of session ``sid`` (the worker and all it started)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(name)) == sid:
                    found.append(int(name))
    return found


def _end(proc: subprocess.Popen[bytes], sig: int, timeout: float) -> None:
    """Send ``sig``, wait up to ``timeout`` s, then SIGKILL the process's whole session."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout)
    for pid in [proc.pid, *_session(proc.pid)]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(10)


class RedisServer:
    """A private redis-server on 127.0.0.1: no RDB snapshots, no AOF, its log and files in
    ``directory`` (by default a temporary one, removed on exit), stopped by ``stop()``
    within a bounded wait. The one home of it: the harness's broker, and the Celery pool
    tests' (tests/celery_pool/conftest.py; benchmarks/ imports nothing from tests/ but
    tests/celery_pool/atomic_fs.py, which the sdist's tests need)."""

    def __init__(self, port: int | None = None, directory: str | None = None) -> None:
        self.port = port or _free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir = directory or tempfile.mkdtemp(prefix="celerybench-redis-")
        self._own_dir = directory is None  # a folder it made is its own to remove

    def db(self, n: int) -> str:
        """The URL of database ``n`` (the broker and the results use one each)."""
        return f"{self.url}/{n}"

    def start(self) -> RedisServer:
        path = redis_server_path()
        if path is None:
            raise RuntimeError("redis-server is not installed (apt-get install -y redis-server)")
        args = [path, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.dir, "--daemonize", "no",
                "--logfile", os.path.join(self.dir, "redis.log")]  # fmt: skip
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + REDIS_START_TIMEOUT
        while not self.ping():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s (Redis starts no children: no session to sweep)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def restart(self, down_s: float = 0.0) -> None:
        """Stop the server, stay down ``down_s`` s, start it again on the same port (its
        data is lost: queued messages too, as after a real broker restart without AOF)."""
        self.stop()
        time.sleep(down_s)
        self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Worker:
    """One ``celery worker`` process with ``pool`` ("prefork" or "pipepool") at ``-c
    concurrency``, consuming a queue of its own (``queue``); ``options`` are more CLI
    options (``--max-tasks-per-child 1``), ``env`` more environment variables."""

    pool: str
    redis_url: str
    concurrency: int = 2
    options: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    queue: str = field(default_factory=lambda: f"cb{os.getpid()}-{next(_queues)}")
    python: str = sys.executable  # another interpreter: another Celery (celery#10346 on 5.6)
    cgroup: MemoryCgroup | None = None  # started inside it (celery#1406's OOM kill)
    proc: subprocess.Popen[bytes] | None = None
    log: str = ""

    def command(self) -> list[str]:
        pool = ["-P", "custom"] if self.pool == "pipepool" else ["-P", self.pool]
        return [self.python, "-m", "celery", "-A", APP, "worker", *pool,
                "-c", str(self.concurrency), "-Q", self.queue, "-n", f"{self.queue}@%h",
                "--without-gossip", "--without-mingle", "--without-heartbeat",
                "-l", os.environ.get(LOGLEVEL_ENV, "warning"), "--logfile", self.log,
                *self.options]  # fmt: skip

    def start(self, warm: bool = True) -> Worker:
        """Start the worker; with ``warm``, return once it has run a few tasks on every
        child (``START_TIMEOUT``), else at once."""
        from .app import REDIS_ENV

        fd, self.log = tempfile.mkstemp(prefix=f"celerybench-{self.pool}-", suffix=".log")
        os.close(fd)
        env = dict(os.environ, **self.env)
        env[REDIS_ENV] = self.redis_url
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (ROOT, os.path.join(ROOT, "src"), env.get("PYTHONPATH", "")) if p
        )
        if self.pool == "pipepool":
            env["CELERY_CUSTOM_WORKER_POOL"] = PIPEPOOL_POOL
        command = self.command() if self.cgroup is None else self.cgroup.wrap(self.command())
        with open(self.log + ".err", "wb") as stderr:  # Celery's warnings before logging
            self.proc = subprocess.Popen(
                command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
            )  # fmt: skip
        if warm:
            try:
                self.warm()
            except BaseException:
                self.stop(timeout=0)
                raise
        return self

    def warm(self) -> None:
        from .app import noop

        n = 4 * self.concurrency
        results = [noop.apply_async((i,), queue=self.queue) for i in range(n)]
        deadline = time.monotonic() + START_TIMEOUT
        for r in results:
            while not r.ready():
                if self.proc is None or self.proc.poll() is not None:
                    raise RuntimeError(f"the {self.pool} worker exited: {self.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the {self.pool} worker ran no task: {self.log_tail()}")
                time.sleep(0.02)

    def children(self) -> list[int]:
        """The worker's live descendants (its pool's children, a zygote or fork server)."""
        if self.proc is None:
            return []
        return [p for p in _session(self.proc.pid) if p != self.proc.pid]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT, sig: int = signal.SIGTERM) -> int | None:
        """Warm shutdown (SIGTERM) bounded by ``timeout``, then everything killed; the
        worker's exit status (negative: the signal that ended it), or None if not started."""
        if self.proc is None:
            return None
        _end(self.proc, sig, timeout)
        code = self.proc.returncode
        self.proc = None
        return code

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for path in (self.log, self.log + ".err"):
            with contextlib.suppress(OSError), open(path, errors="replace") as f:
                out += f.read().splitlines()[-lines:]
        return "\n".join(out)

    def cleanup(self) -> None:
        self.stop()
        for path in (self.log, self.log + ".err"):
            with contextlib.suppress(OSError):
                os.unlink(path)

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.cleanup()


class MemoryCgroup:
    """A memory cgroup of the harness's own, below the one it runs in, limited to ``mib``
    MiB with no swap: a process started in it (``wrap``) that touches more is ended by
    the kernel's OOM killer, as in a container with a memory limit. Needs root and a
    writable cgroup tree (v1's memory controller, or v2 with memory enabled)."""

    def __init__(self, mib: int) -> None:
        self.path = ""
        self.mib = mib

    @staticmethod
    def _own() -> tuple[str, str, str] | None:
        """(folder, limit file, swap limit file) below this process's memory cgroup."""
        with open("/proc/self/cgroup") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
        for _, controllers, path in lines:
            if "memory" in controllers.split(","):
                base = os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"))
                return base, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
        for hierarchy, controllers, path in lines:
            if hierarchy == "0" and not controllers:
                base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
                return base, "memory.max", "memory.swap.max"
        return None

    def make(self) -> MemoryCgroup:
        own = self._own()
        if own is None:
            raise OSError("no memory cgroup to make one below")
        base, limit, swap = own
        self.path = os.path.join(base, f"celerybench-{os.getpid()}-{next(_queues)}")
        os.mkdir(self.path)
        try:
            with open(os.path.join(self.path, limit), "w") as f:
                f.write(str(self.mib << 20))
            with contextlib.suppress(OSError), open(os.path.join(self.path, swap), "w") as f:
                f.write(str(self.mib << 20) if swap.startswith("memory.memsw") else "0")
        except OSError:
            self.remove()
            raise
        return self

    def wrap(self, command: list[str]) -> list[str]:
        """``command`` run by a shell that first moves itself into this cgroup."""
        procs = os.path.join(self.path, "cgroup.procs")
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *command]

    def remove(self) -> None:
        for _ in range(50):  # the last processes' exit is accounted a moment later
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)


def connect(redis_url: str) -> Any:
    """Point this process's Celery app (the client side) at ``redis_url``; the app."""
    os.environ["CELERYBENCH_REDIS"] = redis_url
    from . import app as module

    module.URL = redis_url
    module._redis = None
    module.app.conf.update(broker_url=redis_url + "/0", result_backend=redis_url + "/1")
    return module.app
