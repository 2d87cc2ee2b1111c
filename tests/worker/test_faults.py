"""Workers that fail (issue 8, hardening): a task that raises or crashes its worker, a
worker killed at random points, the parent SIGKILLed soon after it created the pool, an
initializer that raises or is slow; with nothing lost: every task ends with exactly one
terminal event (``Recorder`` keeps every event and flags duplicates).

Rows and where they are tested (rows already covered elsewhere are named, not copied):

=============================================  ==============================================
task raises / BaseException / sys.exit(3) /    ``test_task_fault`` (this file; the narrower
os._exit(0) / segfault / SIGKILL itself        ``contract/test_contract.py::test_dead_
                                               worker_...`` and
                                               ``::test_system_exit_and_base_exception...``
                                               also run on ClusterExecutor)
worker sends its result then exits at once     ``contract/test_stress.py::test_send_then_
                                               exit`` (10,000 with fork)
worker killed at random points                 ``test_worker_killed`` (+ the half-written task
                                               frame: ``contract/test_invariants.py::test_
                                               worker_dying_while_its_frame_is_half_
                                               written``)
parent SIGKILLed, 8 busy workers               ``test_parent_death.py::test_workers_exit_when_
                                               parent_is_killed[busy]`` (every start method)
parent SIGKILLed 0-50 ms after creation        ``test_parent_killed_soon_after_creation``
                                               (every start method; the fork-only original
                                               stays in test_parent_death.py)
initializer raises                             ``test_initializer_failure_backs_off`` (+ the
                                               count check in ``executor/test_executor.py::
                                               test_
                                               failing_initializer_...``)
initializer slow (10 s)                        ``test_slow_initializer_is_not_respawned``
max_tasks_per_child=2, 10,000 tasks            ``test_max_tasks_per_child.py::test_max_
                                               tasks_per_child_2``
10,000 tasks, 100 crashes, 100 timeouts        ``contract/test_stress.py::test_crashes_and_
                                               timeouts_leak_nothing``
corrupted or oversized frame from a worker     ``core/test_bad_frames.py::test_bad_frame``
100 MiB argument and 100 MiB result            ``contract/test_stress.py::test_100_mib_
                                               argument_and_result``
stats()                                        ``executor/test_stats.py::test_stats_after_
                                               a_known_scenario``
=============================================  ==============================================

Sizes (what runs where). The stress rows run by default at the smallest load that
still fails against the bug they guard (each row's comment names the bug, reintroduced
once, and the size it failed at), on one loop implementation where what they stress is
the executor's bookkeeping both twins share (conftest's ``one_impl``: the compiled one);
the issue's full sizes run, on both loops, in ``*_full`` duplicates marked ``slow`` and
run only with ``PIPEPOOL_SLOW=1`` (the scheduled job of .github/workflows/tests.yml;
their skip reason names the default test). Starting a worker costs about 3 ms with fork
(20 ms once the test process has grown through the suite), 15-30 ms with forkserver and
50-80 ms with spawn on the reference 2-core box.

=============================  =========================  ====================================
row                            default (one loop)         PIPEPOOL_SLOW=1 (both loops)
=============================  =========================  ====================================
send then exit (1 task/child)  fork 2x the pool's start-  fork, spawn and forkserver 10,000
                               mark slots (1,024); spawn  (forkserver: 8 min per loop;
                               30; forkserver 60          spawn: about 14 min per loop)
max_tasks_per_child=2          fork 200; spawn 60;        fork, spawn and forkserver 10,000
                               forkserver 120             (23 s, 4.5 min, 70 s per loop)
crashes and timeouts           2,000 tasks, 20 crashes,   10,000, 100, 100 on every start
                               20 timeouts, every start   method
                               method
=============================  =========================  ====================================

White-box: a few checks read ``LocalExecutor`` internals (``_workers``, ``_loop``) where
no public API says which worker holds a task or lowers the parent's frame limit.

Issue 8's hardening table, split by subject (this index names each row's file, under
tests/); ``pool``, ``pool_on_one_loop`` are conftest's, and
``exactly_one_each``, ``failures``, ``full_size_of`` helpers.py's.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Any

import pytest

import proc_table
import tasks
from helpers import (
    START_METHODS,
    Recorder,
    exactly_one_each,
    failures,
    implementations,
    orphan_deadline,
    runs,
    unread_bytes,
)
from pipepool import (
    InitializerError,
    LocalExecutor,
    RemoteTraceback,
    TaskPicklingError,
    TaskTimeoutError,
    WorkerLostError,
)
from pipepool.errors import FrameError
from pipepool.worker import _region

PAGE = 4096
MiB = 1 << 20
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/


# -- 1. A task raises, raises BaseException, calls sys.exit, os._exit, segfaults --------


@dataclass(frozen=True)
class Fault:
    fn: Callable[..., Any]
    args: tuple
    error: type  # the exact type the task's event carries
    check: Callable[[BaseException], bool]
    worker_survives: bool


FAULTS = {
    "raises": Fault(
        tasks.raise_value_error, ("boom",), ValueError, lambda e: str(e) == "boom", True
    ),
    "raises-BaseException": Fault(
        tasks.raise_base_exception,
        (),
        tasks.CustomBaseException,
        lambda e: str(e) == "not an Exception",
        True,
    ),
    "raises-KeyboardInterrupt": Fault(
        tasks.raise_keyboard_interrupt,
        (),
        KeyboardInterrupt,
        lambda e: str(e) == "inside the task",
        True,
    ),
    "sys.exit(3)": Fault(tasks.exit_via_sys, (3,), SystemExit, lambda e: e.code == 3, True),
    "os._exit(0)": Fault(
        tasks.exit_process,
        (0,),
        WorkerLostError,
        lambda e: e.exitcode == 0 and e.signal is None and "exited with code 0" in str(e),
        False,
    ),
    "os._exit(3)": Fault(
        tasks.exit_process,
        (3,),
        WorkerLostError,
        lambda e: e.exitcode == 3 and "exited with code 3" in str(e),
        False,
    ),
    "SIGKILL": Fault(
        tasks.kill_self,
        (signal.SIGKILL,),
        WorkerLostError,
        lambda e: (
            e.exitcode == -signal.SIGKILL
            and e.signal == "SIGKILL"
            and "killed by SIGKILL" in str(e)
        ),
        False,
    ),
    "segfault": Fault(
        tasks.segfault,
        (),
        WorkerLostError,
        lambda e: (
            e.exitcode == -signal.SIGSEGV
            and e.signal == "SIGSEGV"
            and "killed by SIGSEGV" in str(e)
        ),
        False,
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(FAULTS))
def test_task_fault(pool, start_method, case):
    """Each fault is its own documented outcome (``Event`` docstring, README): the task's
    own exception with the worker's traceback as ``__cause__`` while the worker lives on,
    or ``WorkerLostError`` with pid and exit code or signal when the process died; only
    that task fails and the pool goes on (a replacement when the worker died)."""
    fault = FAULTS[case]
    ex = pool(1, start_method)
    ex.queue("before", tasks.pid_of_worker)
    ex.queue("fault", fault.fn, *fault.args)
    for i in range(5):
        ex.queue(i, tasks.pid_of_worker)
    rec = Recorder(ex)
    rec.finish(limit=50)
    exactly_one_each(rec, ["before", "fault", *range(5)])
    assert set(failures(rec)) == {"fault"}
    event = rec.terminal["fault"]
    error = event.exception
    assert type(error) is fault.error and fault.check(error), repr(error)
    first = rec.terminal["before"].result
    after = {rec.terminal[i].result for i in range(5)}
    stats = ex.stats()
    if fault.worker_survives:
        assert isinstance(error.__cause__, RemoteTraceback)
        assert fault.fn.__name__ in str(error.__cause__)
        assert after == {first} and event.pid == first  # the same worker served on
        assert (stats["workers_started"], stats["worker_crashes"], stats["tasks_lost"]) == (1, 0, 0)
    else:
        assert error.pid == event.pid == first and "'fault'" in str(error)
        assert len(after) == 1 and first not in after  # one replacement served the rest
        assert (stats["workers_started"], stats["worker_crashes"], stats["tasks_lost"]) == (2, 1, 1)
    assert (stats["tasks_done"], stats["tasks_failed"]) == (6, 1)


def test_failure_kinds_are_documented():
    """Every failure type these tables expect is named in the ``Event`` docstring (the
    README's API section repeats that list; it is not shipped with the wheel's tests)."""
    from pipepool import Event

    for kind in (
        WorkerLostError,
        TaskTimeoutError,
        TaskPicklingError,
        InitializerError,
        CancelledError,
    ):
        assert kind.__name__ in Event.__doc__, kind
    assert "the task's own exception" in Event.__doc__


# -- 3. A worker killed at random points ------------------------------------------------


@dataclass
class Kills:
    """What a kill scenario did: its pool and recorder, the keys it queued, the pids it
    killed, and which keys must have failed (None: at most one started task per victim,
    unknown which)."""

    ex: LocalExecutor
    rec: Recorder
    keys: list
    victims: list[int]
    lost: set | None
    parallelism: int
    extra: dict = field(default_factory=dict)


def worker_running(ex: LocalExecutor, key) -> int:
    """Pid of the worker that started ``key`` (white-box: the tests know the executor)."""
    for w in ex._workers.values():
        for t in w.in_flight.values():
            if t.key == key and t.started:
                return w.pid
    raise AssertionError(f"{key!r} is not running")


def kill_at_startup(pool, log, start_method) -> Kills:
    # A slow initializer holds both workers in start-up; one dies there (before saying
    # anything to the parent) with tasks already sent to it: those are dispatched again.
    ex = pool(2, start_method, initializer=tasks.sleep, initargs=(0.5,))
    keys = list(range(20))
    for k in keys:
        ex.queue(k, tasks.record_pid, log, k)
    rec = Recorder(ex)
    rec.run_until(lambda: len(ex.worker_pids()) == 2 and ex.running)
    (w, _) = sorted(ex._workers.values(), key=lambda w: w.wid)
    assert not w.heard  # still in start-up
    os.kill(w.pid, signal.SIGKILL)
    rec.finish()
    return Kills(ex, rec, keys, [w.pid], set(), 2)


def kill_idle(pool, log, start_method) -> Kills:
    ex = pool(2, start_method)
    keys = list(range(30))
    for k in keys[:10]:
        ex.queue(k, tasks.record_pid, log, k)
    rec = Recorder(ex)
    rec.run_until(lambda: not ex.has_work() and len(ex.worker_pids()) == 2)
    victim = ex.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    replace_after_kill(ex, rec, victim, log, keys[10:])
    rec.finish()
    return Kills(ex, rec, keys, [victim], set(), 2)


def kill_mid_task(pool, log, start_method) -> Kills:
    ex = pool(2, start_method, prefetch=2)
    keys = ["blocker", *range(30)]
    ex.queue("blocker", tasks.wait_for, log + ".never")
    for k in keys[1:21]:
        ex.queue(k, tasks.record_pid, log, k, 0.01)
    rec = Recorder(ex)
    rec.run_until(lambda: "blocker" in rec.running_seen)
    victim = worker_running(ex, "blocker")
    os.kill(victim, signal.SIGKILL)
    replace_after_kill(ex, rec, victim, log, keys[21:])
    rec.finish()
    return Kills(ex, rec, keys, [victim], {"blocker"}, 2)


def kill_mid_result_write(pool, log, start_method) -> Kills:
    # An 8 MiB result through one-page pipes (not the shared ring: kill_mid_result_copy
    # is that path): the parent stops reading, the worker blocks in its write with part of
    # the frame delivered, and dies there.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_region, "THRESHOLD", 1 << 62)  # read by each region the pool makes
        return _kill_mid_result_write(pool, log, start_method)


def _kill_mid_result_write(pool, log, start_method) -> Kills:
    ex = pool(2, start_method, pipe_size=PAGE)
    keys = ["big", *range(30)]
    ex.queue("big", tasks.record_big, log, "big", 8 * MiB)
    for k in keys[1:21]:
        ex.queue(k, tasks.record_pid, log, k)
    rec = Recorder(ex)
    rec.run_until(lambda: "big" in rec.running_seen)
    victim = worker_running(ex, "big")
    wait_writing_result(ex, victim)
    for _ in range(3):  # take a few pages of the frame: the parent holds part of it
        ex.sync()
    wait_writing_result(ex, victim)  # and the worker is back in its write
    os.kill(victim, signal.SIGKILL)
    replace_after_kill(ex, rec, victim, log, keys[21:])
    rec.finish()
    return Kills(ex, rec, keys, [victim], {"big"}, 2, {"cause": FrameError})


def kill_mid_result_copy(pool, log, start_method) -> Kills:
    # The shared ring's writer killed half way: a 128 MiB result being copied into the
    # worker's ring (past its warm pages, so page by page, some 0.1 s). The parent watches
    # the ring's memory, stops the worker once the copy is under way and not done, and
    # kills it there: no frame names the torn bytes, so the task is lost as with any
    # death, and the rest runs on. A copy that ends before the stop lands (a machine too
    # loaded) is let go, and the next attempt is watched. Rings of 256 MiB wherever the
    # test runs (without MADV_REMOVE they are only 8 MiB by default).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_region, "RING_SIZE", 256 * MiB)  # read by each region the pool makes
        return _kill_mid_result_copy(pool, log, start_method)


def _kill_mid_result_copy(pool, log, start_method) -> Kills:
    ex = pool(2, start_method)
    keys: list = list(range(20))
    for k in keys:
        ex.queue(k, tasks.record_pid, log, k)
    rec = Recorder(ex)
    sizes = {}
    for attempt in range(5):
        key = f"big{attempt}"
        keys.append(key)
        sizes[key] = 128 * MiB
        ex.queue(key, tasks.record_big, log, key, 128 * MiB)
        rec.run_until(lambda key=key: key in rec.running_seen)
        victim = worker_running(ex, key)
        (region,) = [w.region for w in ex._workers.values() if w.pid == victim]
        if stop_mid_copy(region, victim, 128 * MiB):
            break
        os.kill(victim, signal.SIGCONT)
        rec.run_until(lambda key=key: key in rec.terminal)
    else:
        raise AssertionError("no attempt stopped the worker in the middle of its copy")
    os.kill(victim, signal.SIGKILL)
    replace_after_kill(ex, rec, victim, log, more := list(range(20, 30)))
    keys += more
    rec.finish()
    return Kills(ex, rec, keys, [victim], {key}, 2, {"sizes": sizes})


def stop_mid_copy(region, pid: int, size: int) -> bool:
    """SIGSTOP ``pid`` while it copies a ``size``-byte result into the empty outcome
    ring of ``region`` (the parent's mapping of the same memory): True if it stopped with
    the copy's start written and its end not yet."""
    base = region.inbound.base  # an empty ring places at 0; a fresh one is all zeros
    head = slice(base + PAGE, base + 2 * PAGE)  # the result's bytes: past the headers
    tail = slice(base + size - PAGE, base + size)  # and before its end
    zero = bytes(PAGE)
    deadline = time.monotonic() + 60
    while region.view[head].tobytes() == zero:
        assert time.monotonic() < deadline, "the worker never began copying its result"
    os.kill(pid, signal.SIGSTOP)
    while proc_table.state(pid) != "T":
        assert time.monotonic() < deadline, "the worker never stopped"
        time.sleep(0.001)
    return region.view[tail].tobytes() == zero


def replace_after_kill(ex: LocalExecutor, rec: Recorder, victim: int, log: str, keys) -> None:
    """Once the parent has seen the victim die, queue ``keys`` and see the pool back at
    full strength through a new worker (workers start only while work is outstanding,
    invariant 4: work queued before the death is noticed may all go to the survivors)."""
    started = ex.stats()["workers_started"]
    rec.run_until(lambda: victim not in ex.worker_pids())
    for k in keys:
        ex.queue(k, tasks.record_pid, log, k, 0.005)
    rec.run_until(
        lambda: ex.stats()["workers_started"] > started and len(ex.worker_pids()) == ex.parallelism
    )


def wait_writing_result(ex: LocalExecutor, pid: int) -> None:
    """Until worker ``pid`` is inside the write of its 8 MiB result: its result pipe holds
    more than any other frame of these tests could (1 KiB), so that frame is on its way,
    and as it is far bigger than a pipe, its writer cannot be done (it is blocked on the
    full pipe, or about to be). FIONREAD on the parent's end of the pipe: the same check
    on every Unix, no /proc."""
    (worker,) = (w for w in ex._workers.values() if w.pid == pid)
    deadline = time.monotonic() + 30
    while True:
        if unread_bytes(worker.fds[1]) > 1024:
            return
        assert time.monotonic() < deadline, "the worker never began writing its result"
        time.sleep(0.005)


def kill_storm(pool, log, start_method) -> Kills:
    # Random kills at random moments of a stream of small tasks and 512 KiB results, so
    # they land before, during and after tasks, and inside result writes. Only workers
    # past start-up are picked: a worker dying before its first frame counts as a
    # start-up failure (see test_initializer_failure_backs_off), the "startup" case.
    rng = random.Random(8)
    par = 3
    ex = pool(par, start_method, prefetch=2, pipe_size=PAGE)
    n = 800
    kill_budget = 12 if start_method == "fork" else 6
    keys = list(range(n))
    big = set(range(0, n, 10))
    for k in keys:
        if k in big:
            ex.queue(k, tasks.record_big, log, k, 512 * 1024)
        else:
            ex.queue(k, tasks.record_pid, log, k, rng.uniform(0, 0.01))
    rec = Recorder(ex)
    victims: list[int] = []
    next_kill = time.monotonic() + rng.uniform(0.02, 0.06)
    deadline = time.monotonic() + 100
    while ex.has_work():
        assert time.monotonic() < deadline, f"wedged: {ex.stats()}"
        rec.round(0.005)
        outstanding = ex.stats()["tasks_queued"] + ex.stats()["tasks_running"]
        if (
            len(victims) < kill_budget and time.monotonic() >= next_kill and outstanding > 150
        ):  # a replacement will be wanted: work remains
            heard = [
                w.pid
                for w in ex._workers.values()  # not killed already
                if w.heard and not w.closing and w.pid not in victims
            ]
            if heard:
                victims.append(rng.choice(heard))
                os.kill(victims[-1], signal.SIGKILL)
            next_kill = time.monotonic() + rng.uniform(0.02, 0.06)
    rec.finish()
    assert len(victims) == kill_budget
    return Kills(ex, rec, keys, victims, None, par, {"big": big, "exact_starts": True})


KILL_POINTS = {
    "startup": (kill_at_startup, START_METHODS),
    "idle": (kill_idle, ["fork"]),
    "mid-task": (kill_mid_task, ["fork"]),
    "mid-result-write": (kill_mid_result_write, ["fork"]),
    "mid-result-copy": (kill_mid_result_copy, START_METHODS),
    "random-storm": (kill_storm, START_METHODS),
}


# The points the portable pass runs (.ci/portable): FIONREAD, and ps in place of /proc.
PORTABLE_POINTS = ("mid-result-write", "mid-result-copy")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("point", "start_method"),
    [
        pytest.param(p, m, id=f"{p}-{m}", marks=[pytest.mark.portable] * (p in PORTABLE_POINTS))
        for p, (_, methods) in KILL_POINTS.items()
        for m in methods
    ],
)
def test_worker_killed(pool, tmp_path, point, start_method):
    """No other task affected (every other one succeeded and ran exactly once), a dead
    worker's started task failed as lost with its pid and SIGKILL and was not run again,
    replacements were started, nothing wedged (each scenario is bounded)."""
    log = str(tmp_path / "runs.log")
    kills = KILL_POINTS[point][0](pool, log, start_method)
    ex, rec = kills.ex, kills.rec
    exactly_one_each(rec, kills.keys)
    lost = failures(rec)
    if kills.lost is not None:
        assert set(lost) == kills.lost
    per_victim = Counter(
        e.exception.pid for e in lost.values() if isinstance(e.exception, WorkerLostError)
    )
    assert all(n == 1 for n in per_victim.values())  # a worker runs one task at a time
    for key, event in lost.items():
        error = event.exception
        assert isinstance(error, WorkerLostError), (key, error)
        assert error.pid in kills.victims and error.signal == "SIGKILL"
        if "cause" in kills.extra:  # it died with part of its result frame delivered
            assert isinstance(error.__cause__, kills.extra["cause"]), error.__cause__
    ran = runs(log)
    big = kills.extra.get("big", set())
    for key, event in rec.terminal.items():
        if key in lost:
            assert ran[str(key)] <= 1, f"lost task {key} ran {ran[str(key)]} times"
            continue
        assert ran[str(key)] == 1, f"task {key} ran {ran[str(key)]} times"
        if key in big or key == "big":
            assert len(event.result) == (512 * 1024 if key in big else 8 * MiB)
        elif key in kills.extra.get("sizes", {}):
            assert event.result == tasks.record_big(os.devnull, key, kills.extra["sizes"][key])
        elif key != "blocker":
            assert event.result == event.pid  # record_pid returns the pid that ran it
    stats = ex.stats()
    assert stats["workers_started"] >= kills.parallelism + len(kills.victims)
    if kills.extra.get("exact_starts"):
        assert stats["workers_started"] == kills.parallelism + len(kills.victims)
        assert stats["worker_crashes"] == len(kills.victims)
        assert stats["tasks_lost"] == len(lost)


# -- 4. The parent SIGKILLed 0-50 ms after it created the pool --------------------------

PARENT_SOON = textwrap.dedent("""
    import sys
    sys.path[:0] = {path!r}
    import tasks
    from pipepool import LocalExecutor

    if __name__ == "__main__":
        ex = LocalExecutor(8, start_method={method!r}, loop_impl={impl!r})
        ex.start()
        for i in range(8):
            ex.queue(i, tasks.sleep, 60)
        print("created", flush=True)
        while True:
            ex.sync(timeout=0.01)
""")


@pytest.mark.portable  # on the pure loop only there (.ci/portable's -k): ps -E/e
@pytest.mark.timeout(60)
@pytest.mark.parametrize("delay_ms", [0, 10, 25, 50])
def test_parent_killed_soon_after_creation(impl, start_method, delay_ms):
    """Whatever had started (workers, a forkserver and its children, half-started spawn
    children) is gone within 2 s of the parent's SIGKILL: found by an environment marker,
    so a re-parented orphan cannot hide from the check."""
    marker = f"PIPEPOOL_HARDENING_MARKER={uuid.uuid4().hex}"
    name, value = marker.split("=")
    script = PARENT_SOON.format(path=[HERE, *sys.path], method=start_method, impl=impl)
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, name: value},
    )
    before: set[int] = set()
    try:
        assert proc.stdout.readline().strip() == "created"
        time.sleep(delay_ms / 1000)
        if delay_ms:  # what is there to outlive the parent (a /proc scan: about 5 ms, ps about 20)
            before = proc_table.with_environ(marker) - {proc.pid}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc.stdout.close()
    if delay_ms == 50:
        assert before, "nothing had started 50 ms after the pool: the check is vacuous"
    deadline = orphan_deadline()  # 2 s, and what a loaded machine delays a new process by
    while (left := proc_table.with_environ(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    assert not left, (
        f"{delay_ms} ms: outlived the parent by 2 s (once it could run): "
        f"{[(p, proc_table.cmdline(p)[:80]) for p in left]} "
        f"({len(before)} were alive at the kill)"
    )


# -- 5. The initializer raises --------------------------------------------------------


@pytest.mark.timeout(60)
def test_initializer_failure_backs_off(pool, start_method, tmp_path):
    """Queued work fails with a clear InitializerError (naming the initializer and its
    exception, with the worker's traceback as cause) after INIT_RETRIES rounds, the
    rounds spaced by a real, doubling back-off; afterwards no worker is ever started."""
    from pipepool import executor

    log = str(tmp_path / "init.log")
    par = 3
    ex = pool(par, start_method, initializer=tasks.stamp_and_fail_init, initargs=(log,))
    for i in range(5):
        ex.queue(i, tasks.echo, i)
    rec = Recorder(ex)
    rec.run_until(lambda: not ex.has_work(), limit=50)
    exactly_one_each(rec, range(5))
    for event in rec.terminal.values():
        error = event.exception
        assert isinstance(error, InitializerError), error
        assert "stamp_and_fail_init" in str(error) and "initializer says no" in str(error)
        assert f"failed in {executor.INIT_RETRIES} workers in a row" in str(error)
        assert isinstance(error.__cause__, RuntimeError)
        assert isinstance(error.__cause__.__cause__, RemoteTraceback)
    with open(log) as f:
        stamps = sorted(float(line.split()[0]) for line in f)
    # Round 1 starts every worker at once; each later round is one probe, started only
    # after the back-off that followed the failure before it.
    assert len(stamps) == par + executor.INIT_RETRIES - 1
    probes = stamps[par:]
    gaps = [probes[0] - stamps[0], *(b - a for a, b in itertools.pairwise(probes))]
    for i, gap in enumerate(gaps):
        assert gap >= executor.INIT_BACKOFF * 2**i, (i, gaps)
    # Broken now: new work fails at once, and no worker is started for it.
    started = ex.stats()["workers_started"]
    assert started == len(stamps)
    ex.queue("late", tasks.echo, 1)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.0:
        rec.round(0.05)
    assert isinstance(rec.terminal["late"].exception, InitializerError)
    assert ex.stats()["workers_started"] == started and ex.broken is not None


# -- 6. The initializer takes 10 s ----------------------------------------------------


@pytest.mark.timeout(90)
def test_slow_initializer_is_not_respawned(tmp_path):
    """No start-up timeout kills a slow worker: each of the two workers of each loop
    implementation runs the 10 s initializer once, then all the work (both pools are
    driven side by side so the 10 s are paid once)."""
    pools = {}
    try:
        for impl in implementations():
            log = str(tmp_path / f"init-{impl}.log")
            ex = LocalExecutor(
                2,
                start_method="fork",
                loop_impl=impl,
                initializer=tasks.slow_init,
                initargs=(log, 10.0),
            )
            ex.start()
            for i in range(6):
                ex.queue(i, tasks.get_flag)
            pools[impl] = (ex, Recorder(ex), log)
        t0 = time.monotonic()
        while any(ex.has_work() for ex, _, _ in pools.values()):
            assert time.monotonic() - t0 < 60, {i: p[0].stats() for i, p in pools.items()}
            for ex, rec, _ in pools.values():
                rec.round(0.05)
                stats = ex.stats()
                assert stats["workers_started"] <= 2 and stats["worker_crashes"] == 0
        assert time.monotonic() - t0 >= 10.0
        for ex, rec, log in pools.values():
            exactly_one_each(rec, range(6))
            assert {e.result for e in rec.terminal.values()} == {"ready"}
            assert sum(runs(log).values()) == 2  # one initializer run per worker, no re-run
            assert ex.stats()["workers_started"] == 2
    finally:
        for ex, _, _ in pools.values():
            ex.terminate()
