"""The two ways a task's outcome leaves a LocalExecutor (``pipepool._bookkeeping``, "Two ways
out"): the event buffer, and the task records a face keeps (a ProcessPoolExecutor's
futures). They agree on every outcome, and the bulk paths keep the order things
happened in: frames are applied in arrival order, and a face settles a round's starts
before its outcomes."""

from __future__ import annotations

import os
import pickle
import time
from concurrent.futures import CancelledError

import pytest

import futures_tasks as ft
from pipepool import LocalExecutor
from pipepool._outcome import encode_failure
from pipepool._task import Task
from pipepool.events import State
from pipepool.executor import RecordExecutor
from pipepool.executor._state import _Worker
from pipepool.frames import ELAPSED, PICKLE_PROTOCOL, Kind
from pipepool.futures._driver import Driver
from pipepool.futures._item import PoolFuture

WAIT = 30.0


def unpicklable_result():
    import threading

    return threading.Lock()


# key -> (function, args): each kind of outcome a worker can report, and a cancel.
WORKLOAD = {
    "ok": (abs, (-3,)),
    "raises": (ft.square, ("not a number",)),
    "bad-argument": (abs, (pytest,)),  # a module: cannot be pickled
    "bad-result": (unpicklable_result, ()),
    "exits": (os._exit, (3,)),
    "cancelled": (ft.sleep_return, (0.01, "never")),
}


def outcome(failed: bool, value: object) -> tuple:
    """What the comparison keeps of an outcome: the result, or the error's type."""
    return ("failed", type(value).__name__) if failed else ("ok", value)


def run_with_events(impl: str) -> dict[str, tuple]:
    ex = LocalExecutor(1, start_method="fork", loop_impl=impl)
    ex.start()
    try:
        ex.queue("blocker", ft.sleep_return, 0.2, "blocker")
        for key, (fn, args) in WORKLOAD.items():
            ex.queue(key, fn, *args)
        ex.cancel("cancelled")
        got: dict[str, tuple] = {}
        deadline = time.monotonic() + WAIT
        while len(got) < len(WORKLOAD) + 1 and time.monotonic() < deadline:
            ex.sync(timeout=0.1)
            for key, event in ex.get_event_buffer().items():
                if event.state.terminal:
                    failed = event.state is State.FAILED
                    got[key] = outcome(failed, event.exception if failed else event.result)
        return got
    finally:
        ex.terminate()


def run_with_records(impl: str) -> dict[str, tuple]:
    ex = RecordExecutor(1, start_method="fork", loop_impl=impl)
    ex.start()
    try:
        records = {"blocker": Task(1, "blocker", ft.sleep_return, (0.2, "blocker"), {}, None)}
        for tid, (key, (fn, args)) in enumerate(WORKLOAD.items(), start=2):
            records[key] = Task(tid, key, fn, args, {}, None)
        ex.hand_over(list(records.values()))
        ex.cancel_tasks([records["cancelled"]])
        got: dict[str, tuple] = {}
        deadline = time.monotonic() + WAIT
        while len(got) < len(records) and time.monotonic() < deadline:
            ex.sync(timeout=0.1)
            settled, _began = ex.take_records()
            for t in settled:
                got[t.key] = outcome(t.failed, t.value)
        return got
    finally:
        ex.terminate()


@pytest.mark.timeout(120)
def test_the_two_ways_out_agree(impl):
    events = run_with_events(impl)
    assert len(events) == len(WORKLOAD) + 1, events
    assert events["ok"] == ("ok", 3) and events["blocker"] == ("ok", "blocker")
    assert events["cancelled"] == ("failed", "CancelledError")
    assert run_with_records(impl) == events


# -- the bulk paths keep the order ------------------------------------------------------


class FakeProcess:
    pid = 4_000_000  # never signalled: these executors are never started
    exitcode = None


def executor_with_workers(records: bool, count: int = 2) -> LocalExecutor:
    """A LocalExecutor never started, with ``count`` worker records to apply frames to."""
    ex = RecordExecutor(count) if records else LocalExecutor(count)
    for wid in range(1, count + 1):
        ex._workers[wid] = _Worker(wid, FakeProcess(), (-1, -1), -1, -1, wid, 0)  # type: ignore[arg-type]
    return ex


def sent(ex: LocalExecutor, wid: int, tid: int) -> Task:
    """A task as dispatch leaves it: running, in the worker's ``in_flight``."""
    t = Task(tid, f"k{tid}", abs, (tid,), {}, None)
    t.phase = 1  # RUNNING
    ex._workers[wid].in_flight[tid] = t
    return t


def done(wid: int, tid: int, value: object) -> tuple:
    return (wid, int(Kind.DONE), tid, ELAPSED.pack(1e-6) + pickle.dumps(value, PICKLE_PROTOCOL))


def raised(wid: int, tid: int) -> tuple:
    payload = pickle.dumps(encode_failure(ValueError("no")), PICKLE_PROTOCOL)
    return (wid, int(Kind.RAISED), tid, payload)


def init_failed(wid: int) -> tuple:
    payload = pickle.dumps(encode_failure(RuntimeError("initializer")), PICKLE_PROTOCOL)
    return (wid, int(Kind.INIT_FAILED), 0, payload)


@pytest.mark.parametrize("records", [False, True], ids=["events", "records"])
def test_outcomes_are_recorded_in_the_order_their_frames_came(records):
    ex = executor_with_workers(records)
    for tid in range(1, 6):
        sent(ex, 1 + tid % 2, tid)
    frames = [done(2, 1, 1), done(1, 2, 2), raised(1, 4), done(1, 6, "gone"), done(2, 3, 3)]
    frames.append(done(2, 5, 5))
    ex._apply(frames, time.monotonic())
    if records:
        settled, _ = ex.take_records()
        order = [(t.key, t.failed) for t in settled]
    else:
        order = [(key, e.state is State.FAILED) for key, e in ex.get_event_buffer().items()]
    # (tid 6 was never sent: its outcome counts for nothing)
    assert order == [("k1", False), ("k2", False), ("k4", True), ("k3", False), ("k5", False)]
    assert ex.stats()["tasks_done"] == 4 and ex.stats()["tasks_failed"] == 1


def test_a_task_that_ran_resets_the_initializer_count_only_where_it_came():
    # A DONE before an INIT_FAILED: the failure still counts. After it: the task that
    # ran says the initializer works, and the count goes back to zero.
    ex = executor_with_workers(records=False)
    sent(ex, 1, 1)
    ex._apply([done(1, 1, 1), init_failed(2)], time.monotonic())
    assert ex._init_failures == 1
    ex = executor_with_workers(records=False)
    sent(ex, 1, 1)
    ex._apply([init_failed(2), done(1, 1, 1)], time.monotonic())
    assert ex._init_failures == 0


def test_the_depth_learns_every_run_time_in_order():
    ex = executor_with_workers(records=False)
    for tid in (1, 2, 3):
        sent(ex, 1, tid)
    start = ex._depth.task_time
    frames = [
        (1, int(Kind.DONE), tid, ELAPSED.pack(seconds) + pickle.dumps(None))
        for tid, seconds in ((1, 0.5), (2, 0.25), (3, 0.125))
    ]
    ex._apply(frames, time.monotonic())
    expected = start
    for seconds in (0.5, 0.25, 0.125):
        expected += 0.2 * (seconds - expected)  # the EMA, one sample at a time
    assert ex._depth.task_time == pytest.approx(expected)


def test_a_record_that_begins_and_ends_in_one_round_ends_finished():
    # (Starts are applied first, and only to a PENDING record: either keeps it finished.)
    d = Driver(RecordExecutor(1), 2)
    f = PoolFuture(d, 1, abs, (-1,), {}, None)
    d.running.add(f)
    f.failed, f.value = False, 1
    d._settle([f], [f])  # started and settled in the same round
    assert f.done() and not f.running() and f.result(timeout=0) == 1
    assert f not in d.running


def test_a_record_the_executor_cancelled_turns_cancelled():
    d = Driver(RecordExecutor(1), 2)
    f = PoolFuture(d, 1, abs, (-1,), {}, None)
    d.running.add(f)
    f.failed, f.value = True, CancelledError("task 1 cancelled")
    d._settle([f])
    assert f.cancelled()
    with pytest.raises(CancelledError):
        f.result(timeout=0)


def test_an_executor_of_records_takes_no_calls_and_an_ended_one_no_records():
    ex = RecordExecutor(1)
    with pytest.raises(RuntimeError, match="records"):
        ex.queue("k", abs, 1)
    ex.end()  # never started: ended at once
    with pytest.raises(RuntimeError, match="ended"):
        ex.hand_over([Task(1, 1, abs, (1,), {}, None)])
