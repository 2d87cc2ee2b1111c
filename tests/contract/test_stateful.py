"""A hypothesis state machine drives a real LocalExecutor (fork, both loops) and checks
the invariants (docs/design.md, "Invariants") after every step against a model of what each key must
end as. The steps cover the executor's whole life of a task: queue; dispatch and worker
start (``sync``); complete (ok), fail (the task raises), undo (an argument that cannot be
pickled fails at dispatch; a frame half written to a killed worker is dispatched again),
cancel (still queued), worker death (killed from outside, a task that exits, a timeout,
recycling after ``max_tasks_per_child``) and interrupts (SIGALRM raising in ``sync``).
Tasks travel in BATCH frames (``prefetch=3``); an argument the worker cannot unpickle
makes it refuse its whole batch, which the parent resends one call per frame.

Start marks (docs/design.md, "Start marks") are modelled after every step: a worker's
tasks in flight are numbered in dispatch order, exactly those up to the last mark the
parent read count as started, and the shared mark itself never goes back.

After every step: each key in exactly one place, no terminal event twice, ``stats()``
agreeing with the events seen. After every uninterrupted ``sync``: as many live workers
as outstanding work calls for, up to ``parallelism`` (invariant 4)."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import CancelledError

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import tasks
from helpers import Recorder
from pipepool import (
    InitializerError,
    LocalExecutor,
    State,
    TaskPicklingError,
    TaskTimeoutError,
    TaskUnpicklingError,
    WorkerLostError,
)

# What a key may end as, by how it was queued.
OK, BAD_ARG, CRASH, SLOW, RAISES = "ok", "bad-arg", "crash", "slow", "raises"
BAD_IN_WORKER = "bad-in-worker"  # pickles in the parent, cannot be unpickled in the worker
CANCELLED = "cancelled"  # an OK key that cancel() took off the queue


class Interrupt(KeyboardInterrupt):
    pass


def _raise_interrupt(*_):
    raise Interrupt


class ExecutorMachine(RuleBasedStateMachine):
    impl = "python"
    max_tasks_per_child: int | None = None

    def __init__(self) -> None:
        super().__init__()
        self.ex = LocalExecutor(
            2,
            start_method="fork",
            prefetch=3,
            pipe_size=4096,
            max_tasks_per_child=self.max_tasks_per_child,
            loop_impl=self.impl,
        )
        self.ex.start()
        self.rec = Recorder(self.ex)
        self.kinds: dict[int, str] = {}
        self.next_key = 0
        self.killed_any = False
        self.previous = signal.signal(signal.SIGALRM, _raise_interrupt)

    def _queue(self, kind: str, size: int = 0) -> None:
        key = self.next_key
        self.next_key += 1
        self.kinds[key] = kind
        if kind == OK:
            self.ex.queue(key, tasks.echo, (key, b"p" * size))
        elif kind == BAD_ARG:
            self.ex.queue(key, tasks.echo, tasks.Unpicklable())
        elif kind == CRASH:
            self.ex.queue(key, tasks.exit_process, 3)
        elif kind == RAISES:
            self.ex.queue(key, tasks.raise_value_error, f"fails {key}")
        elif kind == BAD_IN_WORKER:
            self.ex.queue(key, tasks.echo, tasks.UnpicklableInParent())
        else:
            self.ex.queue_call(key, tasks.sleep, (30,), timeout=0.2)

    @rule(count=st.integers(1, 40), size=st.sampled_from([0, 100, 5000, 70000]))
    def queue_ok(self, count: int, size: int) -> None:
        for _ in range(count):
            self._queue(OK, size)

    @rule(kind=st.sampled_from([BAD_ARG, CRASH, SLOW, RAISES, BAD_IN_WORKER]))
    def queue_troublemaker(self, kind: str) -> None:
        self._queue(kind)

    @rule(pick=st.integers(0, 1000))
    def cancel(self, pick: int) -> None:
        # Among the keys still queued right now (timing-dependent, so drawn as an index).
        queued = sorted(k for k in self.ex.queued if self.kinds[k] == OK)
        if queued:
            key = queued[pick % len(queued)]
            assert self.ex.cancel(key) == 1
            self.kinds[key] = CANCELLED
            self.rec.take()

    @rule(rounds=st.integers(1, 5))
    def sync(self, rounds: int) -> None:
        for _ in range(rounds):
            self.rec.round(0.005)
        self.check_enough_workers()

    def check_enough_workers(self) -> None:
        """Invariant 4, right after an uninterrupted sync: while work is outstanding and
        fewer than ``parallelism`` workers live, the loop starts more. Not while the pool
        backs off after a start-up failure (a worker killed before its first frame)."""
        ex = self.ex
        if ex._init_failures or ex.broken is not None or time.monotonic() < ex._init_retry_at:
            return
        stats = ex.stats()
        outstanding = stats["tasks_queued"] + stats["tasks_running"]
        assert stats["workers_alive"] >= min(ex.parallelism, outstanding), stats
        assert stats["workers_alive"] <= ex.parallelism, stats

    @rule(delay=st.floats(0.00005, 0.003))
    def interrupted_sync(self, delay: float) -> None:
        try:
            signal.setitimer(signal.ITIMER_REAL, delay)
            self.ex.sync(timeout=0.004)
            signal.setitimer(signal.ITIMER_REAL, 0)
        except Interrupt:
            signal.setitimer(signal.ITIMER_REAL, 0)
        self.rec.take()

    @rule(pick=st.integers(0, 7))
    def kill_a_worker(self, pick: int) -> None:
        # Which workers are alive depends on timing, so the draw must not: a fixed-range
        # integer picks among whatever is alive (hypothesis needs replayable draws).
        pids = sorted(self.ex.worker_pids())
        if pids:
            try:
                os.kill(pids[pick % len(pids)], signal.SIGKILL)
            except ProcessLookupError:
                return  # it exited on its own (recycled) and was reaped since the listing
            self.killed_any = True

    @invariant()
    def each_key_in_exactly_one_place(self) -> None:
        queued, running, reported = self.ex.queued, self.ex.running, set(self.rec.terminal)
        assert not (queued & running) and not (queued & reported) and not (running & reported)
        assert queued | running | reported == set(self.kinds)
        assert not self.rec.duplicates
        stats = self.ex.stats()
        assert min(v for k, v in stats.items() if k != "last_progress") >= 0
        assert (
            stats["tasks_queued"]
            + stats["tasks_running"]
            + stats["tasks_done"]
            + stats["tasks_failed"]
        ) == len(self.kinds)
        # The counters agree with the events: every rule that can produce one takes them.
        states = [e.state for e in self.rec.terminal.values()]
        assert stats["tasks_done"] == states.count(State.SUCCESS)
        assert stats["tasks_failed"] == states.count(State.FAILED)
        lost = sum(isinstance(e.exception, WorkerLostError) for e in self.rec.terminal.values())
        assert stats["tasks_lost"] == lost

    @invariant()
    def start_marks_agree(self) -> None:
        ex = self.ex
        for w in ex._workers.values():
            seqs = [t.seq for t in w.in_flight.values()]
            assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
            for t in w.in_flight.values():
                assert t.started == (t.seq <= w.mark), (t.key, t.seq, w.mark, t.started)
            assert ex._marks.read(w.slot) >= w.mark  # the shared mark never goes back
        slots = [w.slot for w in ex._workers.values()]
        assert len(set(slots)) == len(slots)  # no two live workers share a slot

    def teardown(self) -> None:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.rec.finish(limit=60)
            assert set(self.rec.terminal) == set(self.kinds)
            for key, kind in self.kinds.items():
                event = self.rec.terminal[key]
                error = event.exception
                if isinstance(error, InitializerError):
                    # By design: three workers in a row killed before their first frame
                    # read as a pool that cannot start workers (executor._retire).
                    assert self.killed_any and self.ex.broken is error
                    assert "during start-up" in str(error)
                elif kind == CANCELLED:
                    assert isinstance(error, CancelledError)
                elif kind == RAISES:
                    if not (self.killed_any and isinstance(error, WorkerLostError)):
                        assert type(error) is ValueError and str(error) == f"fails {key}"
                elif kind == BAD_ARG:
                    assert isinstance(error, TaskPicklingError)
                elif kind == BAD_IN_WORKER:
                    if not (self.killed_any and isinstance(error, WorkerLostError)):
                        assert isinstance(error, TaskUnpicklingError), error
                elif kind == CRASH:
                    assert isinstance(error, WorkerLostError) and error.exitcode in (3, -9)
                elif kind == SLOW:
                    assert isinstance(error, TaskTimeoutError | WorkerLostError)
                elif event.state is State.SUCCESS:
                    assert event.result[0] == key
                else:  # an ok task fails only when a worker we killed was running it
                    assert self.killed_any and isinstance(error, WorkerLostError), error
        finally:
            signal.signal(signal.SIGALRM, self.previous)
            self.ex.terminate()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("max_tasks_per_child", [None, 3], ids=["long-lived", "recycled"])
def test_bookkeeping_state_machine(impl, max_tasks_per_child):
    machine = type(
        f"Machine_{impl}",
        (ExecutorMachine,),
        {"impl": impl, "max_tasks_per_child": max_tasks_per_child},
    )
    runner = settings(
        max_examples=15,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )(machine).TestCase
    runner().runTest()
