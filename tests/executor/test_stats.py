"""``LocalExecutor.stats()`` after a scenario whose outcome is known exactly (issue 8,
hardening).

Issue 8's hardening table is split by subject (tests/worker/test_faults.py has
the index of its rows); ``pool``, ``pool_on_one_loop`` are conftest's, and
``exactly_one_each``, ``failures``, ``full_size_of`` helpers.py's.
"""

from __future__ import annotations

import time
from concurrent.futures import CancelledError

import pytest

import tasks
from helpers import Recorder, exactly_one_each

# -- stats() ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_stats_after_a_known_scenario(pool, tmp_path):
    """Every number of ``stats()`` after a scenario whose outcome is known exactly."""
    release = str(tmp_path / "release")
    ex = pool(2, "fork")
    created = time.monotonic()
    stats = ex.stats()
    assert {k: v for k, v in stats.items() if k not in ("last_progress", "dispatch_depth")} == {
        "workers_alive": 0,
        "workers_busy": 0,
        "workers_idle": 0,
        "tasks_queued": 0,
        "tasks_running": 0,
        "tasks_done": 0,
        "tasks_failed": 0,
        "tasks_lost": 0,
        "worker_crashes": 0,
        "workers_killed": 0,
        "worker_recycles": 0,
        "workers_started": 0,
        "tasks_revoked": 0,
    }
    # Two blockers hold both workers; two more wait behind them.
    for i in range(4):
        ex.queue(("block", i), tasks.wait_for, release)
    rec = Recorder(ex)
    rec.run_until(lambda: len(rec.running_seen) == 2)
    stats = ex.stats()
    assert (stats["workers_alive"], stats["workers_busy"], stats["workers_idle"]) == (2, 2, 0)
    assert (stats["tasks_queued"], stats["tasks_running"], stats["tasks_done"]) == (2, 2, 0)
    assert stats["last_progress"] <= time.monotonic()
    before_progress = time.monotonic()
    open(release, "w").close()
    rec.run_until(lambda: not ex.has_work())
    stats = ex.stats()
    assert (stats["tasks_done"], stats["workers_busy"], stats["workers_idle"]) == (4, 0, 2)
    assert stats["last_progress"] >= before_progress > created
    # One of each failure, in order through one worker: raised (it lives on), crashed
    # (replaced: work remains), timed out (killed, replaced), unpicklable, cancelled.
    ex1 = pool(1, "fork")
    ex1.queue("raises", tasks.raise_value_error, "x")
    ex1.queue("crash", tasks.exit_process, 3)
    ex1.queue_call("timeout", tasks.sleep, (30,), timeout=0.2)
    ex1.queue("unpicklable", tasks.echo, tasks.Unpicklable())
    ex1.queue("cancelled", tasks.echo, 1)
    assert ex1.cancel("cancelled") == 1
    ex1.queue("ok", tasks.echo, 1)
    rec1 = Recorder(ex1)
    rec1.run_until(lambda: not ex1.has_work() and all(not w.closing for w in ex1._workers.values()))
    exactly_one_each(rec1, ["raises", "crash", "timeout", "unpicklable", "cancelled", "ok"])
    assert isinstance(rec1.terminal["cancelled"].exception, CancelledError)
    stats = ex1.stats()
    assert {k: v for k, v in stats.items() if k not in ("last_progress", "dispatch_depth")} == {
        "workers_alive": 1,
        "workers_busy": 0,
        "workers_idle": 1,
        "tasks_queued": 0,
        "tasks_running": 0,
        "tasks_done": 1,  # "ok"
        "tasks_failed": 5,  # every other one, the lost one included
        "tasks_lost": 1,  # only the crash: its worker died under it
        "worker_crashes": 1,  # the crashed worker
        "workers_killed": 1,  # the one killed for the timeout: on purpose, no crash
        "worker_recycles": 0,
        "workers_started": 3,
        "tasks_revoked": 0,
    }  # a fixed depth never revokes
    # Recycling: a pool whose workers serve two tasks each.
    ex2 = pool(1, "fork", max_tasks_per_child=2)
    for i in range(6):
        ex2.queue(i, tasks.echo, i)
    rec2 = Recorder(ex2)
    rec2.run_until(lambda: not ex2.has_work() and not ex2._workers)
    stats = ex2.stats()
    assert (
        stats["workers_started"],
        stats["worker_recycles"],
        stats["worker_crashes"],
        stats["workers_alive"],
        stats["tasks_done"],
    ) == (3, 3, 0, 0, 6)


@pytest.mark.timeout(60)
def test_workers_killed_on_purpose_are_no_crashes(make):
    """``kill()`` and ``terminate()`` count in ``workers_killed``; a worker whose task
    killed it counts in ``worker_crashes`` (each counted once; before, all three were
    crashes)."""
    ex = make(2)
    ex.queue("killed", tasks.sleep, 30)
    ex.queue("dies", tasks.kill_self)
    rec = Recorder(ex)
    rec.run_until(lambda: "killed" in rec.running_seen and "dies" in rec.terminal)
    assert ex.kill("killed") == 1
    rec.run_until(lambda: "killed" in rec.terminal)
    stats = ex.stats()
    assert (stats["workers_killed"], stats["worker_crashes"]) == (1, 1)
    ex.queue("terminated", tasks.sleep, 30)
    rec.run_until(lambda: "terminated" in rec.running_seen)  # started: its worker is up
    alive = ex.stats()["workers_alive"]
    ex.terminate()
    stats = ex.stats()
    assert alive >= 1 and (stats["workers_killed"], stats["worker_crashes"]) == (1 + alive, 1)
