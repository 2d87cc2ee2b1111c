"""The eight things the Core issue must show, each on fork, spawn and forkserver and on
both loop implementations. Pipes are shrunk to one page where the OS allows."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter

import pytest

import tasks
from helpers import Recorder, runs
from pipepool import (
    DuplicateKeyError,
    LocalExecutor,
    State,
    TaskPicklingError,
    WorkerLostError,
)
from pipepool._task import Task

PAGE = 4096


# 1. The seed deadlock -----------------------------------------------------------------


@pytest.mark.parametrize("payloads", ["shared", "pipes"])
def test_seed_deadlock_one_page_pipes(make, payloads, request):
    """1,000 tasks, 16 KiB in and 32 KiB out through 4 KiB pipes, all queued before the
    first sync: a blocking writer deadlocks here; pipepool must finish every one, with
    its payloads in the workers' shared rings and with every byte through the pipes."""
    if payloads == "pipes":
        request.getfixturevalue("pipes_only")
    ex = make(4, pipe_size=PAGE)
    arg = os.urandom(16 * 1024)
    n = 1000
    for i in range(n):
        ex.queue(i, tasks.pad, i, arg, 32 * 1024)
    rec = Recorder(ex)
    rec.finish(limit=100)
    assert not rec.duplicates
    assert len(rec.terminal) == n
    for i in range(n):
        event = rec.terminal[i]
        assert event.state is State.SUCCESS, event
        key, size, head, blob = event.result
        assert (key, size, head, len(blob)) == (i, len(arg), arg[:8], 32 * 1024)
        assert blob.startswith(str(i).encode())
    assert ex.stats()["tasks_done"] == n


# 2. A batch ten times the pipe, queued before any worker is alive --------------------


def test_batch_larger_than_pipe_before_any_worker(impl):
    ex = LocalExecutor(2, start_method="spawn", pipe_size=PAGE, prefetch=64, loop_impl=impl)
    ex.start()
    try:
        assert ex.worker_pids() == []  # nothing alive yet: spawn starts them from the loop
        arg = b"z" * 1024
        n = 200  # 200 KiB of frames against a 4 KiB pipe: 50 times its size
        for i in range(n):
            ex.queue(i, tasks.echo, (i, arg))
        rec = Recorder(ex)
        rec.finish(limit=100)
        assert {k: e.result for k, e in rec.terminal.items()} == {i: (i, arg) for i in range(n)}
    finally:
        ex.terminate()


# 3. SIGKILL every worker while 2,000 tasks are in flight -----------------------------


KILL_ROUNDS = 5  # at most; the first round that catches a task mid-run is the last


def test_sigkill_every_worker_mid_batch(make, tmp_path):
    """Every worker SIGKILLed with tasks in flight: each task ends once, only the one a
    victim had started fails. A round can catch all four between two tasks (each
    preempted right after sending an outcome, which a loaded machine makes likely: it
    failed so at load 20) and lose none; so rounds of kills, until one loses a task."""
    log = str(tmp_path / "runs.log")
    ex = make(4, prefetch=4, pipe_size=PAGE)
    n = 2000
    for i in range(n):
        ex.queue(i, tasks.record, log, i, 0.002)
    rec = Recorder(ex)
    victims: list[int] = []
    lost: set = set()
    for _ in range(KILL_ROUNDS):
        ended = len(rec.terminal)
        rec.run_until(lambda e=ended: len(rec.terminal) >= e + 100 and len(ex.worker_pids()) == 4)
        killed = ex.worker_pids()
        started_before_kill = set(ex.running)
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        # Until each is retired (its tasks settled), not only gone from worker_pids().
        rec.run_until(lambda k=set(killed): not any(w.pid in k for w in ex._workers.values()))
        failed = {k for k, e in rec.terminal.items() if e.state is State.FAILED}
        assert len(failed - lost) <= len(killed)  # at most the one task each had started
        assert failed - lost <= started_before_kill
        victims += killed
        lost = failed
        if lost:
            break
    assert lost, f"each of {KILL_ROUNDS} rounds of kills found every worker between tasks"
    rec.finish(limit=100)
    assert not rec.duplicates and len(rec.terminal) == n
    assert {k for k, e in rec.terminal.items() if e.state is State.FAILED} == lost
    for key in lost:
        error = rec.terminal[key].exception
        assert isinstance(error, WorkerLostError)
        assert error.signal == "SIGKILL" and error.pid in victims
    ran = runs(log)
    for key, event in rec.terminal.items():
        if event.state is State.SUCCESS:
            assert event.result == key
            assert ran[str(key)] == 1, f"task {key} ran {ran[str(key)]} times"
    assert ex.stats()["workers_started"] >= 8  # replacements came from the loop


# 4. Undo of a failed dispatch; a half-written frame is dispatched again ---------------


def test_unpicklable_argument_changes_nothing_else(make):
    ex = make(2)
    for i in range(20):
        ex.queue(i, tasks.echo, i)
    ex.queue("bad", tasks.echo, tasks.Unpicklable())
    rec = Recorder(ex)
    rec.finish()
    assert isinstance(rec.terminal["bad"].exception, TaskPicklingError)
    assert "'bad'" in str(rec.terminal["bad"].exception)
    assert {k: e.result for k, e in rec.terminal.items() if k != "bad"} == {i: i for i in range(20)}
    stats = ex.stats()
    assert (stats["tasks_done"], stats["tasks_failed"], stats["worker_crashes"]) == (20, 1, 0)


def test_worker_dying_while_its_frame_is_half_written(make, tmp_path, pipes_only):
    """One worker, two tasks in flight: the first blocks, the second's 1 MiB frame sits
    half written in a one-page pipe (the pipe path: with the shared ring the frame is a
    small reference, see tests/worker/test_shared_payloads.py). Killing the worker fails the
    first (it started) and dispatches the second again: it runs exactly once."""
    log = str(tmp_path / "runs.log")
    never = str(tmp_path / "never")
    ex = make(1, prefetch=2, pipe_size=PAGE)
    ex.queue("blocker", tasks.wait_for, never)
    rec = Recorder(ex)
    rec.run_until(lambda: "blocker" in rec.running_seen)
    # Queued apart, so that it travels in a frame of its own (not in one BATCH with the
    # blocker, which the worker would have to receive whole before starting either).
    ex.queue("big", tasks.record, log, "big", 0, b"B" * (1 << 20))
    ex.sync()
    (worker,) = ex._workers.values()
    assert ex._loop.pending(worker.wid) > 0  # the big frame is only partly in the pipe
    os.kill(worker.pid, signal.SIGKILL)
    rec.finish()
    assert isinstance(rec.terminal["blocker"].exception, WorkerLostError)
    assert rec.terminal["big"].state is State.SUCCESS
    assert runs(log) == Counter({"big": 1})


# 5. Interrupts part way through sync() ------------------------------------------------


class Interrupt(KeyboardInterrupt):
    pass


def test_interrupts_during_sync_leave_bookkeeping_exact(impl, start_method):
    """Batches of 3,000 tasks while a timer interrupts sync() at random points, the
    invariants checked after every round; batches go on until at least 20 interrupts
    landed (a faster pool finishes a batch in fewer rounds)."""
    n = 3000
    ex = LocalExecutor(3, start_method=start_method, prefetch=8, pipe_size=PAGE, loop_impl=impl)
    ex.start()
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(Interrupt()))
    try:
        rec = Recorder(ex)
        interrupts = 0
        rng = random.Random(7)
        keys: set[int] = set()
        deadline = time.monotonic() + 90
        while interrupts < 20 and len(keys) < 5 * n:
            batch = range(len(keys), len(keys) + n)
            keys.update(batch)
            for i in batch:
                ex.queue(i, tasks.echo, (i, b"x" * 2000))
            while ex.has_work() and time.monotonic() < deadline:
                try:
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.00005, 0.004))
                    ex.sync(timeout=0.003)
                    signal.setitimer(signal.ITIMER_REAL, 0)
                except Interrupt:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    interrupts += 1
                rec.take()
                queued, running, reported = ex.queued, ex.running, set(rec.terminal)
                assert not (queued & running) and not (queued & reported)
                assert not (running & reported)
                assert queued | running | reported == keys
                stats = ex.stats()
                assert min(stats.values()) >= 0
                assert (
                    stats["tasks_queued"]
                    + stats["tasks_running"]
                    + stats["tasks_done"]
                    + stats["tasks_failed"]
                ) == len(keys)
        assert interrupts >= 20, f"only {interrupts} interrupts landed"
        rec.finish()
        assert not rec.duplicates
        assert {k: e.result[0] for k, e in rec.terminal.items()} == {i: i for i in keys}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        ex.terminate()


# 6. A key queued again while it is outstanding: one more dispatch, each counted ---------


def test_same_key_queued_again_is_one_more_dispatch_and_each_completes_once(make, tmp_path):
    """A key queued again while its dispatch runs is accepted as dispatch 2; each runs
    and reports exactly once, marked with its number; ``exclusive=True`` refuses it
    instead and the refused one never runs."""
    release = str(tmp_path / "release")
    log = str(tmp_path / "runs.log")
    ex = make(3)  # the gate, the second and the third run at once
    ex.queue("k", tasks.record, log, "k", 0.0, "first")
    ex.queue("gate", tasks.wait_for, release)
    rec = Recorder(ex)
    rec.run_until(lambda: "k" in rec.terminal)
    ex.queue("k", tasks.wait_for, release, "second")  # read: free again, dispatch 1
    rec.run_until(lambda: "k" in rec.running_seen)
    with pytest.raises(DuplicateKeyError):
        ex.queue_call("k", tasks.record, (log, "refused"), exclusive=True)
    ex.queue("k", tasks.record, log, "third", 0.0, "third")  # dispatch 2, beside it
    rec.run_until(lambda: len(rec.outcomes["k"]) == 2)
    open(release, "w").close()
    rec.finish()
    assert rec.history["k"].count("success") == 3 and not rec.duplicates
    assert [(e.dispatch, e.result) for e in rec.outcomes["k"]] == [
        (1, "first"),
        (2, "third"),
        (1, ("second", 0)),
    ]
    assert runs(log) == Counter({"k": 1, "third": 1})  # the refused one never ran
    assert ex._held == {} and ex._outstanding == {}, "keys whose events were read are forgotten"


def test_a_queue_cut_short_by_ctrl_c_does_not_hold_its_key(make):
    """queue() notes the key, then appends the task: a KeyboardInterrupt between the two
    leaves the key noted for a task that does not exist. That key is not held."""
    ex = make(1)
    ex._held["k"] = Task(0, "k", tasks.echo, (), {}, None)  # noted, never appended
    ex.queue("k", tasks.echo, "real")
    rec = Recorder(ex)
    rec.finish()
    assert rec.terminal["k"].result == "real"


def test_undoing_second_dispatch_leaves_first_running(make, tmp_path):
    release = str(tmp_path / "release")
    ex = make(2)
    ex.queue("k", tasks.wait_for, release, "first")
    rec = Recorder(ex)
    rec.run_until(lambda: "k" in rec.running_seen)
    ex.queue("k2", tasks.echo, tasks.Unpicklable())
    rec.run_until(lambda: "k2" in rec.terminal)
    assert isinstance(rec.terminal["k2"].exception, TaskPicklingError)
    assert ex.running_counts() == {"k": 1} and ex.queued == set()
    open(release, "w").close()
    rec.finish()
    assert rec.terminal["k"].result == ("first", 0)


# 7. A RUNNING event that arrives while its dispatch is still being written -------------


def test_running_event_during_partial_write_is_kept(make, tmp_path, pipes_only):
    release = str(tmp_path / "release")
    ex = make(1, pipe_size=PAGE)
    ex.queue("big", tasks.wait_for, release, "big", b"A" * (1 << 20))
    rec = Recorder(ex)
    partial_rounds = 0
    while "big" not in rec.running_seen:
        ex.sync(timeout=0.01)
        workers = list(ex._workers.values())
        if workers and ex._loop.pending(workers[0].wid):
            partial_rounds += 1
            assert ex.running == {"big"}  # counted as running while still being written
        rec.take()
    assert partial_rounds >= 1  # the frame really went out across several rounds
    assert ex.running == {"big"}
    open(release, "w").close()
    rec.finish()
    assert rec.terminal["big"].result == ("big", 1 << 20)
    assert rec.history["big"][-1] == "success"


# 8. Start/end cycles leave nothing behind ---------------------------------------------


# Every leak this guards is one per cycle (a pool's fds, its workers, its threads), and
# the strict check sees it after the last: ten cycles keep a margin for one that only
# some cycles show. Reintroduced once (``_close`` without ``self._marks.close()``, the
# start-mark page's fd), it failed on every row; 100 cycles cost 34 s on both loops.
START_END_CYCLES = 10


def test_start_end_cycles_leave_nothing_behind(impl, start_method, no_leaks):
    for cycle in range(START_END_CYCLES):
        with LocalExecutor(2, start_method=start_method, loop_impl=impl) as ex:
            ex.queue(cycle, tasks.echo, cycle)
            ex.queue(-cycle - 1, tasks.echo, cycle)
        assert ex.get_event_buffer()[cycle].result == cycle


def test_terminate_leaves_nothing_behind(impl, start_method, no_leaks):
    ex = LocalExecutor(2, start_method=start_method, loop_impl=impl)
    ex.start()
    for i in range(10):
        ex.queue(i, tasks.sleep, 30)
    rec = Recorder(ex)
    rec.run_until(lambda: len(rec.running_seen) >= 2)
    ex.terminate()
    rec.take()
    assert set(rec.terminal) == set(range(10))  # every key still gets its one terminal event
    assert all(e.state is State.FAILED for e in rec.terminal.values())
