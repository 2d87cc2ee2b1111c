"""Long runs with nothing lost or leaked (issue 8, hardening): workers that send their
result and exit at once, crashes and timeouts by the hundred, a 100 MiB argument and
result.

Issue 8's hardening table is split by subject (tests/worker/test_faults.py has
the index of its rows); ``pool``, ``pool_on_one_loop`` are conftest's, and
``exactly_one_each``, ``failures``, ``full_size_of`` helpers.py's.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest

import proc_table
import tasks
from helpers import START_METHODS, Recorder, exactly_one_each, failures, full_size_of, runs
from pipepool import LocalExecutor, TaskTimeoutError, WorkerLostError

MiB = 1 << 20
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/


def helpers_of_multiprocessing(pid: int) -> bool:
    """The forkserver and resource tracker: shared by design, not a pool's leak."""
    cmd = proc_table.cmdline(pid)
    return b"forkserver" in cmd or b"resource_tracker" in cmd


def forkserver_pid() -> int | None:
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def pool_processes(start_method: str) -> set[int]:
    """The processes a pool in this process may have started: our children, or (with
    forkserver) the server's children, zombies included. Under fork, our children's
    children too: a fork pool's zygote forks the workers started while threads run."""
    if start_method == "forkserver":
        server = forkserver_pid()
        return proc_table.children(server) if server else set()
    kids = {p for p in proc_table.children(os.getpid()) if not helpers_of_multiprocessing(p)}
    if start_method == "fork":
        kids |= {g for k in kids for g in proc_table.children(k)}
    return kids


def zygote_of(ex: LocalExecutor) -> set[int]:
    """The pool's zygote, if it has one: a child of this process the pool made, which
    forks the workers started while threads run (forked in the pool's first round, after
    its first worker: so not among the children before the pool started one)."""
    zygote = ex._zygote
    return {zygote.process.pid} if zygote is not None else set()


def zombie(pid: int) -> bool:
    return not proc_table.alive(pid)


# -- 2. A worker sends its result and exits at once -------------------------------------

# max_tasks_per_child=1: every worker sends one result and exits straight after, so the
# result frame and the EOF (and the exit status) race to the parent once per task, and
# each task takes a worker, a start-mark slot and its pipes, given back when the worker
# is reaped. With fork, twice as many tasks as the pool has mark slots: a slot that is
# not given back stalls the pool once the slots run out (a pool of 2 has a page of
# them: 512 with 4 KiB pages), which 500 tasks would not show. Reintroduced once
# (``_retire`` without ``self._marks.release(w.slot)``): 1,024 tasks stall at 512,
# 500 pass.


def mark_slots(parallelism: int) -> int:
    """How many start-mark slots a pool of ``parallelism`` has (white-box)."""
    from pipepool.worker._marks import MarkTable

    table = MarkTable(parallelism)
    try:
        return len(table._marks)
    finally:
        table.close()


SEND_THEN_EXIT = {"fork": 2 * mark_slots(2), "spawn": 30, "forkserver": 60}


def check_send_then_exit(ex: LocalExecutor, log: str, n: int) -> None:
    for i in range(n):
        ex.queue(i, tasks.record, log, i)
    rec = Recorder(ex)
    # Until every worker has exited and been reaped, so each one is counted.
    rec.run_while_progressing(lambda: not ex.has_work() and not ex._workers)
    exactly_one_each(rec, range(n))
    bad = failures(rec)
    assert not bad, f"{len(bad)} failed, e.g. {list(bad.items())[:3]}"
    assert all(rec.terminal[i].result == i for i in range(n))
    ran = runs(log)
    assert ran == Counter({str(i): 1 for i in range(n)}), "a task ran twice or never"
    stats = ex.stats()
    assert stats["tasks_lost"] == 0 and stats["worker_crashes"] == 0
    assert stats["workers_started"] == stats["worker_recycles"] == n
    ex.end()


@pytest.mark.timeout(1200)  # a hang's bound: a stall fails it in a minute (above)
@pytest.mark.parametrize(
    ("start_method", "n"),
    SEND_THEN_EXIT.items(),
    ids=[f"{m}-{n}" for m, n in SEND_THEN_EXIT.items()],
)
def test_send_then_exit(pool_on_one_loop, tmp_path, start_method, n):
    """Recorded exactly once, never reported lost, never run again. On one loop: what
    races here is the executor's bookkeeping, which both twins share; each twin's own
    part (the frames before an EOF, then the EOF, once) is test_loop.py's
    test_frames_before_eof_are_delivered_then_closed_once, on both."""
    ex = pool_on_one_loop(2, start_method, max_tasks_per_child=1)
    check_send_then_exit(ex, str(tmp_path / "runs.log"), n)


@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    "start_method",
    [pytest.param(m, marks=full_size_of("test_send_then_exit")) for m in START_METHODS],
)
def test_send_then_exit_full(pool, tmp_path, start_method):
    ex = pool(2, start_method, max_tasks_per_child=1)
    check_send_then_exit(ex, str(tmp_path / "runs.log"), 10_000)


# -- 8. 10,000 tasks, 100 crashes, 100 timeouts: nothing leaks --------------------------

# 2,000 tasks, 20 crashes and 20 timeouts on every start method: what can go wrong is
# per replacement (an fd or a child kept, a replacement started before the worker it
# replaces is gone), and the checks every 25 rounds catch a brief excess of workers
# only if replacements are many. Reintroduced once (``_start_workers`` counting a
# killed worker whose pipe has not closed yet as gone: ``and not w.killed``), it failed
# 8 of 9 rows over three runs at this size, 4 of 9 at 1,000-10-10. The full
# size runs with PIPEPOOL_SLOW=1.
CHURN = {m: (2_000, 20, 20) for m in START_METHODS}


def hold_at_full_strength(ex: LocalExecutor, rec: Recorder, release: str) -> int:
    """Hold ``parallelism`` tasks until ``release`` exists (workers start only while work
    is outstanding) and wait until every worker is up and heard: the parent's open fds
    then, before the caller releases them."""
    for j in range(ex.parallelism):
        ex.queue(("hold", release, j), tasks.wait_for, release)
    rec.run_until(
        lambda: (
            len(ex.worker_pids()) == ex.parallelism
            and len(ex._workers) == ex.parallelism
            and all(w.heard and not w.closing for w in ex._workers.values())
        )
    )
    return len(proc_table.open_fds())


def check_churn(
    ex: LocalExecutor, start_method: str, tmpdir, n: int, crashes: int, timeouts: int
) -> None:
    rng = random.Random(n)
    # Children that were here before this pool started one (another suite's reusable
    # pool, e.g. loky's after joblib's tests) are not this pool's.
    strays = pool_processes(start_method)
    # The fd count when the pool first stands at full strength, before the churn (during
    # it, on a loaded machine, spawn replacements may never all be up at once).
    warm, release_before = Recorder(ex), os.path.join(tmpdir, "release-before")
    fds_full = hold_at_full_strength(ex, warm, release_before)
    open(release_before, "w").close()
    warm.run_until(lambda: not ex.has_work())
    assert warm.terminal.keys() == {("hold", release_before, j) for j in range(ex.parallelism)}
    rec = Recorder(ex)
    # Troublemakers anywhere but the very end, in a reproducible order.
    special = rng.sample(range(n * 9 // 10), crashes + timeouts)
    crash = set(special[:crashes])
    slow = set(special[crashes:])
    for i in range(n):
        if i in crash:
            ex.queue(i, *((tasks.exit_process, 3) if i % 2 else (tasks.kill_self,)))
        elif i in slow:
            ex.queue_call(i, tasks.sleep, (30,), timeout=0.05)
        else:
            ex.queue(i, tasks.echo, i)
    rounds = 0
    deadline = time.monotonic() + 200
    while ex.has_work():
        assert time.monotonic() < deadline, ex.stats()
        rec.round(0.01)
        rounds += 1
        workers = ex._workers.values()
        if rounds % 25 == 0:
            # Every child is a worker the pool knows (a dying one, whose pipe closed,
            # until it is reaped), and at most ``parallelism`` of them are not dying.
            kids = pool_processes(start_method) - strays - zygote_of(ex)
            known = {w.pid for w in workers}
            assert kids <= known, f"children the pool forgot: {kids - known}"
            assert len(ex.worker_pids()) <= ex.parallelism
    exactly_one_each(rec, range(n))
    for i, event in rec.terminal.items():
        if i in crash:
            assert isinstance(event.exception, WorkerLostError), event
        elif i in slow:
            assert isinstance(event.exception, TaskTimeoutError), event
        else:
            assert event.result == i, event
    # Back at full strength: exactly that many live children, no zombie, the same fds.
    release = os.path.join(tmpdir, "release")
    hold_at_full_strength(ex, rec, release)
    # The forkserver reaps its children on its own clock: until it has, the old workers
    # are its zombies.
    rec.run_until(
        lambda: pool_processes(start_method) - strays - zygote_of(ex) == set(ex.worker_pids()),
        limit=10,
    )
    kids = pool_processes(start_method) - strays - zygote_of(ex)
    assert kids == set(ex.worker_pids()) and len(kids) == ex.parallelism
    assert not [p for p in kids if zombie(p)]
    # At most as many: the pool's first worker is forked here (its sentinel and pidfd
    # are fds of this process) and its replacement by the zygote (neither) when threads
    # run, as under xdist.
    assert len(proc_table.open_fds()) <= fds_full, "fds grew while the pool churned"
    open(release, "w").close()
    rec.run_until(lambda: not ex.has_work())
    stats = ex.stats()
    assert stats["workers_started"] == ex.parallelism + crashes + timeouts
    assert stats["tasks_failed"] == crashes + timeouts
    assert stats["tasks_lost"] == crashes
    ex.end()


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("start_method", "sizes"),
    CHURN.items(),
    ids=[f"{m}-{n}-{c}-{t}" for m, (n, c, t) in CHURN.items()],
)
def test_crashes_and_timeouts_leak_nothing(
    no_leaks, pool_on_one_loop, tmp_path, start_method, sizes
):
    """No zombie and no child the pool forgot, at most ``parallelism`` live children and
    exactly that many at the end, the same fd count at the end as when the pool first
    stood at full strength, and (``no_leaks``) nothing at all after ``end()``. On one
    loop: replacing workers is the executor's; each twin's own fds are held to the
    strict leak check by test_invariants.py's start/end cycles, on both."""
    check_churn(pool_on_one_loop(4, start_method, prefetch=4), start_method, tmp_path, *sizes)


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "start_method",
    [
        pytest.param(m, marks=full_size_of("test_crashes_and_timeouts_leak_nothing"))
        for m in START_METHODS
    ],
)
def test_crashes_and_timeouts_leak_nothing_full(no_leaks, pool, tmp_path, start_method):
    check_churn(pool(4, start_method, prefetch=4), start_method, tmp_path, 10_000, 100, 100)


# -- 10. A 100 MiB argument and a 100 MiB result ----------------------------------------

BIG = textwrap.dedent("""
    import hashlib, os, resource, sys, time
    sys.path[:0] = {path!r}
    import tasks
    from pipepool import LocalExecutor

    def peak():  # the peak resident set so far (ru_maxrss: bytes on macOS, KiB else)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss if sys.platform == "darwin" else rss * 1024

    if __name__ == "__main__":
        size = {size}
        ex = LocalExecutor(1, start_method={method!r}, loop_impl={impl!r})
        ex.start()
        ex.queue("warm", tasks.echo, 1)
        ex.wait_until_done()
        ex.get_event_buffer()
        arg = os.urandom(size)
        digest = hashlib.sha256(arg).hexdigest()
        base = peak()  # what it holds now: it made the argument last, nothing bigger
        ex.queue("big", tasks.echo, arg)  # the worker sends back exactly what it got
        assert ex.wait_until_done(120)
        event = ex.get_event_buffer()["big"]
        high = peak()
        intact = (event.state.value == "success" and len(event.result) == size
                  and hashlib.sha256(event.result).hexdigest() == digest)
        ex.end()
        print(intact, base, high, flush=True)
""")


@pytest.mark.portable  # getrusage's peak, which every Unix has
@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_100_mib_argument_and_result(impl, start_method):
    """Delivered intact; the parent's peak RSS above what it held before the call (the
    argument itself included) stays within 2.5x the payload: the pickled call (1x, gone
    once written), then the incoming frame, read in place (1x), and the result (1x). Both
    loops; a pure loop that copied the frame out of its read buffer measured 3x.
    Measured in a fresh interpreter so the test process's own history cannot hide it, by
    getrusage's peak (every Unix has it): before the call, the peak is what the process
    holds, as making the argument was the most it ever held."""
    size = 100 * MiB
    script = BIG.format(path=[HERE, *sys.path], size=size, method=start_method, impl=impl)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=110, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    intact, base, peak = out.stdout.split()
    assert intact == "True"
    extra = (int(peak) - int(base)) / size
    print(
        f"{impl} {start_method}: parent peak {int(peak) / MiB:.0f} MiB, "
        f"{extra:.2f}x the payload above its {int(base) / MiB:.0f} MiB before the call"
    )
    assert extra <= 2.5, f"parent peak grew {extra:.2f}x the payload"
