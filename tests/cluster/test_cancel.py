"""ClusterExecutor.cancel of a task handed to Dask and not started (issue 30, item 5):
Dask's own cancel is asked, and the task ends cancelled without running. On the shared
Dask LocalCluster (conftest.py's ``dask_cluster``: two worker processes, one thread each).
"""

from __future__ import annotations

import os
from concurrent.futures import CancelledError

import pytest

import tasks
from helpers import Recorder, connect, runs, wait_for
from pipepool import TaskKilledError

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)"),
]


def worker_keys(ex) -> list[set]:
    """The keys each Dask worker holds (its own state machine's view)."""
    held = ex.client.run(lambda dask_worker: list(dask_worker.state.tasks))
    return [set(keys) for keys in held.values()]


def test_cancel_of_a_task_handed_to_dask_and_not_started_cancels_it(dask_cluster, tmp_path):
    """Both worker threads blocked; "victim" is handed to Dask behind them. cancel()
    counts it (it counted only queued tasks), it ends FAILED with CancelledError, and
    it never runs once the workers are free; the blocked ones run on."""
    log, release = str(tmp_path / "runs"), str(tmp_path / "release")
    ex = connect(dask_cluster)
    for key in ("block1", "block2"):
        ex.queue(key, tasks.wait_for, release, key)
    rec = Recorder(ex)
    rec.run_until(lambda: {"block1", "block2"} <= set(rec.running_seen))
    ex.queue("victim", tasks.record, log, "victim")
    ex.queue("other", tasks.record, log, "other")
    rec.round()
    assert {"victim", "other"} <= ex.running and not ex.queued  # handed to Dask
    assert "victim" not in rec.running_seen  # precondition: not started
    (dask_key,) = [t.future.key for t in ex._inflight.values() if t.key == "victim"]
    assert ex.cancel("victim") == 1
    rec.run_until(lambda: "victim" in rec.terminal)
    assert isinstance(rec.terminal["victim"].exception, CancelledError)
    # Dask's cancel reaches the workers a moment later (asynchronous: a worker freed
    # before would start it; the documented limit): free them once none holds it.
    assert wait_for(lambda: not any(dask_key in held for held in worker_keys(ex))), (
        "a worker still holds the cancelled task"
    )
    open(release, "w").close()
    rec.finish()
    assert runs(log) == {"other": 1}
    assert rec.terminal["block1"].result == ("block1", 0)
    assert rec.terminal["other"].exception is None and not rec.duplicates


def test_terminate_cancels_a_task_handed_to_dask_and_not_started(dask_cluster, tmp_path):
    """terminate() with both worker threads blocked and "victim" handed to Dask behind
    them: the blocked ones fail with TaskKilledError, "victim" with CancelledError (it
    failed with TaskKilledError: one cancellation rule), and it never runs."""
    log, release = str(tmp_path / "runs"), str(tmp_path / "release")
    ex = connect(dask_cluster, kill_workers=False)
    for key in ("block1", "block2"):
        ex.queue(key, tasks.wait_for, release, key, b"", 5.0)
    rec = Recorder(ex)
    rec.run_until(lambda: {"block1", "block2"} <= set(rec.running_seen))
    ex.queue("victim", tasks.record, log, "victim")
    rec.round()
    assert "victim" in ex.running and "victim" not in rec.running_seen  # handed over
    ex.terminate()
    rec.take()
    assert all(isinstance(rec.terminal[k].exception, TaskKilledError) for k in ("block1", "block2"))
    assert type(rec.terminal["victim"].exception) is CancelledError
    assert not runs(log)
