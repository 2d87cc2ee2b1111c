"""The pool on a real kombu hub, in this process: what a Celery worker's event loop does
with it, iteration by iteration. Celery queues a task's acknowledgement with
``hub.call_soon`` from the pool's callbacks; the hub runs those at the top of its next
iteration, and a callback that ran *before* the hub's poll (a ``call_soon`` of its own, a
timer) would leave the ack to wait out that poll. So every step of the pool runs from a
reader callback (after the poll), and a tick callback (``hub.on_tick``, run before each
poll) shows the order: an ack always comes before the next tick. No Redis here: the
jobs are plain functions, the callbacks the test's own."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from .celery_support import require

require()  # skip without Celery locally; with CI=true, fail

pytestmark = pytest.mark.timeout(120)


def slow_add(x: int, y: int, seconds: float = 0.0) -> int:
    time.sleep(seconds)
    return x + y


def own_pid() -> int:
    return os.getpid()


def _name(exc: BaseException) -> str:
    """The class name of an ExceptionInfo's exception (billiard wraps some)."""
    return type(getattr(exc, "exc", exc)).__name__


class Loop:
    """A kombu hub with the pool registered, and the order things happened in."""

    def __init__(self, pool, hub) -> None:
        self.pool, self.hub = pool, hub
        self.events: list[tuple] = []
        self.threads: set[int] = set()
        hub.on_tick.add(lambda: self.events.append(("tick",)))

    def callbacks(self, name: str, **extra):
        """The callbacks of one apply: each records itself, and queues an ack."""

        def note(kind: str, *args) -> None:
            self.threads.add(threading.get_ident())
            self.events.append((kind, name, *args))
            if kind in ("accept", "done", "error"):  # Celery acks at accept or at the end
                self.hub.call_soon(lambda: self.events.append(("ack", kind, name)))

        return {
            "accept_callback": lambda pid, when: note("accept", pid),
            "callback": lambda value: note("done", value),
            "error_callback": lambda einfo: note("error", _name(einfo.exception)),
            "timeout_callback": lambda soft, timeout: note("timeout", soft),
            **extra,
        }

    def apply(self, name: str, fn, *args, **options):
        return self.pool.apply_async(fn, args=args, **self.callbacks(name, **options))

    def run_until(self, predicate, limit: float = 60.0) -> None:
        deadline = time.monotonic() + limit
        while not predicate():
            assert time.monotonic() < deadline, self.events[-20:]
            self.hub.run_once()

    def ended(self, name: str) -> bool:
        return any(e[0] == "ack" and e[2] == name and e[1] != "accept" for e in self.events)

    def outcome(self, name: str) -> tuple:
        return next(e for e in self.events if e[0] in ("done", "error") and e[1] == name)

    def assert_acks_come_before_the_next_poll(self) -> None:
        """After each accept and each outcome, its ack, with no tick (no poll) between.
        An accept is often seen by a step a deadline brought (start marks wake no one):
        that step must run from a reader too."""
        for i, event in enumerate(self.events):
            if event[0] in ("accept", "done", "error"):
                rest = self.events[i + 1 :]
                ack = rest.index(("ack", event[0], event[1]))  # (several: any order)
                assert ("tick",) not in rest[:ack], (event, self.events[i : i + 8])


@pytest.fixture
def loop():
    from celery import Celery
    from kombu.asynchronous import Hub
    from kombu.asynchronous.semaphore import LaxBoundedSemaphore

    from pipepool.celery.prefork import TaskPool

    app = Celery("hub-test", set_as_current=False)
    hub = Hub()
    semaphore = LaxBoundedSemaphore(2)
    pool = TaskPool(
        2,
        app=app,
        initargs=(app, "hub-test"),
        threads=False,
        semaphore=semaphore,
        putlocks=False,
    )
    pool.start()
    pool.register_with_event_loop(hub)
    lp = Loop(pool, hub)
    lp.semaphore = semaphore
    yield lp
    pool.terminate()
    hub.close()


def test_every_callback_runs_on_the_hub_thread_and_each_ack_before_the_next_poll(loop):
    for i in range(6):
        loop.semaphore.acquire(lambda: None)  # as the worker does before each apply
        loop.apply(f"add{i}", slow_add, i, i, 0.05 * (i % 3))
    loop.run_until(lambda: all(loop.ended(f"add{i}") for i in range(6)))
    assert [loop.outcome(f"add{i}")[2] for i in range(6)] == [2 * i for i in range(6)]
    assert loop.threads == {threading.get_ident()}
    accepts = [e for e in loop.events if e[0] == "accept"]
    assert len(accepts) == 6 and all(e[2] in loop.pool.info["processes"] for e in accepts)
    loop.assert_acks_come_before_the_next_poll()
    assert loop.semaphore.value == 2  # released once per job


def test_a_deadline_the_hub_times_still_delivers_from_a_reader(loop):
    # The hard limit is a deadline (the hub's timer), the soft one too: their callbacks
    # and acks still come from a reader, before the next poll.
    loop.apply("hard", slow_add, 1, 1, 30, timeout=0.3)
    loop.apply("soft", slow_add, 1, 1, 30, soft_timeout=0.3, timeout=5)
    loop.run_until(lambda: loop.ended("hard") and loop.ended("soft"))
    assert loop.outcome("hard")[2] == "TimeLimitExceeded"
    assert ("timeout", "hard", False) in loop.events
    assert ("timeout", "soft", True) in loop.events
    assert loop.outcome("soft")[2] == "SoftTimeLimitExceeded"
    loop.assert_acks_come_before_the_next_poll()


def test_a_replaced_child_is_watched_by_the_hub(loop):
    loop.apply("pid", own_pid)
    loop.run_until(lambda: loop.ended("pid"))
    pid = loop.outcome("pid")[2]
    os.kill(pid, signal.SIGKILL)
    loop.run_until(
        lambda: pid not in loop.pool.info["processes"] and len(loop.pool.info["processes"]) == 2
    )
    for i in range(4):
        loop.apply(f"after{i}", own_pid)
    loop.run_until(lambda: all(loop.ended(f"after{i}") for i in range(4)))
    assert {loop.outcome(f"after{i}")[2] for i in range(4)} <= set(loop.pool.info["processes"])
    loop.assert_acks_come_before_the_next_poll()


def test_a_job_terminated_before_it_starts_never_runs(loop, tmp_path):
    # Celery's revoke of a task it handed to the pool and that no child accepted yet:
    # ``terminate(signum)`` on what apply_async returned. Both children are busy, so the
    # third job waits in the pool: taken back, it is accepted by this process (as
    # billiard's parent does: nothing to kill) and ends with Terminated, unrun.
    busy = [loop.apply(f"busy{i}", slow_add, i, i, 1.0) for i in range(2)]
    loop.run_until(lambda: sum(e[0] == "accept" for e in loop.events) == 2)
    waiting = loop.apply("waiting", own_pid)
    waiting.terminate(signal.SIGTERM)
    loop.run_until(lambda: loop.ended("waiting") and all(loop.ended(f"busy{i}") for i in range(2)))
    assert ("accept", "waiting", os.getpid()) in loop.events
    assert loop.outcome("waiting")[2] == "Terminated"
    assert busy[0].accepted() and waiting.ready()
    loop.assert_acks_come_before_the_next_poll()
