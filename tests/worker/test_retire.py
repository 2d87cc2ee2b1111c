"""``pipepool.worker.retire_after_task()``: a task asks its worker to exit cleanly once
its outcome is sent (the Airflow executor's RSS recycling is built on it)."""

from __future__ import annotations

import os

from pipepool import State
from pipepool.worker import retire_after_task


def pid_then_retire() -> int:
    retire_after_task()
    return os.getpid()


def pid() -> int:
    return os.getpid()


def test_retire_after_task_recycles_the_worker_and_loses_nothing(make):
    ex = make(1)
    ex.queue("a", pid_then_retire)
    for key in ("b", "c", "d"):  # queued behind it: must run once each, elsewhere
        ex.queue(key, pid)
    assert ex.wait_until_done(60)
    events = ex.get_event_buffer()
    assert all(e.state is State.SUCCESS for e in events.values()), events
    assert events["a"].result != events["b"].result == events["c"].result == events["d"].result
    stats = ex.stats()
    assert stats["worker_recycles"] == 1 and stats["worker_crashes"] == 0
