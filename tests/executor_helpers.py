"""Drive a LocalExecutor and keep every event it reports, to check "exactly one"."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable

from pipepool import Event, LocalExecutor


class Recorder:
    """Pops the event buffer after every round, so no terminal event can be overwritten
    unseen, and checks that no key is ever reported terminal twice."""

    def __init__(self, ex: LocalExecutor) -> None:
        self.ex = ex
        self.terminal: dict[Hashable, Event] = {}
        self.running_seen: set[Hashable] = set()
        self.duplicates: list[Hashable] = []
        self.history: dict[Hashable, list[str]] = defaultdict(list)

    def take(self) -> None:
        for key, event in self.ex.get_event_buffer().items():
            self.history[key].append(event.state.value)
            if event.state.terminal:
                if key in self.terminal:
                    self.duplicates.append(key)
                self.terminal[key] = event
            else:
                self.running_seen.add(key)

    def round(self, timeout: float = 0.01) -> None:
        self.ex.sync(timeout=timeout)
        self.take()

    def run_until(
        self, predicate: Callable[[], bool], limit: float = 60.0, timeout: float = 0.01
    ) -> None:
        deadline = time.monotonic() + limit
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not reached in {limit}s; stats={self.ex.stats()}")
            self.round(timeout)

    def finish(self, limit: float = 120.0) -> None:
        self.run_until(lambda: not self.ex.has_work(), limit)
        self.ex.end()
        self.take()
