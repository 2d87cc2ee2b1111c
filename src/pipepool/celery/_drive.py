"""Who drives the pool's core (``_pool.PoolCore``), by the loop the Celery worker runs.

* **The hub** (``HubDriver``): with Redis or RabbitMQ the worker runs kombu's event loop.
  The executor's fds are the hub's readers and writers and its deadline a hub timer, so
  every step, and every Celery callback, runs on the hub's thread, from a reader
  callback: the acknowledgements those callbacks queue with ``hub.call_soon`` run at the
  top of the hub's next iteration, before it waits again. A timer, or an apply, does not
  step itself: it writes to the executor's wake-up pipe (one of the readers), so the step
  still runs from a reader. The set of fds changes as children are replaced: after each
  step the driver compares it, by fd and by the file behind it (a pipe closed and a new
  one given the same number in one round is a new registration), with what the hub has.
* **A thread** (``ThreadDriver``): with the filesystem or memory transport the worker runs
  its blocking loop, and nothing else would read the pool's pipes. A thread of the pool's
  own steps it, waiting in the executor's own poll, and calls the callbacks, as billiard's
  result handler thread does. Other threads (the consumer's, the autoscaler's) hand it
  what they ask through an inbox and a wake-up.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ._pool import PoolCore

log = logging.getLogger("pipepool.celery")

TIMER_SLACK = 0.0005  # s: a timer already due this close to the new deadline is kept
THREAD_WAIT = 1.0  # s the driver thread waits at most between steps (its deadline bounds it)
CALL_TIMEOUT = 60.0  # s another thread waits for the driver to answer (grow, shrink, info)


def _file_of(fd: int) -> tuple[int, int]:
    """What ``fd`` points at (device, inode): a pipe closed and another given the same
    number differ."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


class HubDriver:
    """The pool on kombu's hub: fds as readers and writers, the deadline as a timer."""

    def __init__(self, core: PoolCore) -> None:
        self.core = core
        self.hub: Any = None
        self._readers: dict[int, tuple[int, int]] = {}  # fd -> its file, as registered
        self._writers: dict[int, tuple[int, int]] = {}
        self._timer: Any = None  # the hub's timer entry for the next deadline
        self._timer_at = math.inf
        self._asked = False  # a wake-up is in the pipe: the step comes

    def register(self, hub: Any) -> None:
        """(Again) on ``hub``: after a lost connection the hub was reset and forgot them."""
        self.hub = hub
        self._readers.clear()
        self._writers.clear()
        self._timer = None
        self._timer_at = math.inf
        self.update()

    def unregister(self) -> None:
        hub, self.hub = self.hub, None
        if hub is None:
            return
        for fd in self._readers:
            hub.remove_reader(fd)
        for fd in self._writers:
            hub.remove_writer(fd)
        self._readers.clear()
        self._writers.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` now: the caller is on the hub's thread."""
        return fn()

    def apply(self, job: Any, target: Callable[..., Any], args: Any, kwargs: Any) -> None:
        self.core.enqueue(job, target, args, kwargs)
        self.ask_step()

    def ask_step(self) -> None:
        """Have a step run from the hub soon, from the wake-up pipe's reader. Inside a
        step's delivery nothing is needed: the step dispatches what was applied."""
        if self.hub is not None and not self._asked and not self.core.delivering:
            self._asked = True
            self.core.executor.wake()

    def _on_ready(self, *_: Any) -> None:
        """A reader's or writer's callback: a step, then what to watch now."""
        self._asked = False
        try:
            self.core.step()
        finally:
            self.update()

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        self.ask_step()

    def update(self) -> None:
        """Make the hub watch what the executor says, and time its next deadline."""
        hub = self.hub
        if hub is None:
            return
        ex = self.core.executor
        readable, writable = ex.watched_fds()
        self._match(self._readers, readable, hub.add_reader, hub.remove_reader)
        self._match(self._writers, writable, hub.add_writer, hub.remove_writer)
        deadline = self.core.next_deadline()
        if self._timer is None or deadline < self._timer_at - TIMER_SLACK:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = hub.call_at(deadline, self._on_timer)
            self._timer_at = deadline

    def _match(
        self,
        registered: dict[int, tuple[int, int]],
        wanted: list[int],
        add: Callable[..., Any],
        remove: Callable[[int], Any],
    ) -> None:
        files = {fd: _file_of(fd) for fd in wanted}
        for fd, file in list(registered.items()):
            if files.get(fd) != file:  # gone, or the number now names another pipe
                remove(fd)
                del registered[fd]
        for fd, file in files.items():
            if fd not in registered:
                add(fd, self._on_ready)
                registered[fd] = file


class ThreadDriver:
    """The pool stepped by a thread of its own, for Celery's blocking loop."""

    def __init__(self, core: PoolCore) -> None:
        self.core = core
        self.inbox: deque[Callable[[], Any]] = deque()
        self.stopping = ""  # "warm": end once every job has; "cold": end now
        self.thread = threading.Thread(target=self._run, name="pipepool-celery", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _wake(self) -> None:
        with contextlib.suppress(OSError, AssertionError):  # the executor closed already
            self.core.executor.wake()

    def post(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the driver thread, soon."""
        self.inbox.append(fn)
        self._wake()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the driver thread and return what it returns (or raise what it
        raises); from the driver thread itself, now."""
        if threading.current_thread() is self.thread or not self.thread.is_alive():
            return fn()
        future: Future[Any] = Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        self.post(run)
        return future.result(CALL_TIMEOUT)

    def apply(self, job: Any, target: Callable[..., Any], args: Any, kwargs: Any) -> None:
        self.post(lambda: self.core.enqueue(job, target, args, kwargs))

    def ask_step(self) -> None:
        self._wake()

    def stop(self, how: str, timeout: float | None = None) -> None:
        """End the thread: "warm" once every job has ended, "cold" now; wait for it."""
        self.stopping = how
        self._wake()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    def _run(self) -> None:
        core = self.core
        inbox = self.inbox
        while True:
            try:
                while inbox:
                    inbox.popleft()()
                if self.stopping == "cold" or (self.stopping == "warm" and not core.jobs):
                    return
                wait = min(THREAD_WAIT, max(0.0, core.next_deadline() - time.monotonic()))
                core.step(wait, lambda: bool(inbox) or bool(self.stopping))
            except BaseException as exc:  # a callback that raised: the pool goes on
                log.error("pipepool: the pool's thread caught %r", exc, exc_info=True)


class Slots:
    """billiard's put lock, for the blocking loop: an apply waits for a free child.
    Released once per job that ends; grown and shrunk with the pool (``value`` and
    ``initial_value`` as kombu's semaphore names them, for the pool's info)."""

    def __init__(self, value: int) -> None:
        self.cond = threading.Condition()
        self.value = self.initial_value = value

    def acquire(self, running: Callable[[], bool]) -> None:
        with self.cond:
            while self.value <= 0 and running():
                self.cond.wait(0.5)
            self.value = max(0, self.value - 1)

    def release(self) -> None:
        with self.cond:
            self.value = min(self.value + 1, self.initial_value)
            self.cond.notify()

    def grow(self, n: int = 1) -> None:
        with self.cond:
            self.initial_value += n
            self.value += n
            self.cond.notify_all()

    def shrink(self, n: int = 1) -> None:
        with self.cond:
            self.initial_value = max(self.initial_value - n, 0)
            self.value = max(self.value - n, 0)

    def clear(self) -> None:
        with self.cond:
            self.value = self.initial_value
            self.cond.notify_all()
