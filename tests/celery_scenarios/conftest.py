"""What the scenario tests need: Celery, redis-py and Debian's redis-server (each skips
the folder where it is missing, and fails it in CI, ``CI=true``), the benchmark harness
beside tests/ (a source checkout), and a finalizer that kills whatever a run left.

Each scenario runs in a subprocess (``python -m benchmarks.celery_pool --scenarios NAME
--json``), which starts its own Redis server and worker, with a marker in its environment
that every process it starts inherits: the finalizer SIGKILLs any process still carrying
it, so neither a hung prefork nor a run killed by the timeout leaves anything behind.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import optional

ROOT = Path(__file__).resolve().parents[2]
MARK = "CELERYBENCH_TEST_MARK"
PIPEPOOL_POOL = "pipepool.celery.prefork"


def _missing(what: str, why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} is missing in CI: {why}", pytrace=False)
    pytest.skip(f"{what} is missing: {why}")


def require_pool(pool: str) -> None:
    """Skip (fail in CI) where ``pool`` cannot run: pipepool's Celery pool not there."""
    if pool == "pipepool" and importlib.util.find_spec("pipepool.celery") is None:
        _missing(PIPEPOOL_POOL, "pipepool's Celery pool is not in this checkout")


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    if not (ROOT / "benchmarks" / "celery_pool" / "run.py").is_file():
        pytest.skip("no benchmarks/ beside tests/ (not a source checkout)")
    optional.require("celery", load=False)  # with redis-py: pipepool[celery] brings both
    optional.require("redis", load=False)
    if shutil.which("redis-server") is None:
        _missing("redis-server", "apt-get install -y redis-server")


@pytest.fixture(scope="module")
def memory_cgroups() -> None:
    """Skip unless a memory cgroup can be made below this process's (root, a writable
    cgroup tree): the OOM scenario runs its worker in one."""
    from benchmarks.celery_pool.services import MemoryCgroup

    try:
        MemoryCgroup(64).make().remove()
    except OSError as exc:
        pytest.skip(f"cannot make a memory cgroup here: {exc}")


def _marked(mark: str) -> list[int]:
    found = []
    needle = f"{MARK}={mark}".encode()
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
    return found


@pytest.fixture
def run_scenario():
    """``run_scenario(name, pool, window, timeout, *options)``: the outcome dict of one
    scenario on one pool, run by the harness in a subprocess bounded by ``timeout`` s."""
    mark = uuid.uuid4().hex

    def run(name: str, pool: str, window: float, timeout: float, *more: str) -> dict[str, Any]:
        require_pool(pool)
        env = dict(os.environ, **{MARK: mark})
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")) if p
        )
        harness = [sys.executable, "-m", "benchmarks.celery_pool", "--smoke", "--json"]
        command = [*harness, "--scenarios", name, "--pools", pool, "--window", str(window), *more]
        done = subprocess.run(
            command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        (outcome,) = json.loads(done.stdout.strip().splitlines()[-1])
        outcome["log"] = done.stderr[-3000:]
        return outcome

    yield run
    for _ in range(3):  # a process may fork while the others are killed: look again
        pids = _marked(mark)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
