"""An "Airflow-style" pool: the design pipepool replaces, as a baseline to race.

Every worker reads workloads from one shared ``multiprocessing.SimpleQueue`` (the
activity queue) and writes each outcome to another shared one (the result queue). The
parent puts workloads from a helper thread while its main thread drains results: the
shape Apache Airflow's LocalExecutor took after its deadlock fixes (a blocking ``put`` on
the main thread deadlocks once workers fill the result pipe; docs/design.md, "Why it exists").

It is written to be *fast*, not safe, so the race is fair to it: one result message per
task (no "started" message), no bookkeeping beyond a counter, no undo, no detection of a
dead worker (a worker that dies holding a queue lock wedges every other one, and a lost
task is never reported: those are the bugs pipepool exists for). Shared queues take a
cross-process lock per ``get`` and per ``put``.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_STOP = None  # a worker exits when it reads this from the activity queue


def _work(activity: Any, results: Any) -> None:
    """The worker loop: take (key, fn, args), run it, put (key, ok, value)."""
    while True:
        item = activity.get()
        if item is _STOP:
            return
        key, fn, args = item
        try:
            value = fn(*args)
        except Exception as exc:  # the outcome travels back; the worker lives on
            results.put((key, False, exc))
        else:
            results.put((key, True, value))


class AirflowStylePool:
    """``parallelism`` workers on one shared activity queue and one shared result queue."""

    def __init__(self, parallelism: int, start_method: str | None = None) -> None:
        ctx = multiprocessing.get_context(start_method)
        self.activity = ctx.SimpleQueue()
        self.results = ctx.SimpleQueue()
        self.workers = [
            ctx.Process(  # type: ignore[attr-defined]  # typeshed: not on BaseContext
                target=_work,
                args=(self.activity, self.results),
                daemon=True,
                name=f"airflow-style-worker-{i}",
            )
            for i in range(parallelism)
        ]
        for w in self.workers:
            w.start()

    def outcomes(self, fn: Callable[..., Any], calls: Iterable[tuple]) -> Iterator[tuple]:
        """Yield ``(index, value)`` of ``fn(*call)`` for each call, in completion order.

        A helper thread puts the workloads (a ``put`` can block on a full pipe) while
        this thread drains results, so the two pipes never wedge each other.
        """
        calls = list(calls)
        put = self.activity.put

        def feed() -> None:
            for i, args in enumerate(calls):
                put((i, fn, args))

        feeder = threading.Thread(target=feed, name="airflow-style-feeder", daemon=True)
        feeder.start()
        get = self.results.get
        try:
            for _ in range(len(calls)):
                key, ok, value = get()
                if not ok:
                    raise value
                yield key, value
        finally:
            feeder.join(5.0)  # done unless the consumer stopped early on an error

    def run(self, fn: Callable[..., Any], calls: Iterable[tuple]) -> list[Any]:
        """All outcomes, in call order."""
        calls = list(calls)
        out: list[Any] = [None] * len(calls)
        for key, value in self.outcomes(fn, calls):
            out[key] = value
        return out

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One round trip. A single small put cannot block, so no helper thread here."""
        self.activity.put((0, fn, args))
        _key, ok, value = self.results.get()
        if not ok:
            raise value
        return value

    def pids(self) -> list[int]:
        return [w.pid for w in self.workers if w.pid is not None]

    def close(self) -> None:
        """Stop the workers once they are idle (one stop message each)."""
        for _ in self.workers:
            self.activity.put(_STOP)
        for w in self.workers:
            w.join(30)
            if w.exitcode is None:
                w.kill()
                w.join()
        self._close_queues()

    def terminate(self) -> None:
        """Kill the workers now, whatever they hold."""
        for w in self.workers:
            w.kill()
        for w in self.workers:
            w.join()
        self._close_queues()

    def _close_queues(self) -> None:
        for q in (self.activity, self.results):
            q.close()
