"""A hypothesis state machine drives a real LocalExecutor (fork, both loops) through
queue, sync, worker kills, interrupts and re-queued keys, and checks the invariants of
DESIGN.md after every step against a simple model of what each key must end as."""

from __future__ import annotations

import os
import signal

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import tasks
from executor_helpers import Recorder
from pipepool import (
    LocalExecutor,
    State,
    TaskPicklingError,
    TaskTimeoutError,
    WorkerLostError,
)

# What a key may end as, by how it was queued.
OK, BAD_ARG, CRASH, SLOW = "ok", "bad-arg", "crash", "slow"


class Interrupt(KeyboardInterrupt):
    pass


def _raise_interrupt(*_):
    raise Interrupt


class ExecutorMachine(RuleBasedStateMachine):
    impl = "python"

    def __init__(self) -> None:
        super().__init__()
        self.ex = LocalExecutor(2, start_method="fork", prefetch=3, pipe_size=4096,
                                _loop_impl=self.impl)
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
        else:
            self.ex.queue_call(key, tasks.sleep, (30,), timeout=0.2)

    @rule(count=st.integers(1, 40), size=st.sampled_from([0, 100, 5000, 70000]))
    def queue_ok(self, count: int, size: int) -> None:
        for _ in range(count):
            self._queue(OK, size)

    @rule(kind=st.sampled_from([BAD_ARG, CRASH, SLOW]))
    def queue_troublemaker(self, kind: str) -> None:
        self._queue(kind)

    @rule(rounds=st.integers(1, 5))
    def sync(self, rounds: int) -> None:
        for _ in range(rounds):
            self.rec.round(0.005)

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
            os.kill(pids[pick % len(pids)], signal.SIGKILL)
            self.killed_any = True

    @invariant()
    def each_key_in_exactly_one_place(self) -> None:
        queued, running, reported = self.ex.queued, self.ex.running, set(self.rec.terminal)
        assert not (queued & running) and not (queued & reported) and not (running & reported)
        assert queued | running | reported == set(self.kinds)
        assert not self.rec.duplicates
        stats = self.ex.stats()
        assert min(v for k, v in stats.items() if k != "last_progress") >= 0
        assert (stats["tasks_queued"] + stats["tasks_running"] + stats["tasks_done"]
                + stats["tasks_failed"]) == len(self.kinds)

    def teardown(self) -> None:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.rec.finish(limit=60)
            assert set(self.rec.terminal) == set(self.kinds)
            for key, kind in self.kinds.items():
                event = self.rec.terminal[key]
                error = event.exception
                if kind == BAD_ARG:
                    assert isinstance(error, TaskPicklingError)
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
def test_bookkeeping_state_machine(impl):
    machine = type(f"Machine_{impl}", (ExecutorMachine,), {"impl": impl})
    runner = settings(max_examples=15, stateful_step_count=25, deadline=None,
                      suppress_health_check=list(HealthCheck))(machine).TestCase
    runner().runTest()
