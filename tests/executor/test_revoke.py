"""Taking back tasks sent ahead (adaptive depth, ``prefetch=None``).

Deep dispatch sends short tasks behind whatever a worker runs. When that turns out to be
a long task, the parent revokes the ones behind it and hands them to other workers.
These tests check that nothing is trapped, that every task still runs exactly once
whatever the race between a REVOKE and the worker moving on, and that a worker that
cannot answer loses nothing. Every start method, both loops.
"""

from __future__ import annotations

import itertools
import random
import time
from concurrent.futures import CancelledError

import pytest

import tasks
from helpers import Recorder, asking_only, behind_a_blocked_task, runs, sent_ahead
from pipepool import State, TaskKilledError
from pipepool.executor._depth import DepthPolicy

WARM_LIMIT = 60.0  # s of warm-up rounds before the precondition is given up on


def warm(ex, n: int = 2000) -> None:
    """Rounds of ``n`` tiny tasks until the adaptive depth has grown: a worker then gets
    many at once (the precondition of every test here). One round is not enough on a
    loaded machine: the depth follows the workers' own wall-clock times, a tiny task
    preempted mid-run reads as milliseconds, and a few of those at a round's end hold
    the depth at 1 (test_revoked_tasks_do_not_count_towards_max_tasks_per_child failed
    so at load 10-14); so the rounds go on until it holds."""
    deadline = time.monotonic() + WARM_LIMIT
    for round_ in itertools.count():
        for i in range(n):
            ex.queue(("warm", round_, i), tasks.echo, i)
        Recorder(ex).run_until(lambda: not ex.has_work())
        ex.get_event_buffer()
        if ex.dispatch_depth >= 2:  # precondition: tasks are sent ahead
            return
        assert time.monotonic() < deadline, f"depth 1 after {round_ + 1} rounds: {ex.stats()}"


@pytest.mark.timeout(120)
def test_short_tasks_sent_behind_a_long_one_run_elsewhere(make, tmp_path):
    """A long task and 300 short ones on a warm pool: the short ones all finish while
    the long one still runs, each exactly once, and some had been sent behind it."""
    log, release = str(tmp_path / "runs"), str(tmp_path / "release")
    ex = make(2, prefetch=None)
    warm(ex)
    ex.queue("long", tasks.wait_for, release)
    short = list(range(300))
    for i in short:
        ex.queue(i, tasks.record, log, i)
    rec = Recorder(ex)
    # Without revocation the ones sent behind "long" wait for it: this never holds.
    rec.run_until(lambda: all(i in rec.terminal for i in short), limit=60)
    assert "long" not in rec.terminal and "long" in ex.running
    assert ex.stats()["tasks_revoked"] >= 1
    assert runs(log) == {str(i): 1 for i in short}
    open(release, "w").close()
    rec.finish()
    assert rec.terminal["long"].state is State.SUCCESS
    assert not rec.duplicates
    assert all(rec.terminal[i].result == i for i in short)


@pytest.mark.timeout(120)
def test_revocations_racing_the_worker_run_every_task_once(make, tmp_path):
    """Tasks just around the overrun threshold: REVOKEs meet workers that are finishing
    the long task, starting the next one, or idle. Each task runs once and ends once."""
    log = str(tmp_path / "runs")
    ex = make(2, prefetch=None)
    rng = random.Random(7)
    keys = list(range(1500))
    for i in keys:
        pause = rng.choice((0.0, 0.0, 0.0, 0.0, 0.002, 0.004, 0.008))
        ex.queue(i, tasks.record, log, i, pause)
    rec = Recorder(ex)
    rec.finish()
    assert not rec.duplicates
    assert {k: e.state for k, e in rec.terminal.items()} == dict.fromkeys(keys, State.SUCCESS)
    assert runs(log) == {str(i): 1 for i in keys}
    assert ex.stats()["tasks_revoked"] >= 1  # the race was actually run


@pytest.mark.timeout(120)
def test_revoked_tasks_do_not_count_towards_max_tasks_per_child(make, tmp_path):
    """A worker that skipped revoked tasks still serves its full quota, so its count and
    the parent's agree and it is recycled, not left waiting for tasks that never come."""
    log = str(tmp_path / "runs")
    ex = make(2, prefetch=None, max_tasks_per_child=40)
    warm(ex, 300)
    keys = list(range(400))
    for i in keys:
        ex.queue(i, tasks.record_pid, log, i, 0.02 if i % 50 == 0 else 0.0)
    rec = Recorder(ex)
    rec.finish()
    assert {k: e.state for k, e in rec.terminal.items()} == dict.fromkeys(keys, State.SUCCESS)
    assert ex.stats()["tasks_revoked"] >= 1
    with open(log) as f:
        rows = [line.split() for line in f]
    assert sorted(int(key) for key, _ in rows) == keys  # each ran once
    per_pid: dict[str, int] = {}
    for _, pid in rows:
        per_pid[pid] = per_pid.get(pid, 0) + 1
    assert max(per_pid.values()) <= 40


@pytest.mark.timeout(120)
def test_worker_that_cannot_answer_a_revoke_loses_nothing(make, tmp_path, monkeypatch):
    """A task that never lets its worker's watcher thread run: the REVOKE goes
    unanswered, the tasks behind it stay where they are, and when the task is killed
    they run elsewhere, once each; only the killed task fails."""
    log = str(tmp_path / "runs")
    # No task overruns until the hog holds its worker's GIL, so the REVOKE goes out to
    # a worker that surely cannot answer it (and after the hog recorded its run). Left
    # to the clock, a loaded machine could delay the hog past the trap: the test then
    # killed it before it had recorded its run ("hog" missing from the log), or its
    # watcher answered the REVOKE before the hog took the GIL.
    overrun_after = DepthPolicy.overrun_after
    monkeypatch.setattr(
        DepthPolicy,
        "overrun_after",
        lambda policy: overrun_after(policy) if tasks.hogging(log) else 3600.0,
    )
    ex = make(2, prefetch=None)
    warm(ex)
    ex.queue("hog", tasks.hog_gil, log, "hog")
    short = list(range(200))
    for i in short:
        ex.queue(i, tasks.record, log, i)
    rec = Recorder(ex)

    def hog_worker_revoking():
        # The hog's worker, once a REVOKE is out to it (the other worker may revoke too,
        # for a moment, when a short task of its own overruns on a loaded machine).
        return [
            w
            for w in ex._workers.values()
            if w.revoking and any(t.key == "hog" for t in w.in_flight.values())
        ]

    rec.run_until(lambda: bool(hog_worker_revoking()))
    stuck = hog_worker_revoking()
    assert len(stuck[0].in_flight) >= 2  # "hog" and tasks behind it
    assert ex.kill("hog") == 1
    rec.finish()
    assert isinstance(rec.terminal["hog"].exception, TaskKilledError)
    assert {k: rec.terminal[k].state for k in short} == dict.fromkeys(short, State.SUCCESS)
    assert runs(log) == {"hog": 1, **{str(i): 1 for i in short}}
    assert not rec.duplicates


def test_fixed_depth_sends_no_revoke(make, tmp_path):
    """``prefetch=N`` is an explicit depth: tasks stay where they were sent."""
    release = str(tmp_path / "release")
    ex = make(2, prefetch=8)
    ex.queue("long", tasks.wait_for, release)
    for i in range(40):
        ex.queue(i, tasks.echo, i)
    rec = Recorder(ex)
    rec.run_until(lambda: "long" in rec.running_seen and len(rec.terminal) >= 30)
    assert not any(w.revoking for w in ex._workers.values())
    open(release, "w").close()
    rec.finish()
    assert ex.stats()["tasks_revoked"] == 0
    assert len(rec.terminal) == 41


# -- cancel(): a task sent ahead and not started is cancelled, never run ---------------------


@pytest.mark.timeout(120)
def test_cancel_takes_back_a_task_sent_ahead_and_not_started(make, tmp_path):
    """prefetch=4 (the trap never revokes a fixed depth): three tasks wait in the worker's
    pipe behind a blocked one. cancel() of the middle one takes it back alone (CANCEL);
    it ends cancelled without running, the other two run once where they were, never
    sent again; the running one cannot be cancelled."""
    ex, rec, log, release = behind_a_blocked_task(make, tmp_path, "abc")
    assert ex.cancel("b") == 1
    assert ex.cancel("block") == 0 and ex.cancel("unknown") == 0
    rec.run_until(lambda: "b" in rec.terminal)
    assert isinstance(rec.terminal["b"].exception, CancelledError)
    assert "block" not in rec.terminal and not runs(log)
    open(release, "w").close()
    rec.finish()
    assert runs(log) == {"a": 1, "c": 1}  # "b" never ran
    assert rec.history["b"] == ["failed"] and not rec.duplicates
    assert ex.stats()["tasks_revoked"] == 0  # "a" and "c" stayed (a REVOKE sent them again)


@pytest.mark.timeout(120)
def test_a_cancel_the_worker_cannot_answer_ends_with_the_worker(make, tmp_path):
    """A task hogs the GIL, so its worker cannot answer the REVOKE: the cancelled task
    stays sent. When that worker dies it is cancelled, not dispatched again."""
    log = str(tmp_path / "runs")
    ex = make(1, prefetch=4)
    ex.queue("hog", tasks.hog_gil, log, "hog")
    ex.queue("b", tasks.record, log, "b")
    rec = Recorder(ex)
    sent_ahead(ex, rec, ["hog", "b"])
    rec.run_until(lambda: tasks.hogging(log))  # it holds the GIL: a REVOKE goes unread
    asking_only(ex)  # a claim would cancel "b" at once (tests/futures/test_cancel_claims.py)
    assert ex.cancel("b") == 1
    for _ in range(20):
        rec.round()
    assert "b" not in rec.terminal  # no answer: the hog holds the GIL
    assert ex.kill("hog") == 1
    rec.finish()
    assert isinstance(rec.terminal["b"].exception, CancelledError)
    assert isinstance(rec.terminal["hog"].exception, TaskKilledError)
    assert runs(log) == {"hog": 1}


@pytest.mark.timeout(120)
def test_cancels_racing_starts_each_task_started_or_cancelled_never_both(make, tmp_path):
    """Cancels at random moments on a warm pool, many tasks sent ahead: each task either
    ran once and reported its result, or never ran and reported CancelledError."""
    log = str(tmp_path / "runs")
    ex = make(2, prefetch=None)
    warm(ex)
    rng = random.Random(23)
    keys = list(range(400))
    for i in keys:
        ex.queue(i, tasks.record, log, i, rng.choice([0.0, 0.0005, 0.002]))
    rec = Recorder(ex)
    pending = keys[:]
    rng.shuffle(pending)
    while pending:
        rec.round(timeout=0.0)
        for _ in range(rng.randint(0, 6)):
            if pending:
                ex.cancel(pending.pop())
    rec.finish()
    ran = runs(log)
    cancelled = {k for k, e in rec.terminal.items() if isinstance(e.exception, CancelledError)}
    assert set(rec.terminal) >= set(keys) and not rec.duplicates
    for k in keys:
        if k in cancelled:
            assert str(k) not in ran, f"task {k} ran and was reported cancelled"
        else:
            assert ran[str(k)] == 1 and rec.terminal[k].result == k
    assert cancelled and len(cancelled) < len(keys)
