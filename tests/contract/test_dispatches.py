"""A key's dispatches, counted (issue 30): a key queued again while an earlier dispatch of
it is outstanding is one more dispatch, each ends with exactly one terminal event marked
with its number, two events of one key never share a ``get_event_buffer()`` result, and
``running`` holds the key until its last dispatch ends. On both loops, every start
method, and the ClusterExecutor."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

import tasks
from helpers import START_METHODS, Executors, Recorder, connect, implementations, runs
from pipepool import (
    DuplicateKeyError,
    LocalExecutor,
    State,
    TaskPicklingError,
    WorkerLostError,
)
from pipepool import loop as _impl

pytestmark = pytest.mark.timeout(90)

KINDS = [
    *(("local", impl, method) for impl in implementations() for method in START_METHODS),
    ("cluster", None, None),
]


@pytest.fixture(params=KINDS, ids=lambda p: "-".join(x for x in p if x))
def make(request):
    """``make(parallelism)``: a started executor of this row's kind, ended after the test."""
    kind, impl, start_method = request.param
    if kind == "cluster":
        made: list = []

        def cluster(parallelism: int = 2, **kwargs):
            ex = connect(request.getfixturevalue("dask_cluster"), **kwargs)
            made.append(ex)
            return ex

        yield cluster
        for ex in made:
            ex.terminate()
        return
    _impl.load(impl)
    local = Executors(impl, start_method)
    yield local
    local.close()


def drive(ex, until, limit: float = 60.0) -> None:
    """Run rounds, reading no event, until ``until()``."""
    deadline = time.monotonic() + limit
    while not until():
        assert time.monotonic() < deadline, f"not reached in {limit} s; {ex.stats()}"
        ex.sync(timeout=0.01)


def test_a_key_queued_again_while_it_runs_reports_both_dispatches(make, tmp_path):
    """The seed's scenario: a scheduler queues a key again while its first dispatch runs.
    Both outcomes arrive, in order, each marked with its dispatch, and ``running`` holds
    the key in every round until the second one ends."""
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    ex = make(2)
    ex.queue("k", tasks.wait_for, first, "first")
    rec = Recorder(ex)
    rec.run_until(lambda: "k" in rec.running_seen)
    ex.queue("k", tasks.wait_for, second, "second")
    assert "k" in ex.running and ex.running_counts() == {"k": 2}
    Path(first).touch()
    rec.run_until(lambda: len(rec.outcomes["k"]) == 1)
    assert rec.outcomes["k"][0].dispatch == 1 and rec.outcomes["k"][0].result == ("first", 0)
    rounds = 0
    while not rec.outcomes["k"][1:]:
        assert "k" in ex.running, "the second dispatch is outstanding: the key runs"
        rec.round()
        rounds += 1
        if rounds == 3:
            Path(second).touch()
    assert [(e.dispatch, e.result) for e in rec.outcomes["k"]] == [
        (1, ("first", 0)),
        (2, ("second", 0)),
    ]
    assert "k" not in ex.running and ex.running_counts() == {}
    rec.finish()
    assert not rec.duplicates and len(rec.outcomes["k"]) == 2
    assert ex._held == {} and ex._outstanding == {} and ex._later == {}


def test_two_dispatches_never_share_one_event_buffer_result(make):
    """Both dispatches end before anything is read: each call hands out one of them, in
    order; ``get_event_buffer(keys)`` and a call for another key do the same."""
    ex = make(2)
    for i in range(3):
        ex.queue("k", tasks.echo, i)
    ex.queue("other", tasks.echo, "o")
    drive(ex, lambda: not ex.has_work())
    assert ex.running == set()
    assert ex.get_event_buffer(["nobody"]) == {}
    first = ex.get_event_buffer()
    assert set(first) == {"k", "other"}
    seen = [first["k"]]
    seen.append(ex.get_event_buffer(["k"])["k"])
    seen.append(ex.get_event_buffer()["k"])
    assert ex.get_event_buffer() == {}
    assert sorted(e.dispatch for e in seen) == [1, 2, 3]
    assert {e.dispatch: e.result for e in seen} == {1: 0, 2: 1, 3: 2}
    assert all(e.state is State.SUCCESS for e in seen)
    ex.queue("k", tasks.echo, "again")  # all read: the key is free, numbering restarts
    drive(ex, lambda: not ex.has_work())
    assert ex.get_event_buffer()["k"].dispatch == 1


def test_running_events_of_two_dispatches_wait_their_turn(make, tmp_path):
    """Two dispatches of one key start before anything is read: their RUNNING events come
    out one per call, and the terminal events after them, none dropped."""
    release = str(tmp_path / "release")
    ex = make(2)
    ex.queue("k", tasks.wait_for, release, 1)
    ex.queue("k", tasks.wait_for, release, 2)
    drive(ex, lambda: ex._later.get("k"))  # the second's RUNNING waits behind the first's
    one = ex.get_event_buffer()["k"]
    two = ex.get_event_buffer(["k"])["k"]
    assert (one.state, two.state) == (State.RUNNING, State.RUNNING)
    assert {one.dispatch, two.dispatch} == {1, 2}
    assert ex.get_event_buffer() == {}
    Path(release).touch()
    drive(ex, lambda: not ex.has_work())
    ends = [ex.get_event_buffer()["k"], ex.get_event_buffer()["k"]]
    assert {(e.dispatch, e.result) for e in ends} == {(1, (1, 0)), (2, (2, 0))}
    assert all(e.state is State.SUCCESS for e in ends)
    assert ex.get_event_buffer() == {}


def test_a_dispatch_that_cannot_be_pickled_fails_alone(make, tmp_path):
    """The second dispatch's argument cannot be pickled: that dispatch fails with
    TaskPicklingError, the first runs on counted, and a third is numbered after both."""
    release = str(tmp_path / "release")
    ex = make(2)
    ex.queue("k", tasks.wait_for, release, "first")
    rec = Recorder(ex)
    rec.run_until(lambda: "k" in rec.running_seen)
    ex.queue("k", tasks.echo, tasks.Unpicklable())
    rec.run_until(lambda: rec.outcomes["k"])
    failed = rec.outcomes["k"][0]
    assert failed.dispatch == 2 and isinstance(failed.exception, TaskPicklingError)
    assert ex.running_counts() == {"k": 1} and ex.queued == set()
    ex.queue("k", tasks.echo, "third")
    rec.run_until(lambda: len(rec.outcomes["k"]) == 2)
    assert (rec.outcomes["k"][1].dispatch, rec.outcomes["k"][1].result) == (3, "third")
    assert ex.running == {"k"}
    Path(release).touch()
    rec.finish()
    assert [e.dispatch for e in rec.outcomes["k"]] == [2, 3, 1]
    assert rec.outcomes["k"][2].result == ("first", 0) and not rec.duplicates


def test_exclusive_refuses_a_key_with_a_dispatch_outstanding(make, tmp_path):
    """``queue_call(..., exclusive=True)``: the policy a face asks for (Airflow's one run
    per key). Refused while queued, running, or reported unread; the first untouched."""
    release = str(tmp_path / "release")
    log = str(tmp_path / "runs.log")
    ex = make(2)
    ex.queue("k", tasks.wait_for, release, "first")

    def refused(where: str) -> None:
        with pytest.raises(DuplicateKeyError, match="'k' is already") as info:
            ex.queue_call("k", tasks.record, (log, "k"), exclusive=True)
        assert info.value.key == "k" and info.value.where == where

    refused("queued")
    rec = Recorder(ex)
    rec.run_until(lambda: "k" in rec.running_seen)
    refused("running")
    Path(release).touch()
    drive(ex, lambda: not ex.has_work())
    refused("reported")
    assert ex.get_event_buffer()["k"].dispatch == 1
    ex.queue_call("k", tasks.record, (log, "k"), exclusive=True)  # read: free again
    rec.finish()
    assert runs(log) == Counter({"k": 1})  # the refused ones never ran
    assert [e.dispatch for e in rec.outcomes["k"]] == [1]


@pytest.mark.parametrize("impl", implementations())
def test_a_dead_worker_sends_its_unstarted_dispatch_again(impl, tmp_path):
    """Dispatch 1 kills its worker; dispatch 2, sent behind it to the same worker and not
    started, is sent again and runs: each ends once, dispatch 1 lost, dispatch 2 done."""
    log = str(tmp_path / "runs.log")
    with LocalExecutor(1, prefetch=2, loop_impl=impl) as ex:
        ex.queue("k", tasks.exit_process, 3)
        ex.queue("k", tasks.record, log, "k", 0.0, "second")
        rec = Recorder(ex)
        rec.finish()
    lost, done = rec.outcomes["k"]
    assert lost.dispatch == 1 and isinstance(lost.exception, WorkerLostError)
    assert (done.dispatch, done.result) == (2, "second")
    assert runs(log) == Counter({"k": 1}) and not rec.duplicates


class Interrupt(KeyboardInterrupt):
    pass


def test_interrupts_in_queue_and_sync_leave_every_dispatch_counted(impl, start_method):
    """Keys queued three times each while a timer interrupts queue() and sync() at random
    points: every dispatch that was queued ends exactly once, numbered 1, 2, 3 in the
    order its queue() returned, and nothing stays counted at the end."""
    ex = LocalExecutor(3, start_method=start_method, prefetch=4, loop_impl=impl)
    ex.start()
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(Interrupt()))
    rng = random.Random(30)
    interrupts = 0

    def interrupted(call) -> bool:
        nonlocal interrupts
        try:
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.00001, 0.0005))
            call()
            signal.setitimer(signal.ITIMER_REAL, 0)
            return False
        except Interrupt:
            signal.setitimer(signal.ITIMER_REAL, 0)
            interrupts += 1
            return True

    try:
        rec = Recorder(ex)
        returned: dict[int, list[int]] = {}  # key -> the attempts whose queue() returned
        deadline = time.monotonic() + 60
        batch = 0
        while interrupts < 20 and batch < 20:
            keys = range(batch * 300, (batch + 1) * 300)
            batch += 1
            for attempt in range(3):
                for k in keys:
                    call = lambda k=k, attempt=attempt: ex.queue(k, tasks.echo, attempt)  # noqa: E731
                    if not interrupted(call):
                        returned.setdefault(k, []).append(attempt)
            while ex.has_work() and time.monotonic() < deadline:
                interrupted(lambda: ex.sync(timeout=0.003))
                rec.take()
                stats = ex.stats()
                assert min(stats.values()) >= 0
        assert interrupts >= 20, f"only {interrupts} interrupts landed"
        rec.finish()
        assert not rec.duplicates
        for k, attempts in returned.items():
            ran = sorted((e.dispatch, e.result) for e in rec.outcomes[k])
            # An interrupted queue() queued its dispatch or not; one that returned did.
            assert set(attempts) <= {result for _, result in ran}, (k, ran)
            assert [d for d, _ in ran] == list(range(1, len(ran) + 1)), (k, ran)
            assert [r for _, r in ran] == sorted(r for _, r in ran), (k, ran)
        assert ex._outstanding == {} and ex._later == {} and ex.running == set()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        ex.terminate()
