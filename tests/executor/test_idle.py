"""An idle pool waits without polling (issue 41 item 8): with tasks running and nothing
arriving, a LocalExecutor's wait lasts until something happens, on the loop's fds, with
no periodic look of its own; a worker's exit wakes it even when a child of the worker
holds its result pipe open (the loop watches each worker's pidfd beside its pipes).

Counted in rounds that come back empty-handed, not in time: no clock decides these
(the futures face's count of the parent's wake-ups is in
tests/futures/test_pipepool.py)."""

from __future__ import annotations

import os
import time

import pytest

import tasks
from helpers import Recorder
from pipepool import WorkerLostError
from pipepool.executor import _local, _reap

BOUND = 60.0  # s any wait here may take before the test fails


def pidfds_here() -> bool:
    """Whether this kernel gives pidfds (Linux 5.3+); elsewhere the periodic reap looks
    every REAP_INTERVAL for an exit nothing else would wake the pool for."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


def test_sync_sleeps_until_an_outcome_while_tasks_run(make):
    """Each sync(timeout=60) while two tasks sleep returns with an outcome, not before:
    nothing woke the parent in between (the reap's periodic look did, every 250 ms)."""
    ex = make(2)
    rec = Recorder(ex)
    for key in ("a", "b"):
        ex.queue(key, tasks.sleep, 1.0, key)
    rec.run_until(lambda: {"a", "b"} <= set(rec.running_seen), limit=BOUND)
    ended: dict[str, object] = {k: e.result for k, e in rec.terminal.items()}
    empty = 0
    deadline = time.monotonic() + BOUND
    while len(ended) < 2:
        assert time.monotonic() < deadline, f"not ended in {BOUND} s: {ex.stats()}"
        ex.sync(timeout=BOUND)
        events = ex.get_event_buffer()
        empty += not events
        ended.update((k, e.result) for k, e in events.items() if e.state.terminal)
    allowed = 1 if pidfds_here() else int(1.0 / _reap.REAP_INTERVAL) + 2
    assert empty <= allowed, f"{empty} rounds woke with nothing while the tasks slept"
    assert ended == {"a": "a", "b": "b"}


def test_an_exit_a_child_hides_wakes_the_pool(make, monkeypatch):
    """A worker exits while a child it forked holds its result pipe: no EOF comes. Its
    pidfd, in the loop's poll set, still ends its channel, and its task fails with the
    exit code, with the periodic reap out of the picture (an hour apart here)."""
    if not pidfds_here():  # pragma: no cover
        pytest.skip("no pidfds here (macOS, Linux < 5.3): the periodic reap finds this exit")
    monkeypatch.setattr(_reap, "REAP_INTERVAL", 3600.0)
    monkeypatch.setattr(_local, "REAP_INTERVAL", 3600.0)
    ex = make(1)
    ex.queue("warm", tasks.echo, 1)
    rec = Recorder(ex)
    rec.run_until(lambda: "warm" in rec.terminal, limit=BOUND)  # its first reap is done
    ex.queue("hidden", tasks.exit_behind_a_holder, 7)
    ex.queue("after", tasks.echo, 2)
    rec.run_until(lambda: {"hidden", "after"} <= set(rec.terminal), limit=BOUND, timeout=BOUND)
    error = rec.terminal["hidden"].exception
    assert isinstance(error, WorkerLostError) and error.exitcode == 7, error
    assert rec.terminal["after"].result == 2  # run by the worker that replaced it
