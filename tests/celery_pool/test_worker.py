"""A real ``celery worker -P custom`` on pipepool's pool (CELERY_CUSTOM_WORKER_POOL) with
Redis as broker and result backend: kombu's hub drives the pool. One worker serves the
whole module, in the module's order (each test leaves it with every child idle and the
semaphore free), as Celery's own prefork acceptance matrix runs (celery#10584)."""

from __future__ import annotations

import os
import signal
import time

import pytest

import leakcheck

from .celery_support import POOL, Worker, alive, require, wait_for

require()  # skip without Celery locally; with CI=true, fail

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def w(redis_server, tmp_path_factory):
    worker = Worker(
        tmp_path_factory.mktemp("celery-worker"),
        "main",
        broker=redis_server.db(0),
        backend=redis_server.db(1),
        args=("--soft-time-limit", "30", "--time-limit", "60"),
    )
    with leakcheck.keep("the module's Celery worker", worker.held):
        try:
            yield worker
        finally:
            worker.kill()


def children_of(w: Worker) -> set[int]:
    return set(w.pool()["processes"])


def test_inspect_stats_names_the_pool_and_its_children(w):
    pool = w.pool()
    assert pool["implementation"] == POOL
    assert pool["max-concurrency"] == 2 and len(pool["processes"]) == 2
    assert set(pool["processes"]) <= w.children()
    assert pool["timeouts"] == [30, 60]
    assert pool["pipepool"]["driven-by"] == "hub"
    assert pool["pipepool"]["semaphore"] == {"value": 2, "initial": 2}


def test_each_child_ran_process_initializer_once_and_the_fast_tracer_works(w):
    seen = {w.run("whoami")["pid"] for _ in range(6)}
    answer = w.run("whoami")
    assert answer["fast_tracer"] and answer["forked_by_multiprocessing"] is None
    assert "_on_soft_limit" in answer["sigusr1"]  # the pool's handler, after Celery's reset
    inits = w.count("init")
    for pid in seen | children_of(w):
        assert inits[str(pid)] == 1, (pid, inits)


def test_chains_groups_and_chords(w):
    from celery import chain, chord, group

    add = w.app.signature("celery_proj.add", queue=w.queue)
    total = w.app.signature("celery_proj.total", queue=w.queue)
    assert chain(add.clone((1, 2)), add.clone((3,)), add.clone((4,))).apply_async().get(60) == 10
    assert group(add.clone((i, i)) for i in range(10)).apply_async().get(60) == [
        2 * i for i in range(10)
    ]
    assert chord((add.clone((i, 1)) for i in range(8)), total).apply_async().get(60) == 36


def test_eta_and_retry(w):
    began = time.monotonic()
    eta = w.send("add", 2, 3, countdown=1.0)
    assert eta.get(60) == 5
    assert time.monotonic() - began >= 1.0  # not before its countdown
    assert w.run("retry_twice", "r") == 2
    assert [words[2] for words in w.runs() if words[:2] == ["try", "r"]] == ["0", "1", "2"]


@pytest.mark.parametrize("size", [1 << 20, 5 << 20])
def test_big_arguments_and_results(w, size):
    data = os.urandom(size)
    out = w.run("echo_size", data, size)
    assert len(out) == size and out[:16] == data[:16]


def test_soft_time_limit_raises_in_the_task_counted_from_its_start(w):
    assert w.run("soft_limited", 30, "s1", soft_time_limit=0.5) == "soft limit"
    (elapsed,) = [float(words[3]) for words in w.runs() if words[:2] == ["soft", "s1"]]
    assert elapsed >= 0.5  # from the start, never before
    assert wait_for(lambda: "Soft time limit (0.5s) exceeded" in w.log(), 10)


def test_hard_time_limit_ends_the_task_its_processes_and_a_child_replaces_it(w, tmp_path):
    from celery.exceptions import TimeLimitExceeded

    before = children_of(w)
    pidfile = tmp_path / "pids"
    result = w.send("hard_limited", "h1", str(pidfile), time_limit=1.0)
    with pytest.raises(TimeLimitExceeded):
        result.get(60)
    child, grandchild = map(int, pidfile.read_text().split())
    assert wait_for(lambda: not alive(child) and not alive(grandchild), 10)  # the group ended
    assert wait_for(lambda: "Hard time limit (1.0s) exceeded" in w.log(), 10)
    assert wait_for(lambda: len(children_of(w)) == 2 and child not in children_of(w), 30)
    (replacement,) = children_of(w) - before
    assert before - {child} <= children_of(w)
    assert w.run("add", 1, 1) == 2
    # The replacement was up (its worker_process_init ran) within a second of the limit.
    (started,) = [float(words[-1]) for words in w.runs() if words[:2] == ["start", "h1"]]
    # (its record may be written after "add" ran on the other child: waited for, the
    # time read is the record's own)
    assert wait_for(lambda: ["init", str(replacement)] in [r[:2] for r in w.runs()], 30)
    (up,) = [float(words[-1]) for words in w.runs() if words[:2] == ["init", str(replacement)]]
    assert up - (started + 1.0) < 1.0, up - (started + 1.0)


def test_revoke_with_terminate_after_accept(w):
    from celery.exceptions import TaskRevokedError

    result = w.send("sleep", 60, "t1")
    assert wait_for(lambda: w.count("start")["t1"] == 1, 30)
    (child,) = {int(words[2]) for words in w.runs() if words[:2] == ["start", "t1"]}
    result.revoke(terminate=True)
    with pytest.raises(TaskRevokedError):
        result.get(30)
    assert wait_for(lambda: not alive(child), 30)  # SIGTERM: the task unwound, the child died
    assert w.count("done")["t1"] == 0
    assert w.run("add", 2, 2) == 4


def test_revoke_with_terminate_before_accept(w):
    from celery.exceptions import TaskRevokedError

    busy = [w.send("sleep", 3, f"b{i}") for i in range(2)]  # both children busy
    assert wait_for(lambda: w.count("start")["b0"] + w.count("start")["b1"] == 2, 30)
    waiting = w.send("sleep", 0, "never")
    time.sleep(0.3)  # it reaches the worker (reserved), not a child: both are busy
    # (revoked, Celery discards it when a slot frees; a job revoked inside the pool:
    # test_hub.py::test_a_job_terminated_before_it_starts_never_runs)
    waiting.revoke(terminate=True)
    with pytest.raises(TaskRevokedError):
        waiting.get(30)
    assert [r.get(30) for r in busy] == [3, 3]
    assert w.count("start")["never"] == 0


def test_a_lost_child_fails_its_task_naming_the_signal_and_the_oom_killer(w):
    from celery.exceptions import WorkerLostError

    result = w.send("die", "d1")
    with pytest.raises(WorkerLostError) as lost:
        result.get(30)
    text = str(lost.value)
    assert "Worker exited prematurely: signal 9 (SIGKILL)" in text
    assert "SIGKILL" in text and "OOM" in text, text
    assert w.run("add", 3, 3) == 6


def test_acks_late_and_reject_on_worker_lost_redeliver_once(w, tmp_path):
    marker = tmp_path / "died-once"
    assert w.run("die_once", "a1", str(marker)) == "second run"
    assert w.count("start")["a1"] == 2 and w.count("done")["a1"] == 1


def test_a_child_that_dies_after_sending_its_result_does_not_run_the_task_again(w):
    assert w.run("die_after_result", "late1", 0.3) == "sent"
    time.sleep(1.0)  # the child is killed meanwhile, idle: nothing is redelivered
    assert w.count("start")["late1"] == 1
    assert wait_for(lambda: len(children_of(w)) == 2, 30)
    assert w.run("add", 4, 4) == 8


def test_pool_grow_and_shrink(w):
    w.control("pool_grow", n=1)
    assert wait_for(lambda: len(children_of(w)) == 3, 30)
    pool = w.pool()
    assert pool["pipepool"]["semaphore"] == {"value": 3, "initial": 3}
    w.control("pool_shrink", n=1)
    assert wait_for(lambda: len(children_of(w)) == 2, 30)
    assert w.pool()["pipepool"]["semaphore"] == {"value": 2, "initial": 2}


def test_pool_restart_replaces_every_child(w):
    before = children_of(w)
    busy = w.send("sleep", 1.5, "during-restart")
    assert wait_for(lambda: w.count("start")["during-restart"] == 1, 30)
    w.control("pool_restart")
    assert busy.get(30) == 1.5  # the busy child ends its task first
    assert wait_for(lambda: len(children_of(w)) == 2 and not (children_of(w) & before), 30)
    assert {w.run("whoami")["pid"] for _ in range(4)} <= children_of(w)


def test_the_semaphore_is_full_and_every_job_ended(w):
    assert wait_for(lambda: w.pool()["pipepool"]["jobs"] == 0, 30)
    pool = w.pool()
    assert pool["pipepool"]["semaphore"] == {"value": 2, "initial": 2}
    assert pool["pipepool"]["stats"]["tasks_running"] == 0


def test_warm_shutdown_delivers_every_running_task(w):
    results = [w.send("sleep", 1.0, f"warm{i}") for i in range(2)]
    assert wait_for(lambda: sum(w.count("start")[f"warm{i}"] for i in range(2)) == 2, 30)
    pool = set(w.pool()["processes"])
    w.signal(signal.SIGTERM)
    assert w.wait(60) == 0
    assert [r.get(30) for r in results] == [1.0, 1.0]
    assert wait_for(lambda: not any(alive(p) for p in pool), 30)
    shutdowns = w.count("shutdown")  # each child exited on its own (worker_process_shutdown)
    assert all(shutdowns[str(pid)] == 1 for pid in pool), (pool, shutdowns)


@pytest.mark.parametrize("named", [False, True])
def test_djangos_fixup_treats_the_pool_as_prefork(named):
    # Celery's Django fix-up closes Django's connection pools in the children only for a
    # pool whose module's name says "prefork" (its own method, asked as the worker does:
    # with the class, or the name the setting gives).
    from types import SimpleNamespace

    from celery.fixups.django import DjangoWorkerFixup

    from pipepool.celery.prefork import TaskPool

    fixup = DjangoWorkerFixup.__new__(DjangoWorkerFixup)  # no Django here: no __init__
    fixup.worker = SimpleNamespace(pool_cls=POOL if named else TaskPool)
    assert fixup._is_prefork()
