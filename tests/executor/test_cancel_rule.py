"""One cancellation rule on LocalExecutor (issue 30, item 5): a task that had not started
ends cancelled whatever ended it (``cancel``, ``terminate``), queued or sent ahead to a
worker; a started one ends with the error that stopped it. Cancelling one task sent
ahead takes back that task only: the ones behind it run where they are. Every start
method, both loops.
"""

from __future__ import annotations

from concurrent.futures import CancelledError

import pytest

import tasks
from helpers import (
    Recorder,
    asking_only,
    behind_a_blocked_task,
    runs,
    sent_ahead,
    unread_bytes,
    wait_for,
)
from pipepool import TaskKilledError


@pytest.mark.timeout(120)
def test_terminate_cancels_every_task_not_started_and_kills_the_started_one(make, tmp_path):
    """One worker, prefetch=4: "block" runs, a, b, c wait in the worker's pipe, d and e
    in the queue. terminate(): "block" fails with TaskKilledError, the five others, on
    the worker or queued, with CancelledError; none of them ran."""
    ex, rec, log, _ = behind_a_blocked_task(make, tmp_path, "abcde")
    assert ex.stats()["tasks_queued"] == 2  # precondition: d and e never left
    ex.terminate()
    rec.take()
    assert not rec.duplicates and set(rec.terminal) == {"block", *"abcde"}
    assert isinstance(rec.terminal["block"].exception, TaskKilledError)
    for key in "abcde":
        error = rec.terminal[key].exception
        assert type(error) is CancelledError, f"{key}: {error!r}"
    assert not runs(log)


@pytest.mark.timeout(120)
def test_cancelling_one_task_sent_ahead_sends_none_behind_it_again(make, tmp_path):
    """One worker, prefetch=4: cancel the first of three tasks waiting behind a blocked
    one. Only it is taken back (it ends cancelled, unrun); the two behind it stay on the
    worker, are never sent again (tasks_revoked stays 0) and run there once."""
    ex, rec, log, release = behind_a_blocked_task(make, tmp_path, "abc")
    pid = rec.running_seen["block"][0]
    assert ex.cancel("a") == 1
    rec.run_until(lambda: "a" in rec.terminal)
    assert type(rec.terminal["a"].exception) is CancelledError
    assert ex.stats()["tasks_revoked"] == 0 and ex.stats()["tasks_queued"] == 0
    assert ex.stats()["tasks_running"] == 3  # block, b and c: where they were
    open(release, "w").close()
    rec.finish()
    assert runs(log) == {"b": 1, "c": 1}
    assert rec.terminal["b"].pid == rec.terminal["c"].pid == pid
    assert ex.stats()["tasks_revoked"] == 0 and not rec.duplicates


@pytest.mark.timeout(120)
def test_cancelling_every_task_a_worker_holds_ahead_cancels_them_all_and_sends_none(make, tmp_path):
    """One worker, prefetch=4: cancel one of the three tasks behind a blocked one and
    wait for its end, then the other two (the last by one REVOKE: nothing of the
    worker's is left to keep). All three end cancelled, unrun; nothing is sent again
    (a REVOKE for the first had sent the other two again); the blocked one runs on."""
    ex, rec, log, release = behind_a_blocked_task(make, tmp_path, "abc")
    assert ex.cancel("b") == 1
    rec.run_until(lambda: "b" in rec.terminal)
    assert ex.cancel("c") == 1 and ex.cancel("a") == 1
    rec.run_until(lambda: set("abc") <= set(rec.terminal))
    assert all(type(rec.terminal[k].exception) is CancelledError for k in "abc")
    assert ex.stats()["tasks_revoked"] == 0 and ex.stats()["tasks_running"] == 1
    open(release, "w").close()
    rec.finish()
    assert rec.terminal["block"].exception is None and not runs(log)
    assert not rec.duplicates


@pytest.mark.timeout(120)
def test_a_start_mark_past_a_skipped_task_does_not_make_it_started(make, tmp_path):
    """The worker skips "a" (CANCEL) and goes on to start "b": its start mark passes
    "a" before the parent has read the CANCELLED answer (kill(), like cancel(), reads
    the marks without reading frames). "a" must not count as started: it ends
    cancelled, with no RUNNING event, and "b" runs once."""
    log, release = str(tmp_path / "runs"), str(tmp_path / "release")
    ex = make(1, prefetch=4)
    ex.queue("block", tasks.wait_for, release)
    ex.queue("a", tasks.record, log, "a")
    ex.queue("b", tasks.wait_for, str(tmp_path / "release-b"), "b")
    rec = Recorder(ex)
    sent_ahead(ex, rec, ["block", "a", "b"])
    asking_only(ex)  # the CANCEL's path: a claim would end "a" in the call
    assert ex.cancel("a") == 1  # no round after it: its answer stays unread
    # Its answer in the result pipe (nothing else writes there while "block" waits): the
    # worker has decided "a" before "block" ends, however late its watcher ran.
    (worker,) = ex._workers.values()
    assert wait_for(lambda: unread_bytes(worker.fds[1]) > 0), "the worker did not answer"
    open(release, "w").close()
    assert wait_for(lambda: ex._marks.read(next(iter(ex._workers.values())).slot) == 3), (
        "the worker did not start b"
    )
    assert ex.kill("nobody") == 0  # reads the marks: 3, past "a" (2)
    rec.run_until(lambda: "a" in rec.terminal and "b" in rec.running_seen)
    assert type(rec.terminal["a"].exception) is CancelledError
    assert "a" not in rec.running_seen
    open(tmp_path / "release-b", "w").close()
    rec.finish()
    assert rec.terminal["b"].result == ("b", 0) and not runs(log) and not rec.duplicates


@pytest.mark.timeout(120)
def test_a_cancel_withdrawn_before_its_answer_runs_the_task_once(make, tmp_path):
    """The futures face withdraws a cancel its worker has not answered (``_uncancel``,
    past CANCEL_WAIT). Withdrawn before the answer is read: the worker skipped "b", so
    "b" goes back to the queue (the one case a cancel sends a task again) and runs
    once; it is not reported cancelled."""
    ex, rec, log, release = behind_a_blocked_task(make, tmp_path, "abc")
    asking_only(ex)  # the subject is the worker's answer: no claim decides it first
    (b,) = [t for t in ex._dispatched() if t.key == "b"]
    assert ex._cancel_tasks([b]) == [b]  # a CANCEL goes out; no round reads its answer
    ex._uncancel(b)
    worker = next(iter(ex._workers.values()))
    rec.run_until(lambda: not worker.asked, limit=20)  # answered: skipped, sent again
    assert "b" not in rec.terminal
    open(release, "w").close()
    rec.finish()
    assert runs(log) == {"a": 1, "b": 1, "c": 1}
    assert rec.terminal["b"].result == "b" and not rec.duplicates
