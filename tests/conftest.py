"""Fixtures: both loop implementations, every start method, executor factories, the
shared Dask cluster, leak checks. Helpers are in helpers.py."""

from __future__ import annotations

import copyreg
import os
import threading

import pytest

import proc_table
from helpers import START_METHODS, Executors, SharedCluster, implementations, is_tblib
from pipepool import _impl


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
    """``make(parallelism, **kwargs)``: a started LocalExecutor on this test's loop and
    start method; each is terminated after the test, whatever the test left behind."""
    executors = Executors(impl, start_method)
    yield executors
    executors.close()


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves a child, a thread or an fd behind."""
    import multiprocessing
    from multiprocessing import forkserver, resource_tracker

    def helper(pid: int) -> bool:
        # The forkserver and the resource tracker are shared and live on purpose (the
        # first spawn or forkserver pool of a session starts the tracker).
        cmd = proc_table.cmdline(pid)
        return b"forkserver" in cmd or b"resource_tracker" in cmd

    def helper_fd(fd: int) -> bool:
        server, tracker = forkserver._forkserver, resource_tracker._resource_tracker
        return fd in (server._forkserver_alive_fd, getattr(tracker, "_fd", None))

    fds_before = proc_table.open_fds()
    threads_before = {t.ident for t in threading.enumerate()}
    kids_before = proc_table.children(os.getpid())
    yield
    multiprocessing.active_children()  # reaps multiprocessing's own finished children
    leaked_kids = proc_table.children(os.getpid()) - kids_before
    leaked_kids = {p for p in leaked_kids if not helper(p)}
    assert not leaked_kids, f"child processes left behind: {sorted(leaked_kids)}"
    leaked_threads = [t for t in threading.enumerate() if t.ident not in threads_before]
    assert not leaked_threads, f"threads left behind: {leaked_threads}"
    leaked_fds = {fd for fd in proc_table.open_fds() - fds_before if not helper_fd(fd)}
    assert not leaked_fds, f"fds left open: {sorted(leaked_fds)}"


@pytest.fixture(scope="session")
def _shared_cluster(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("distributed")
    cluster = SharedCluster(tmp_path_factory.mktemp("dask"))
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def dask_cluster(_shared_cluster: SharedCluster):
    """The Dask cluster the ClusterExecutor tests share (helpers.ClusterHost: a
    LocalCluster of two worker processes, in a process of its own), with every worker
    there: a test may kill one, and the next one waits for its replacement."""
    import tblib.pickling_support

    tblib.pickling_support.install()  # as importing distributed did (undone below)
    return _shared_cluster.whole()


@pytest.fixture(scope="module", autouse=True)
def no_tblib_after_this_module():
    """Importing distributed registers tblib's reducer for every exception class in this
    process (copyreg), and so in LocalExecutor's forked workers, where SystemExit then
    loses its code. Later modules test LocalExecutor in a process without Dask: undo it."""
    yield
    for cls, reducer in list(copyreg.dispatch_table.items()):
        if is_tblib(reducer):
            del copyreg.dispatch_table[cls]


_AIRFLOW_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "airflow")


def pytest_collection_modifyitems(items) -> None:
    """tests/airflow/ runs last: importing Airflow makes each later fork of this process
    copy a much bigger address space, and the core suite forks workers by the thousand
    (tests/test_hardening.py recycles one per task)."""
    items.sort(key=lambda item: str(item.fspath).startswith(_AIRFLOW_TESTS))  # stable
