"""The executor the runner drives, declared: what it calls, which both ``LocalExecutor``
and (with ``--cluster``) ``ClusterExecutor`` have, so the type checker holds the runner to
it whichever ``_runner.make_executor`` returns."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..events import Event


class JobExecutor(Protocol):
    """The scheduler API as ``pipepool run`` uses it (the methods' contracts: ``_api``)."""

    @property
    def parallelism(self) -> int: ...
    @property
    def queued(self) -> set[Hashable]: ...
    @property
    def running(self) -> set[Hashable]: ...
    def start(self) -> None: ...
    def queue_call(
        self,
        key: Hashable,
        fn: Callable[..., Any],
        args: tuple = (),
        kwargs: dict | None = None,
        *,
        timeout: float | None = None,
    ) -> None: ...
    def sync(self, timeout: float = 0.0) -> None: ...
    def get_event_buffer(self, keys: Iterable[Hashable] | None = None) -> dict[Hashable, Event]: ...
    def cancel(self, key: Hashable) -> int: ...
    def kill(self, key: Hashable) -> int: ...
    def end(self) -> None: ...
    def terminate(self) -> None: ...
