"""The pool under Celery's blocking loop (synloop): the filesystem transport has no
event loop for the pool's fds, so a thread of the pool's own steps it and calls the
callbacks (as billiard's result handler thread does); results go to files too. No Redis."""

from __future__ import annotations

import signal

import pytest

import leakcheck

from .celery_support import Worker, alive, filesystem_transport, require, wait_for

require()  # skip without Celery locally; with CI=true, fail

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    directory = tmp_path_factory.mktemp("celery-fs")
    results = directory / "results"
    results.mkdir()
    worker = Worker(
        directory,
        "fs",
        broker="filesystem://",
        backend=f"file://{results}",
        transport=filesystem_transport(directory / "broker"),
    )
    with leakcheck.keep("the module's Celery worker (filesystem)", worker.held):
        try:
            yield worker
        finally:
            worker.kill()


def test_a_thread_of_the_pool_drives_it(w):
    pool = w.pool()
    assert pool["pipepool"]["driven-by"] == "thread"
    assert pool["put-guarded-by-semaphore"] is True
    assert pool["pipepool"]["semaphore"] == {"value": 2, "initial": 2}
    assert [w.run("add", i, i) for i in range(10)] == [2 * i for i in range(10)]


def test_time_limits(w, tmp_path):
    from celery.exceptions import TimeLimitExceeded

    assert w.run("soft_limited", 30, "fs-soft", soft_time_limit=0.5) == "soft limit"
    pidfile = tmp_path / "pids"
    with pytest.raises(TimeLimitExceeded):
        w.run("hard_limited", "fs-hard", str(pidfile), time_limit=1.0)
    child, grandchild = map(int, pidfile.read_text().split())
    assert wait_for(lambda: not alive(child) and not alive(grandchild), 10)
    assert w.run("add", 1, 2) == 3


def test_lost_children_and_acks_late(w, tmp_path):
    from celery.exceptions import WorkerLostError

    with pytest.raises(WorkerLostError, match="signal 9"):
        w.run("die", "fs-die")
    assert w.run("die_once", "fs-once", str(tmp_path / "marker")) == "second run"
    assert w.count("start")["fs-once"] == 2


def test_revoke_with_terminate(w):
    from celery.exceptions import TaskRevokedError

    result = w.send("sleep", 60, "fs-t")
    assert wait_for(lambda: w.count("start")["fs-t"] == 1, 30)
    result.revoke(terminate=True)
    with pytest.raises(TaskRevokedError):
        result.get(60)


def test_warm_shutdown_delivers_every_running_task(w):
    results = [w.send("sleep", 1.0, f"fs-warm{i}") for i in range(2)]
    assert wait_for(lambda: sum(w.count("start")[f"fs-warm{i}"] for i in range(2)) == 2, 30)
    assert w.pool()["pipepool"]["semaphore"]["value"] == 0
    w.signal(signal.SIGTERM)
    assert w.wait(60) == 0
    assert [r.get(30) for r in results] == [1.0, 1.0]
