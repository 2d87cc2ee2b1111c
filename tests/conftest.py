"""Shared fixtures: both loop implementations, every start method, leak checks."""

from __future__ import annotations

import os
import threading

import pytest

import proc_table
from pipepool import loop as _impl
from proc_table import open_fds

START_METHODS = ["fork", "spawn", "forkserver"]


def implementations() -> list[str]:
    """Both twins, unless PIPEPOOL_IMPL pins one (a pure build sets it to "python")."""
    forced = os.environ.get("PIPEPOOL_IMPL", "").strip().lower()
    if forced in ("python", "cython"):
        return [forced]
    return ["python", "cython"]


@pytest.fixture(params=implementations())
def impl(request: pytest.FixtureRequest) -> str:
    """The loop implementation under test; "cython" fails loudly if it did not build."""
    _impl.load(request.param)  # raises ImportError when the compiled loop is missing
    return request.param


@pytest.fixture
def loop_module(impl: str):
    return _impl.load(impl)[1]


@pytest.fixture(params=START_METHODS)
def start_method(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make(impl: str, start_method: str):
    """A factory of started LocalExecutors on this test's loop and start method; each is
    terminated after the test, whatever the test left behind."""
    from pipepool import LocalExecutor

    made: list = []

    def factory(parallelism: int, **kwargs) -> LocalExecutor:
        ex = LocalExecutor(parallelism, start_method=start_method, _loop_impl=impl, **kwargs)
        ex.start()
        made.append(ex)
        return ex

    yield factory
    for ex in made:
        ex.terminate()


@pytest.fixture
def pipes_only(monkeypatch):
    """Every payload through the pipes, as before the shared rings: for the tests of the
    pipe path (partial writes, a worker blocked in a big write). The parent writes the
    threshold into each region it makes, so this holds for every start method."""
    from pipepool.worker import _region

    monkeypatch.setattr(_region, "THRESHOLD", 1 << 62)


def child_pids() -> set[int]:
    """Pids whose parent is this process (zombies included): /proc, or ps on macOS."""
    return proc_table.children(os.getpid())


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves a child, a thread or an fd behind."""
    import multiprocessing

    fds_before = open_fds()
    threads_before = {t.ident for t in threading.enumerate()}
    kids_before = child_pids()
    yield
    multiprocessing.active_children()  # reaps multiprocessing's own finished children
    leaked_kids = child_pids() - kids_before
    # The forkserver and the resource tracker are shared and live on purpose (the first
    # spawn or forkserver pool of a session starts the tracker); they are not ours to leak.
    leaked_kids = {p for p in leaked_kids if not _is_multiprocessing_helper(p)}
    assert not leaked_kids, f"child processes left behind: {sorted(leaked_kids)}"
    leaked_threads = [t for t in threading.enumerate() if t.ident not in threads_before]
    assert not leaked_threads, f"threads left behind: {leaked_threads}"
    leaked_fds = open_fds() - fds_before
    leaked_fds = {fd for fd in leaked_fds if not _is_forkserver_fd(fd)}
    assert not leaked_fds, f"fds left open: {sorted(leaked_fds)}"


def _is_multiprocessing_helper(pid: int) -> bool:
    cmd = proc_table.cmdline(pid)
    return b"forkserver" in cmd or b"resource_tracker" in cmd


def _is_forkserver_fd(fd: int) -> bool:
    from multiprocessing import forkserver

    server = forkserver._forkserver
    return fd in (server._forkserver_alive_fd,) or _is_resource_tracker_fd(fd)


def _is_resource_tracker_fd(fd: int) -> bool:
    from multiprocessing import resource_tracker

    return fd == getattr(resource_tracker._resource_tracker, "_fd", None)


_AIRFLOW_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "airflow")


def pytest_collection_modifyitems(items) -> None:
    """tests/airflow/ runs last: importing Airflow makes each later fork of this process
    copy a much bigger address space, and the core suite forks workers by the thousand
    (tests/test_hardening.py recycles one per task)."""
    items.sort(key=lambda item: str(item.fspath).startswith(_AIRFLOW_TESTS))  # stable
