"""LocalExecutor driven by an event loop that is not its own (``executor/_outside.py``):
the loop watches ``watched_fds()``, keeps a timer at ``next_deadline()`` and calls
``sync()`` when either fires, never ``sync(timeout)``. Each test checks that what
brought a step is what should have (an fd, not the periodic deadline that would cover
a missing one), on both loop implementations."""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import signal
import threading
import time

import pytest

import tasks
from helpers import Recorder, wait_for
from helpers import runs as helpers_runs
from pipepool import State, TaskTimeoutError, WorkerLostError
from pipepool.executor import INIT_RETRIES

pytestmark = pytest.mark.timeout(120)


def file_of(fd: int) -> tuple[int, int]:
    """What ``fd`` names (device, inode): a worker's pipes closed at its exit may give
    their numbers to its replacement's, and a loop that compared numbers alone would
    keep a registration the kernel dropped with the old pipe (epoll does), never woken
    by the new one."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


class SelectorDriver:
    """The smallest outside loop: a ``selectors`` selector over what the executor says
    to watch, a timeout to its deadline, and ``sync()`` after either. Each step records
    why it ran: the fds found ready ("read", "write"), or "deadline"."""

    def __init__(self, ex) -> None:
        self.ex = ex
        self.selector = selectors.DefaultSelector()
        self.watched: dict[int, tuple[int, tuple[int, int]]] = {}  # fd -> (events, file)
        self.causes: list[set[str]] = []  # per step, why it ran
        self.rec = Recorder(ex)

    def _register(self) -> None:
        readable, writable = self.ex.watched_fds()
        wanted: dict[int, tuple[int, tuple[int, int]]] = {}  # fd -> (events, its file)
        for fd in readable:
            wanted[fd] = (selectors.EVENT_READ, file_of(fd))
        for fd in writable:
            events = wanted[fd][0] if fd in wanted else 0
            wanted[fd] = (events | selectors.EVENT_WRITE, file_of(fd))
        for fd, (_, file) in self.watched.items():
            if wanted.get(fd, (0, None))[1] != file:  # gone, or its number reused
                with contextlib.suppress(KeyError, OSError):
                    self.selector.unregister(fd)
        for fd, (events, file) in wanted.items():
            if fd not in self.watched or self.watched[fd][1] != file:
                self.selector.register(fd, events)
            elif self.watched[fd][0] != events:
                self.selector.modify(fd, events)
        self.watched = wanted

    def turn(self) -> None:
        """Wait for a watched fd or the deadline, then step (a round and its events)."""
        self._register()
        ready = self.selector.select(max(0.0, self.ex.next_deadline() - time.monotonic()))
        cause = set()
        for _key, events in ready:
            cause.add("read" if events & selectors.EVENT_READ else "write")
        self.causes.append(cause or {"deadline"})
        self.ex.sync()
        self.rec.take()

    def run_until(self, predicate, limit: float = 60.0) -> None:
        deadline = time.monotonic() + limit
        while not predicate():
            assert time.monotonic() < deadline, f"not reached in {limit} s: {self.ex.stats()}"
            self.turn()

    def close(self) -> None:
        self.selector.close()


@pytest.fixture
def driven(make):
    drivers: list[SelectorDriver] = []

    def build(parallelism: int = 1, **kwargs) -> SelectorDriver:
        driver = SelectorDriver(make(parallelism, **kwargs))
        drivers.append(driver)
        return driver

    yield build
    for driver in drivers:
        driver.close()


def test_an_outcome_wakes_the_outside_loop_through_its_fd(driven):
    d = driven(1)
    d.ex.queue("first", tasks.echo, 1)
    d.ex.sync()  # dispatch: the worker starts and runs it
    d.run_until(lambda: "first" in d.rec.terminal)
    # Nothing but the result pipe can have woken the loop for the outcome (a missing fd
    # would leave it to the next periodic deadline, and this step's cause would say so).
    d.ex.queue("second", tasks.sleep, 0.2, "slept")
    d.ex.sync()
    d.causes.clear()
    d.run_until(lambda: "second" in d.rec.terminal)
    assert d.rec.terminal["second"].result == "slept"
    assert "read" in d.causes[-1], d.causes


def test_wake_from_another_thread_wakes_the_outside_loop(driven):
    d = driven(1)
    d.ex.queue("warm", tasks.echo, 1)
    d.run_until(lambda: "warm" in d.rec.terminal)
    woken = threading.Event()

    def queue_from_elsewhere() -> None:
        woken.wait(30)
        d.ex.wake()

    thread = threading.Thread(target=queue_from_elsewhere)
    thread.start()
    try:
        d._register()
        woken.set()
        # The outside loop's wait ends at the wake-up pipe, well before its deadline.
        ready = d.selector.select(30.0)
    finally:
        thread.join(30)
    assert [key.fd for key, _ in ready] == [d.ex.watched_fds()[0][0]]
    d.ex.sync()  # and the step drains it: the next wait is not woken again
    d._register()
    assert d.selector.select(0) == []


def test_a_write_that_waits_for_room_is_watched_until_it_leaves(driven, pipes_only):
    # Payloads through the pipes (pipes_only): a call far bigger than the activity pipe,
    # sent to a worker busy with a sleep, waits in the loop; its write end is watched for
    # room, and the step that sends the rest is one the outside loop ran on that event.
    d = driven(1, prefetch=2, pipe_size=4096)
    d.ex.queue("busy", tasks.sleep, 0.3)
    d.ex.queue("big", tasks.pad, "big", os.urandom(1 << 20), 4)
    d.ex.sync()
    assert d.ex.watched_fds()[1], "the unsent rest of the big call is not watched"
    d.run_until(lambda: "big" in d.rec.terminal)
    assert d.rec.terminal["big"].state is State.SUCCESS
    assert any("write" in cause for cause in d.causes), d.causes
    assert d.ex.watched_fds()[1] == []


def test_the_deadline_covers_a_task_timeout(driven):
    d = driven(1)
    d.ex.queue_call("slow", tasks.sleep, (60,), timeout=0.1)
    d.run_until(lambda: "slow" in d.rec.running_seen)
    seen = time.monotonic()
    # The task began before its start was seen: its deadline is at most 0.1 s from here,
    # and the loop is told to step by then (with nothing due it would be a minute).
    assert d.ex.next_deadline() <= seen + 0.1
    d.causes.clear()
    d.run_until(lambda: "slow" in d.rec.terminal)
    assert isinstance(d.rec.terminal["slow"].exception, TaskTimeoutError)
    # Nothing on an fd until the kill: a step the deadline brought expired it.
    assert d.causes[0] == {"deadline"}, d.causes


def test_a_replaced_worker_changes_what_is_watched(driven):
    d = driven(1)
    d.ex.queue("pid", tasks.pid_of_worker)
    d.run_until(lambda: "pid" in d.rec.terminal)
    before = set(d.ex.watched_fds()[0])
    d.ex.queue("dies", tasks.kill_self)
    d.ex.queue("after", tasks.pid_of_worker)
    d.run_until(lambda: "after" in d.rec.terminal)
    assert isinstance(d.rec.terminal["dies"].exception, WorkerLostError)
    assert d.rec.terminal["after"].result != d.rec.terminal["pid"].result
    after = set(d.ex.watched_fds()[0])
    # The wake-up pipe, the one worker's result pipe and its exit fd (a pidfd, where the
    # kernel has them: not in the portable pass).
    (worker,) = d.ex._workers.values()
    assert len(after) == len(before) == 2 + (worker.exit_fd >= 0)
    assert worker.fds[1] in after and (worker.exit_fd < 0 or worker.exit_fd in after)
    wake = d.ex.watched_fds()[0][0]
    assert wake in before and wake in after
    assert d.selector.get_map() is not None and set(d.watched) == after


def warm(make, parallelism: int, **kwargs):
    ex = make.build(parallelism, **kwargs)
    ex.keep_warm = True
    ex.start()
    return ex


def all_up(ex) -> bool:
    """Every worker said it is up (its UP frame was read: the parent's own record)."""
    return all(w.heard for w in ex._workers.values())


def test_keep_warm_starts_and_replaces_idle_workers(make):
    cold = make(2)
    cold.sync()
    assert cold.stats()["workers_started"] == 0  # workers start for work, by default
    with pytest.raises(RuntimeError, match="before start"):
        cold.keep_warm = True
    ex = warm(make, 2)
    rec = Recorder(ex)
    # Idle workers killed from outside once up, more times in a row than the initializer
    # may fail: each is replaced (they said they were up: no start-up failure, no
    # back-off, and the pool never breaks).
    for kills in range(1, INIT_RETRIES + 2):
        rec.run_until(lambda: len(ex.worker_pids()) == 2 and all_up(ex))
        victim = ex.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        rec.run_until(lambda v=victim: v not in ex.worker_pids() and len(ex.worker_pids()) == 2)
        assert ex.stats()["workers_started"] == 2 + kills
    rec.run_until(lambda: ex.stats()["worker_crashes"] == INIT_RETRIES + 1)  # all retired
    assert ex.broken is None
    assert not ex.has_work()
    ex.queue("still", tasks.echo, "works")
    rec.run_until(lambda: "still" in rec.terminal)
    assert rec.terminal["still"].result == "works"


def test_keep_warm_backs_off_and_breaks_as_for_work(make):
    # An initializer that always fails: a warm pool probes as a busy one does, with its
    # back-off, and stops starting workers once broken (no respawn loop without work).
    ex = warm(make, 2, initializer=tasks.fail_init)
    rec = Recorder(ex)
    rec.run_until(lambda: ex.broken is not None)
    started = ex.stats()["workers_started"]
    assert started <= 2 + INIT_RETRIES - 1  # the first two fail as one probe round
    for _ in range(20):
        rec.round(0.01)
    assert ex.stats()["workers_started"] == started


class AsyncioDriver:
    """The outside loop as asyncio: a reader or writer per watched fd, one timer handle at
    the deadline (asyncio's clock is ``time.monotonic``), a step on either."""

    def __init__(self, ex, loop: asyncio.AbstractEventLoop) -> None:
        self.ex, self.loop = ex, loop
        self.readers: set[tuple[int, tuple[int, int]]] = set()  # (fd, file_of(fd))
        self.writers: set[tuple[int, tuple[int, int]]] = set()
        self.timer: asyncio.TimerHandle | None = None
        self.rec = Recorder(ex)
        self.changed = asyncio.Event()

    def step(self) -> None:
        self.ex.sync()
        self.rec.take()
        self.watch()
        self.changed.set()

    def watch(self) -> None:
        readable, writable = ({(fd, file_of(fd)) for fd in fds} for fds in self.ex.watched_fds())
        for fd, _ in self.readers - readable:  # gone, or its number reused (file_of)
            self.loop.remove_reader(fd)
        for fd, _ in readable - self.readers:
            self.loop.add_reader(fd, self.step)
        for fd, _ in self.writers - writable:
            self.loop.remove_writer(fd)
        for fd, _ in writable - self.writers:
            self.loop.add_writer(fd, self.step)
        self.readers, self.writers = readable, writable
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_at(self.ex.next_deadline(), self.step)

    def close(self) -> None:
        for fd, _ in self.readers:
            self.loop.remove_reader(fd)
        for fd, _ in self.writers:
            self.loop.remove_writer(fd)
        if self.timer is not None:
            self.timer.cancel()


def test_asyncio_drives_a_pool_through_deaths_and_timeouts(make):
    ex = make(2)

    async def main() -> Recorder:
        driver = AsyncioDriver(ex, asyncio.get_running_loop())
        driver.watch()
        try:
            for i in range(40):
                ex.queue(i, tasks.echo, i)
            ex.queue("dies", tasks.kill_self)
            ex.queue_call("late", tasks.sleep, (60,), timeout=0.2)
            ex.wake()  # the step runs from the loop: a reader callback
            while ex.has_work():
                driver.changed.clear()
                await asyncio.wait_for(driver.changed.wait(), 30)
            return driver.rec
        finally:
            driver.close()

    rec = asyncio.run(main())
    assert {k: e.result for k, e in rec.terminal.items() if isinstance(k, int)} == {
        i: i for i in range(40)
    }
    assert isinstance(rec.terminal["dies"].exception, WorkerLostError)
    assert isinstance(rec.terminal["late"].exception, TaskTimeoutError)
    assert not rec.duplicates


def test_the_verbs_refuse_a_pool_not_started(pool):
    ex = pool.build(1)
    with pytest.raises(RuntimeError, match="start"):
        ex.watched_fds()
    with pytest.raises(RuntimeError, match="start"):
        ex.next_deadline()


def test_running_on_names_the_task_a_worker_runs_now(make, tmp_path):
    ex = make(1, prefetch=2)
    rec = Recorder(ex)
    started, go = str(tmp_path / "started"), str(tmp_path / "go")
    ex.queue("first", tasks.echo, 1)
    ex.queue("second", tasks.held, started, go)
    ex.sync()  # the worker starts, and gets both in one frame (prefetch 2)
    assert ex.stats()["tasks_running"] == 2
    (pid,) = ex.worker_pids()
    # No round since: "first"'s outcome waits in the pipe, unread. The start mark says
    # the worker is on "second" now (a signal meant for "first" must not hit it).
    assert wait_for(lambda: os.path.exists(started), 30)
    assert ex.running_on(pid) == "second"
    assert ex.running_on(os.getpid()) is None
    open(go, "w").close()
    rec.run_until(lambda: "second" in rec.terminal)
    assert ex.running_on(pid) is None  # idle


def test_grow_and_shrink_a_warm_pool(make, tmp_path):
    ex = warm(make, 2)
    rec = Recorder(ex)
    rec.run_until(lambda: len(ex.worker_pids()) == 2 and all_up(ex))
    ex.grow(1)
    rec.run_until(lambda: len(ex.worker_pids()) == 3 and all_up(ex))
    started, go = str(tmp_path / "started"), str(tmp_path / "go")
    ex.queue("busy", tasks.held, started, go)
    rec.run_until(lambda: os.path.exists(started) and "busy" in rec.running_seen)
    (busy,) = rec.running_seen["busy"]
    assert ex.shrink(5) == 2  # the idle ones only
    assert ex.parallelism == 1 and ex.worker_pids() == [busy]
    assert ex.shrink(1) == 0  # every one left is busy
    open(go, "w").close()
    rec.run_until(lambda: "busy" in rec.terminal and ex.stats()["worker_recycles"] == 2)
    assert ex.worker_pids() == [busy] and ex.stats()["worker_crashes"] == 0
    with pytest.raises(ValueError):
        ex.grow(0)


def test_recycle_replaces_each_worker_once_its_task_ends(make, tmp_path):
    ex = warm(make, 2, prefetch=3)
    rec = Recorder(ex)
    rec.run_until(lambda: len(ex.worker_pids()) == 2 and all_up(ex))
    old = set(ex.worker_pids())
    started, go, log = str(tmp_path / "started"), str(tmp_path / "go"), str(tmp_path / "runs")
    ex.queue("busy", tasks.held, started, go)
    rec.run_until(lambda: os.path.exists(started) and "busy" in rec.running_seen)
    ex.recycle()
    for i in range(6):  # queued after: none may run on an old worker
        ex.queue(i, tasks.record_pid, log, i)
    rec.run_until(lambda: all(i in rec.terminal for i in range(6)))
    assert not {rec.terminal[i].result for i in range(6)} & old
    assert "busy" not in rec.terminal  # it runs on, on its old worker
    open(go, "w").close()
    rec.run_until(lambda: "busy" in rec.terminal and len(ex.worker_pids()) == 2)
    rec.run_until(lambda: ex.stats()["worker_recycles"] == 2)  # both old ones exited
    assert not set(ex.worker_pids()) & old and ex.stats()["worker_crashes"] == 0
    assert rec.terminal["busy"].state is State.SUCCESS and rec.terminal["busy"].pid in old
    assert sorted(helpers_runs(log)) == [str(i) for i in range(6)]  # each ran once
