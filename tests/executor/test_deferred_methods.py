"""Public methods that change more than one piece of bookkeeping run under the round's
signal deferral (issue 30): a real SIGALRM, raised at every line in turn inside the
method, lands after it, never inside, so counts and deadlines are whole afterwards."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

import tasks
from helpers import Recorder
from pipepool import LocalExecutor, State

pytestmark = pytest.mark.timeout(120)

SOURCE = str(Path(__import__("pipepool").__file__).parent)


class Interrupt(KeyboardInterrupt):
    pass


@pytest.fixture
def alarm():
    """SIGALRM raises Interrupt, as the existing interrupt tests' Ctrl-C stand-in."""

    def raise_interrupt(*_):
        raise Interrupt

    previous = signal.signal(signal.SIGALRM, raise_interrupt)
    yield
    signal.signal(signal.SIGALRM, previous)


def call_interrupted_at(line: int, call) -> bool:
    """Run ``call()``, sending this process a real SIGALRM at the ``line``-th line it
    runs in pipepool's source (but the deferral's own); True if the signal was sent
    (the call was long enough)."""
    count = 0
    sent = False

    def tracer(frame, event, arg):
        nonlocal count, sent
        name = frame.f_code.co_filename
        if not name.startswith(SOURCE) or name.endswith("_signals.py"):
            return None  # the deferral's own lines: not the bookkeeping it guards
        if event == "line" and not sent:
            count += 1
            if count == line:
                sent = True
                signal.raise_signal(signal.SIGALRM)
        return tracer

    sys.settrace(tracer)
    try:
        call()
    except Interrupt:
        pass
    finally:
        sys.settrace(None)
    return sent


def every_line(setup, call, check, limit: int = 400, step: int = 1) -> int:
    """``setup()``, then ``call`` interrupted at line 1, 1 + step, ... until it runs
    whole; ``check()`` after each. Returns how many points were tried."""
    for line in range(1, limit, step):
        setup()
        if not call_interrupted_at(line, call):
            check()
            return line
        check()
    raise AssertionError(f"the call still ran past {limit} lines")


def timed_ok(ex: LocalExecutor) -> None:
    """Every task whose start mark was read is started, and every started task with a
    timeout has a deadline and is watched for it."""
    for w in ex._workers.values():
        for t in w.in_flight.values():
            assert t.started or t.seq > w.mark, f"{t.key}: its mark was read, not started"
            if t.started and t.timeout is not None:
                assert t.deadline is not None and ex._timed.get(t.tid) is t, t.key


@pytest.mark.parametrize("impl", ["python", "cython"])
def test_kill_interrupted_anywhere_leaves_deadlines_whole(alarm, impl, tmp_path):
    """kill() reads the start marks (a started task gets its deadline): a signal inside
    it must not leave a started task whose timeout never fires."""
    ex = LocalExecutor(1, start_method="fork", prefetch=1, loop_impl=impl)
    ex.start()
    try:
        keys = iter(range(10**6))

        def setup() -> None:
            """A timed task that has begun, its start mark not yet read by the parent."""
            while True:
                while ex.has_work():
                    ex.kill(next(iter(ex.running), None))
                    ex.sync(timeout=0.01)
                ex.get_event_buffer()
                ex.queue_call(next(keys), tasks.sleep, (30,), timeout=30)
                deadline = time.monotonic() + 30
                while not (sent := [w for w in ex._workers.values() if w.in_flight]):
                    assert time.monotonic() < deadline
                    ex.sync(timeout=0.001)
                (w,) = sent
                (t,) = w.in_flight.values()
                while not t.started and ex._marks.read(w.slot) == w.mark:
                    assert time.monotonic() < deadline
                    time.sleep(0.001)  # no round: that would read the mark itself
                if not t.started:  # (else a round read its mark already: again)
                    return

        tried = every_line(setup, lambda: ex.kill("nobody"), lambda: timed_ok(ex))
        assert tried > 5
    finally:
        ex.terminate()


@pytest.mark.parametrize("impl", ["python", "cython"])
def test_cancel_and_kill_interrupted_anywhere_keep_every_dispatch_counted(alarm, impl, tmp_path):
    """cancel() of a key with dispatches queued and sent ahead, kill() of one running:
    interrupted at every line, each dispatch still ends exactly once."""
    release = str(tmp_path / "release")
    ex = LocalExecutor(1, start_method="fork", prefetch=3, loop_impl=impl)
    ex.start()
    try:
        rec = Recorder(ex)
        rounds = iter(range(10**6))
        queued: list[str] = []

        def setup() -> None:
            key = f"k{next(rounds)}"
            queued.append(key)
            ex.queue(key, tasks.wait_for, release, 1)
            rec.run_until(lambda: key in rec.running_seen)
            for i in range(2, 6):  # sent ahead (prefetch 3), then queued
                ex.queue(key, tasks.wait_for, release, i)
            rec.round()

        def check() -> None:
            key = queued[-1]
            places = [t for t in ex._queue if t.key == key]
            places += [t for t in ex._dispatched() if t.key == key]
            ended = [e for e in ex._events.values() if e.key == key] + ex._later.get(key, [])
            assert len(places) + len(ended) + len(rec.outcomes[key]) == 5
            ex.kill(key)
            ex.cancel(key)
            rec.run_until(lambda: len(rec.outcomes[key]) == 5)
            assert sorted(e.dispatch for e in rec.outcomes[key]) == [1, 2, 3, 4, 5]
            assert ex._outstanding.get(key) is None and key not in ex.running

        def both() -> None:
            key = queued[-1]
            ex.cancel(key)
            ex.kill(key)

        tried = every_line(setup, both, check, step=3)  # ~180 lines, a worker each
        assert tried > 30 and not rec.duplicates
    finally:
        ex.terminate()


def test_get_event_buffer_interrupted_anywhere_drops_no_event(alarm):
    """Events of three dispatches of a key waiting their turn: however the handing out
    is interrupted, the ones left are handed out once each, in order."""
    with LocalExecutor(2, start_method="fork", loop_impl="python") as ex:
        run = iter(range(10**6))
        handed: list[tuple[int, int]] = []
        state: dict[str, int] = {}

        def setup() -> None:
            state["key"] = key = next(run)
            for i in range(3):
                ex.queue(key, tasks.echo, i)
            while ex.has_work():
                ex.sync(timeout=0.01)
            assert len(ex._later[key]) == 2

        def take() -> None:
            handed.extend((k, e.dispatch) for k, e in ex.get_event_buffer().items())

        def setup_and_forget() -> None:
            setup()
            handed.clear()

        def check() -> None:
            key = state["key"]
            while key in ex._events:
                take()
            got = [d for k, d in handed if k == key]
            # The interrupted call's own result is lost with its return (the signal
            # raises as it returns); nothing else is, and the rest come in order.
            assert len(set(got)) == len(got) in (2, 3) and set(got) <= {1, 2, 3}, got
            assert ex._later == {} and ex._events == {}

        assert every_line(setup_and_forget, take, check) > 3


def test_queue_call_of_an_outstanding_key_interrupted_anywhere_counts_once(alarm):
    """queue_call() of a key with a dispatch outstanding changes the count, the newest
    dispatch and the queue: interrupted anywhere, it queued the dispatch whole or not."""
    with LocalExecutor(2, start_method="fork", loop_impl="python") as ex:
        rec = Recorder(ex)
        run = iter(range(10**6))
        state: dict[str, int] = {}

        def setup() -> None:
            state["key"] = key = next(run)
            ex.queue(key, tasks.echo, "first")

        def check() -> None:
            key = state["key"]
            queued = sum(t.key == key for t in ex._queue)
            assert queued in (1, 2)
            assert ex._outstanding.get(key, 1) == queued
            rec.run_until(lambda: len(rec.outcomes[key]) == queued)
            assert sorted(e.dispatch for e in rec.outcomes[key]) == list(range(1, queued + 1))
            assert all(e.state is State.SUCCESS for e in rec.outcomes[key])
            assert key not in ex._held and key not in ex._outstanding

        def again() -> None:
            ex.queue_call(state["key"], tasks.echo, ("second",))

        assert every_line(setup, again, check) > 3
