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
    """The newest thing known about one dispatch of a key (immutable; a named tuple
    because the parent makes two per task on its hot path, and a frozen dataclass costs
    3x more to build).

    ``result`` is set on SUCCESS. On FAILED, ``exception`` says why, by its type:
    the task's own exception (worker traceback as ``__cause__``), ``TaskPicklingError``
    or ``TaskUnpicklingError`` (``part`` names what), ``WorkerLostError`` (pid, exit
    code or signal), ``TaskTimeoutError``, ``TaskKilledError``, ``InitializerError``, or
    ``concurrent.futures.CancelledError``. ``pid`` is the worker that ran it, if any.
    ``dispatch`` says which dispatch of its key it is about: 1 for a key queued while
    it had nothing outstanding, then 2, 3, ... for each ``queue()`` of the key while an
    earlier dispatch of it is queued, running, or ended with its event unread.
    """

    key: Hashable
    state: State
    result: Any = None
    exception: BaseException | None = None
    pid: int | None = None
    dispatch: int = 1

    def __repr__(self) -> str:
        # Never the whole result: a 1 MB result would make a 4 MB log line.
        parts = [f"key={self.key!r}", f"dispatch={self.dispatch}", f"state={self.state.value}"]
        if self.pid is not None:
            parts.append(f"pid={self.pid}")
        if self.exception is not None:
            parts.append(f"exception={_short(repr(self.exception))}")
        if self.result is not None:
            parts.append(f"result={summary(self.result)}")
        return f"Event({', '.join(parts)})"

    @property
    def reason(self) -> str:
        """One word for logs: "success", "running", "queued" or the failure's class name."""
        if self.state is State.FAILED and self.exception is not None:
            return type(self.exception).__name__
        return self.state.value


def summary(value: Any) -> str:
    """A value in a few words: a number's repr, else its type and its size if it has one."""
    if isinstance(value, int | float | complex):
        return _short(repr(value))
    name = type(value).__name__
    try:
        size = len(value)
    except Exception:  # no len() (or a failing one): the type says enough
        return f"<{name}>"
    unit = "bytes" if isinstance(value, bytes | bytearray | memoryview) else "items"
    if isinstance(value, str):
        unit = "characters"
    return f"<{name} of {size} {unit}>"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
