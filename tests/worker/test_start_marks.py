"""Start marks and BATCH frames: no frame says "started", and several calls share a frame.

A worker stores each task's sequence number in shared memory before it runs it and
writes each outcome before the next mark (docs/design.md, "Start marks"). These tests
check what the parent concludes from that when a worker dies in the middle of a batch,
when a batch cannot be unpickled in the worker, and that RUNNING events and timeouts
still come from the marks alone. Every start method, both loops.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest

import tasks
from helpers import Recorder, runs
from pipepool import State, TaskTimeoutError, TaskUnpicklingError, WorkerLostError
from pipepool.executor import START_POLL, STARTUP_POLL
from pipepool.frames import Kind

pytestmark = pytest.mark.portable

BATCH = 64
RUNNING_ONE = 9  # the 10th call of the batch


@pytest.mark.timeout(120)
def test_worker_killed_in_the_middle_of_a_batch(make, tmp_path):
    """64 calls in one BATCH frame, the worker SIGKILLed while it runs the 10th: exactly
    the 10th fails, the 9 done are reported once, the 54 never started run elsewhere."""
    log, never = str(tmp_path / "runs"), str(tmp_path / "never")
    ex = make(1, prefetch=BATCH)
    for i in range(BATCH):
        if i == RUNNING_ONE:
            ex.queue(i, tasks.wait_for, never)
        else:
            ex.queue(i, tasks.record_pid, log, i)
    rec = Recorder(ex)
    rec.run_until(lambda: RUNNING_ONE in rec.running_seen)
    (worker,) = ex._workers.values()
    batches = {t.batch for t in worker.in_flight.values()}
    assert batches == {1}, "the 64 calls did not travel in one BATCH frame"
    assert max(rec.running_seen) == RUNNING_ONE  # none after it began
    victim = worker.pid
    os.kill(victim, signal.SIGKILL)
    rec.finish()
    assert not rec.duplicates
    lost = rec.terminal[RUNNING_ONE]
    assert isinstance(lost.exception, WorkerLostError) and lost.exception.pid == victim
    others = [i for i in range(BATCH) if i != RUNNING_ONE]
    assert {i: rec.terminal[i].state for i in others} == dict.fromkeys(others, State.SUCCESS)
    pids = _pids(log)
    assert sorted(pids) == others  # each ran exactly once (the log has one line per run)
    assert {pids[i] for i in range(RUNNING_ONE)} == {victim}
    assert victim not in {pids[i] for i in range(RUNNING_ONE + 1, BATCH)}
    stats = ex.stats()
    assert (stats["tasks_done"], stats["tasks_failed"], stats["tasks_lost"]) == (63, 1, 1)


def _pids(log: str) -> dict[int, int]:
    """{key: pid that ran it}; fails if a key ran twice."""
    seen: dict[int, int] = {}
    with open(log) as f:
        for line in f:
            key, pid = line.split()
            assert int(key) not in seen, f"task {key} ran twice"
            seen[int(key)] = int(pid)
    return seen


@pytest.mark.timeout(120)
def test_a_batch_the_worker_cannot_unpickle_fails_only_the_bad_call(make, tmp_path):
    """One argument pickles in the parent and cannot be unpickled in the worker: the
    worker refuses the whole BATCH unrun, the parent resends its calls one per frame,
    and only that call fails (TaskUnpicklingError); the rest run once each."""
    log = str(tmp_path / "runs")
    ex = make(1, prefetch=16)
    for i in range(16):
        arg = tasks.UnpicklableInParent() if i == 5 else None
        ex.queue(i, tasks.record, log, i, 0.0, arg)
    rec = Recorder(ex)
    rec.finish()
    assert not rec.duplicates
    bad = rec.terminal[5]
    assert isinstance(bad.exception, TaskUnpicklingError) and bad.exception.part == "task"
    good = [i for i in range(16) if i != 5]
    assert {i: rec.terminal[i].result for i in good} == {i: i for i in good}
    assert runs(log) == Counter({str(i): 1 for i in good})
    assert ex.stats()["worker_crashes"] == 0


@pytest.mark.timeout(60)
def test_running_events_and_timeouts_come_from_start_marks(make, tmp_path):
    """With no STARTED frame, a long task is still reported RUNNING while it runs, and a
    timeout still counts from its start: it fails with TaskTimeoutError, the task queued
    behind it on the same worker runs."""
    release = str(tmp_path / "release")
    ex = make(1, prefetch=2)
    ex.queue("long", tasks.wait_for, release)
    ex.queue_call("timed", tasks.sleep, (30,), timeout=0.3)
    ex.queue("after", tasks.echo, 1)
    rec = Recorder(ex)
    rec.run_until(lambda: "long" in rec.running_seen)
    assert "timed" not in rec.running_seen and "timed" in ex.running  # sent, not begun
    open(release, "w").close()
    rec.finish()
    assert rec.history["timed"] == ["running", "failed"]
    assert isinstance(rec.terminal["timed"].exception, TaskTimeoutError)
    assert rec.terminal["after"].result == 1


def test_no_started_kind_on_the_wire():
    """The parent treats a frame of the retired STARTED kind (2) as a broken stream."""
    assert 2 not in {k.value for k in Kind}


@pytest.mark.timeout(60)
def test_workers_whose_first_task_exits_are_not_start_up_failures(make):
    """A worker that dies in its first task sent no frame, but its start mark shows it
    got through start-up: four such deaths in a row fail those four tasks only, and
    the pool is not declared broken (three start-up failures in a row would be)."""
    ex = make(1)
    for i in range(4):
        ex.queue(("exit", i), tasks.exit_process, 3)
    for i in range(5):
        ex.queue(i, tasks.echo, i)
    rec = Recorder(ex)
    rec.finish()
    assert ex.broken is None
    for i in range(4):
        error = rec.terminal[("exit", i)].exception
        assert isinstance(error, WorkerLostError) and error.exitcode == 3, error
    assert {i: rec.terminal[i].result for i in range(5)} == {i: i for i in range(5)}


@pytest.mark.timeout(60)
def test_a_worker_whose_first_task_blocks_has_got_through_start_up(make, tmp_path):
    """Its start mark, not a frame, is the sign of life: a fresh worker whose first task
    blocks counts as heard from (it is no start-up failure if it dies now)."""
    release = str(tmp_path / "release")
    ex = make(1)
    ex.queue("blocks", tasks.wait_for, release)
    rec = Recorder(ex)
    rec.run_until(lambda: "blocks" in rec.running_seen)
    (worker,) = ex._workers.values()
    assert worker.heard
    open(release, "w").close()
    rec.finish()


@pytest.mark.timeout(60)
def test_a_worker_still_starting_up_is_polled_less_often(make, tmp_path):
    """No frame says a worker got through start-up, and its first start mark moves
    without waking the parent: while nothing was heard from it, a wait lasts at most
    STARTUP_POLL (a spawned worker takes ~50 ms to start; waking every START_POLL
    meanwhile took CPU from it); once heard from, START_POLL again."""
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    ex = make(1)
    ex.queue("first", tasks.wait_for, first)
    rec = Recorder(ex)
    ex.sync()  # starts the worker and sends it the task; nothing collected since
    (worker,) = ex._workers.values()
    assert worker.in_flight and not worker.heard and worker.current is None
    assert ex._wait_bound() == STARTUP_POLL > START_POLL
    rec.run_until(lambda: "first" in rec.running_seen)
    assert worker.heard
    open(first, "w").close()
    rec.run_until(lambda: "first" in rec.terminal)
    ex.queue("second", tasks.wait_for, second)
    ex.sync()  # sent to the same worker, heard from, not yet seen to start it
    assert ex._workers == {worker.wid: worker} and worker.current is None
    assert ex._wait_bound() == START_POLL
    open(second, "w").close()
    rec.finish()
    assert rec.terminal["second"].state is State.SUCCESS
