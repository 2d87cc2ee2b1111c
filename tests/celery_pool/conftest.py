"""Fixtures of the Celery pool's tests: a Redis server per module, and ``worker(...)``
that starts a real ``celery worker`` on the pool and stops it after the test."""

from __future__ import annotations

import sys

import pytest

import leakcheck

from .celery_support import Worker, close_clients, require_redis


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """The module's Redis (benchmarks/celery_pool/services.py's, the harness's own), its
    files in the module's temporary folder; ``restart()`` brings it back empty."""
    require_redis()
    services = pytest.importorskip(
        "benchmarks.celery_pool.services",
        reason="no benchmarks/ beside tests/ (not a source checkout)",
    )
    server = services.RedisServer(directory=str(tmp_path_factory.mktemp("redis"))).start()

    def held() -> leakcheck.Held:
        return leakcheck.Held(pids={server.proc.pid} if server.proc else set())

    with leakcheck.keep(f"the Redis server of {server.port}", held):
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def worker(tmp_path, redis_server):
    """``worker(name, **options)``: a worker on the module's Redis (db 0 broker, db 1
    results) unless told otherwise; each is stopped, or killed, after the test."""
    started: list[Worker] = []

    def start(name: str = "w", **options) -> Worker:
        options.setdefault("broker", redis_server.db(0))
        options.setdefault("backend", redis_server.db(1))
        w = Worker(tmp_path, name, **options)
        started.append(w)
        return w

    yield start
    for w in started:
        w.kill()


@pytest.fixture(autouse=True)
def closed_clients():
    """The test's client connections closed before the leak check looks (conftest.py's
    leak check is set up first, so it is torn down after this)."""
    yield
    if "celery" in sys.modules:
        close_clients()
