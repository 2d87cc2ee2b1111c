"""Fixtures of the Celery pool's tests: a Redis server per module, and ``worker(...)``
that starts a real ``celery worker`` on the pool and stops it after the test."""

from __future__ import annotations

import sys

import pytest

import leakcheck

from .celery_support import RedisServer, Worker, close_clients


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    with leakcheck.keep(f"the Redis server of {server.port}", server.held):
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
        options.setdefault("broker", redis_server.url(0))
        options.setdefault("backend", redis_server.url(1))
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
