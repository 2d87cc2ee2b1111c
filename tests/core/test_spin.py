"""The busy-poll before a wait (``pipepool._spin``): bounded, adaptive, only while a core
is free; and where the parent (``LocalExecutor._idle``) and a worker (``serve``) use it."""

from __future__ import annotations

import itertools
import os
import pickle
import subprocess
import sys
import threading
import time

import pytest

import futures_tasks as ft
from pipepool import LocalExecutor, _spin
from pipepool.frames import PICKLE_PROTOCOL, Kind, encode_header
from pipepool.loop import load
from pipepool.worker import _serve

WAIT = 30.0


class Looks:
    """A ``free`` predicate that says yes (or ``answer``) and counts how often it was
    asked: it is asked exactly when a spin is about to start."""

    def __init__(self, answer: bool = True) -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.answer


class Opens(Looks):
    """Says yes, and opens a gate file the first time: a gated task ends only once a
    spin began."""

    def __init__(self, gate) -> None:
        super().__init__()
        self.gate = gate

    def __call__(self) -> bool:
        self.gate.touch()
        return super().__call__()


def never() -> bool:
    return False


def test_data_already_there_costs_no_spin_and_no_look_at_the_machine():
    looks = Looks()
    spin = _spin.Spin(limit=1.0, free=looks)
    assert spin.wait(lambda: True) is True
    assert looks.calls == 0 and spin.misses == 0 and spin.skip == 0


def test_a_spin_polls_until_its_limit_then_gives_up():
    polls = []
    spin = _spin.Spin(limit=0.005, free=Looks())
    start = time.perf_counter()
    assert spin.wait(lambda: polls.append(1) is None and False) is False
    took = time.perf_counter() - start
    assert took >= 0.005, "it gave up before its limit"
    assert took < 0.005 + 5.0, "a spin must end (bounded even on a loaded machine)"
    assert len(polls) > 1 and spin.misses == 1


def test_a_timeout_shorter_than_the_limit_bounds_the_spin():
    spin = _spin.Spin(limit=30.0, free=Looks())
    start = time.perf_counter()
    assert spin.wait(never, timeout=0.002) is False
    assert time.perf_counter() - start < 10.0, "the spin ignored the timeout"


def test_no_spin_without_a_free_core():
    polls = []
    spin = _spin.Spin(limit=30.0, free=Looks(answer=False))
    start = time.perf_counter()
    assert spin.wait(lambda: polls.append(1) is None and False) is False
    assert time.perf_counter() - start < 10.0
    assert polls == [1] and spin.misses == 0 and spin.skip == 0


def test_misses_in_a_row_double_the_waits_without_a_spin_up_to_max_skip():
    looks = Looks()
    spin = _spin.Spin(limit=0.00005, free=looks)
    spun = []
    for _ in range(400):
        before = looks.calls
        spin.wait(never)
        spun.append(looks.calls > before)
    at = [i for i, s in enumerate(spun) if s]
    gaps = [b - a - 1 for a, b in itertools.pairwise(at)]
    assert gaps[:8] == [1, 2, 4, 8, 16, 32, 64, 64], gaps


def test_a_spin_that_finds_data_ends_the_back_off():
    looks = Looks()
    spin = _spin.Spin(limit=0.00005, free=looks)
    spin.wait(never)
    spin.wait(never)  # skipped: the back-off after one miss
    assert (spin.misses, spin.skip, looks.calls) == (1, 0, 1)
    # Long enough for the three polls below to fall in one spin on a loaded machine: in
    # 50 µs they did not, once (CI's 3.13 pass beside the installs: a preemption between
    # two polls ended the spin, which then counted a miss).
    spin.limit = 30.0
    polls = iter([False, False, True])
    assert spin.wait(lambda: next(polls)) is True
    assert (spin.misses, spin.skip) == (0, 0)
    spin.limit = 0.00005
    spin.wait(never)
    assert looks.calls == 3, "after a hit, the next wait spins again"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/loadavg is Linux's")
def test_the_machine_count_includes_this_thread():
    count = _spin.runnable()
    assert count is not None and count >= 1


def test_a_core_is_free_while_the_runnable_do_not_outnumber_the_cores(monkeypatch):
    cores = _spin._CORES
    for runnable, free in ((cores, True), (cores + 1, False), (None, False)):
        monkeypatch.setattr(_spin, "runnable", lambda n=runnable: n)
        assert _spin.core_free() is free


def test_pipepool_spin_0_turns_it_off_in_the_parent():
    code = "import pipepool; print(pipepool.LocalExecutor(1)._spin)"
    env = dict(os.environ, PIPEPOOL_SPIN="0")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=WAIT
    )
    assert out.stdout.strip() == "None", out.stderr


def drain(ex: LocalExecutor, key: object) -> object:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        ex.sync(timeout=1.0)
        event = ex.get_event_buffer().get(key)
        if event is not None and event.state.terminal:
            return event.result
    raise AssertionError(f"task {key!r} did not finish")


@pytest.mark.timeout(120)
def test_the_parent_spins_only_while_a_short_task_is_out(impl, tmp_path):
    ex = LocalExecutor(1, start_method="fork", loop_impl=impl)
    ex.start()
    try:
        for i in range(20):  # tiny tasks: the observed task time drops below a spin
            ex.queue(("warm", i), abs, -i)
            drain(ex, ("warm", i))
        ex._spin.limit = 5.0  # (long enough for the gated task below, whatever the load)
        short_gate, long_gate = tmp_path / "short", tmp_path / "long"
        looks = ex._spin.free = Opens(short_gate)
        ex.sync(timeout=0.01)  # nothing out: a plain wait
        assert looks.calls == 0, "it spun with no task out"
        # The task can only end once a spin began (its gate opens then): the outcome
        # comes during the spin.
        ex.queue("short", ft.wait_for_file, str(short_gate), "short")
        ex.sync()
        assert drain(ex, "short") == "short"
        assert looks.calls >= 1, "it blocked without spinning for a short task's outcome"
        looks.calls = 0
        ex._depth.task_time = 10 * ex._spin.limit  # tasks have been long lately
        ex.queue("long", ft.wait_for_file, str(long_gate), "long")
        ex.sync()
        threading.Timer(0.2, long_gate.touch).start()
        assert drain(ex, "long") == "long"
        assert looks.calls == 0, "it spun for a task expected to outlast the spin"
    finally:
        ex.terminate()


class Recording:
    """Stands in for a worker's Spin: records whether the next frame was there already."""

    waits: list[bool] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def wait(self, ready, timeout=None):
        Recording.waits.append(ready())
        return False


def task_frame(tid: int, fn, *args) -> bytes:
    payload = pickle.dumps((fn, args, {}), PICKLE_PROTOCOL)
    return encode_header(Kind.TASK, tid, len(payload)) + payload


@pytest.mark.timeout(60)
def test_a_worker_spins_after_an_outcome_never_before_its_first_task(monkeypatch, impl):
    monkeypatch.setattr(_spin, "Spin", Recording)
    monkeypatch.setattr(_spin, "ENABLED", True)
    Recording.waits = []
    activity_r, activity_w = os.pipe()
    result_r, result_w = os.pipe()
    worker = threading.Thread(
        target=_serve.serve, args=(activity_r, result_w), kwargs={"impl": impl}, daemon=True
    )
    worker.start()
    results = load(impl)[1].FrameReader(result_r)
    try:
        time.sleep(0.05)  # (a spin before the first task would show here)
        assert Recording.waits == []
        os.write(activity_w, task_frame(1, abs, -1))
        assert results.read()[:2] == (Kind.DONE, 1)
        deadline = time.monotonic() + WAIT
        while not Recording.waits and time.monotonic() < deadline:
            time.sleep(0.001)
        assert Recording.waits == [False], "no spin while waiting for the next task"
        os.write(activity_w, task_frame(2, abs, -2) + task_frame(3, abs, -3))
        assert results.read()[:2] == (Kind.DONE, 2)
        assert results.read()[:2] == (Kind.DONE, 3)
    finally:
        os.close(activity_w)  # EOF: serve returns
        worker.join(WAIT)
        for fd in (activity_r, result_r, result_w):
            os.close(fd)
    assert not worker.is_alive()
    # Task 3 came with task 2, in one read: no spin after task 2, only after task 3.
    assert len(Recording.waits) == 2, Recording.waits
