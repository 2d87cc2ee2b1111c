"""Fixtures of the ProcessPoolExecutor tests: pools of the class under test (pipepool's
or the standard library's) that are shut down, and checked for leaks, at the end."""

from __future__ import annotations

import concurrent.futures as cf
import gc
import multiprocessing
import threading

import pytest

import pipepool
import proc_table
from helpers import FUTURE_WAIT as WAIT
from helpers import wait_for

POOLS = {"pipepool": pipepool.ProcessPoolExecutor, "stdlib": cf.ProcessPoolExecutor}


@pytest.fixture(scope="module")
def _shared_helpers_running():
    """Start the resource tracker and fork server before any leak check: they are shared
    by every pool of the process and live on purpose."""
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    forkserver.ensure_running()


@pytest.fixture(params=list(POOLS))
def flavor(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_pool(flavor, start_method, no_leaks):
    """Build pools of the class under test; all are shut down (waiting) at the end, and
    the test fails if a process, thread or fd outlives them."""
    made: list[cf.Executor] = []
    threads_before, fds_before = set(threading.enumerate()), proc_table.open_fds()
    # Children alive before this test (another suite's reusable pool, e.g. loky's under
    # joblib's tests) are not this pool's to wind down.
    children_before = {p.pid for p in multiprocessing.active_children()}

    def make(max_workers: int = 2, **kwargs) -> cf.Executor:
        pool = POOLS[flavor](
            max_workers, mp_context=multiprocessing.get_context(start_method), **kwargs
        )
        made.append(pool)
        return pool

    yield make
    for pool in made:
        if flavor == "stdlib":
            shutdown_stdlib(pool)
        else:
            pool.shutdown(wait=True, cancel_futures=True)
    if flavor == "stdlib":
        # After a shutdown(wait=False), the stdlib's later shutdown(wait=True) no longer
        # joins its workers or threads, and its queues' pipes close when collected: give
        # it time to wind down before the leak check (pipepool gets none). A full
        # collection only when something is left: in an xdist worker with a big heap
        # it costs a few tenths of a second each.
        def gone() -> bool:
            return (
                {p.pid for p in multiprocessing.active_children()} <= children_before
                and set(threading.enumerate()) <= threads_before
                and proc_table.open_fds() <= fds_before
            )

        def wound_down() -> bool:
            if gone():
                return True
            gc.collect()
            return gone()

        assert wait_for(wound_down), "the stdlib pool did not wind down"


def shutdown_stdlib(pool: cf.ProcessPoolExecutor) -> None:
    """shutdown(wait=True) of a stdlib pool, bounded: a wedged one (gh-115634, say) has
    its workers killed, which breaks it and lets its shutdown return."""
    processes = dict(pool._processes or {})  # type: ignore[attr-defined]
    closer = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True})
    closer.start()
    closer.join(WAIT)
    if closer.is_alive():
        for process in processes.values():
            process.kill()
        closer.join(WAIT)
        pytest.fail("the stdlib pool hung in shutdown(); its workers were killed")


@pytest.fixture
def make_pipepool(start_method, no_leaks):
    made: list[pipepool.ProcessPoolExecutor] = []

    def make(max_workers: int = 2, **kwargs) -> pipepool.ProcessPoolExecutor:
        pool = pipepool.ProcessPoolExecutor(
            max_workers, mp_context=multiprocessing.get_context(start_method), **kwargs
        )
        made.append(pool)
        return pool

    yield make
    for pool in made:
        pool.shutdown(wait=True, cancel_futures=True)
