"""What a LocalExecutor reports about a task: its state and, when it ended, how."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from typing import Any, NamedTuple


class State(enum.StrEnum):
    """Task states as a scheduler sees them; SUCCESS and FAILED are terminal."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        """True for SUCCESS and FAILED: the key gets no further event."""
        return self in _TERMINAL


# ``State.SUCCESS`` is a look-up through the enum class's own ``__getattr__`` hook (about
# 55 ns, several hundred instructions, on Python 3.11); the hot paths compare with these
# names, or with the set, instead.
_TERMINAL = frozenset((State.SUCCESS, State.FAILED))


class Event(NamedTuple):
    """The newest thing known about one key (immutable; a named tuple because the parent
    makes two per task on its hot path, and a frozen dataclass costs 3x more to build).

    ``result`` is set on SUCCESS. On FAILED, ``exception`` says why, by its type:
    the task's own exception (worker traceback as ``__cause__``), ``TaskPicklingError``
    or ``TaskUnpicklingError`` (``part`` names what), ``WorkerLostError`` (pid, exit
    code or signal), ``TaskTimeoutError``, ``TaskKilledError``, ``InitializerError``, or
    ``concurrent.futures.CancelledError``. ``pid`` is the worker that ran it, if any.
    """

    key: Hashable
    state: State
    result: Any = None
    exception: BaseException | None = None
    pid: int | None = None

    @property
    def reason(self) -> str:
        """One word for logs: "success", "running", "queued" or the failure's class name."""
        if self.state is State.FAILED and self.exception is not None:
            return type(self.exception).__name__
        return self.state.value
