"""Exceptions of pipepool; each extends the standard library type a caller already catches.

``WorkerLostError`` and ``InitializerError`` extend ``BrokenProcessPool``, whose module
(``concurrent.futures.process``) costs a spawned worker ~5 ms to import though no worker
ever raises them: they live in ``_broken_pool``, with ``DeathCause`` (the ``cause`` a
``WorkerLostError`` carries, an enum whose class costs ~0.1 ms to build), and load on
first access from here. The type checker reads them through the import below, which
never runs.
"""

from __future__ import annotations

import pickle
import signal
from typing import TYPE_CHECKING

from . import _lazy

if TYPE_CHECKING:
    from ._broken_pool import DeathCause as DeathCause
    from ._broken_pool import InitializerError as InitializerError
    from ._broken_pool import WorkerLostError as WorkerLostError


class PipepoolError(Exception):
    """Base class of the errors pipepool raises itself."""


class FrameError(PipepoolError, ValueError):
    """A frame on a pipe cannot be trusted: bad header, length beyond the limit, EOF mid-frame."""


class RemoteTraceback(Exception):
    """The worker's formatted traceback, attached as ``__cause__`` of a re-raised exception."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class TaskPicklingError(PipepoolError, pickle.PicklingError):
    """A task's function, arguments, result or exception could not be pickled.

    ``part`` names which one ("function", "arguments", "result", "exception").
    """

    def __init__(self, message: str, *, key: object = None, part: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.part = part

    def __reduce__(self):
        return (_rebuild_pickling_error, (str(self), self.key, self.part))


def _rebuild_pickling_error(message: str, key: object, part: str) -> TaskPicklingError:
    return TaskPicklingError(message, key=key, part=part)


class TaskUnpicklingError(PipepoolError, pickle.UnpicklingError):
    """A task, its result or its exception could not be unpickled on the receiving side.

    ``part`` names which one ("task" in the worker, "result" or "exception" in the parent).
    """

    def __init__(self, message: str, *, part: str = "") -> None:
        super().__init__(message)
        self.part = part

    def __reduce__(self):
        return (_rebuild_unpickling_error, (str(self), self.part))


def _rebuild_unpickling_error(message: str, part: str) -> TaskUnpicklingError:
    return TaskUnpicklingError(message, part=part)


class TaskTimeoutError(PipepoolError, TimeoutError):
    """A task ran past its timeout; its worker was killed and replaced."""


class TaskKilledError(PipepoolError):
    """A running task was killed on request; its worker was replaced."""


class DuplicateKeyError(PipepoolError, ValueError):
    """``queue_call(..., exclusive=True)`` refused a key that has a dispatch outstanding;
    the dispatch under it is untouched.

    By default a key queued again while outstanding is one more dispatch of it, each
    with its own terminal event (``Event.dispatch``). ``exclusive`` is for a face whose
    policy is one run per key (the Airflow executor): it refuses the key from
    ``queue()`` until ``get_event_buffer()`` hands out its terminal event, while it is
    queued, running, or reported with that event unread. A ``ValueError``: the argument
    is wrong for the executor's state, not missing (``KeyError`` means the latter).
    ``key`` is the key; ``where`` says why it is held: "queued", "running" or "reported".
    """

    def __init__(self, message: str, *, key: object = None, where: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.where = where

    def __reduce__(self):
        return (_rebuild_duplicate_key, (str(self), self.key, self.where))


def _rebuild_duplicate_key(message: str, key: object, where: str) -> DuplicateKeyError:
    return DuplicateKeyError(message, key=key, where=where)


class PreloadError(PipepoolError, ImportError):
    """A module the pool was asked to ``preload`` could not be imported where its workers
    are made from (this process under fork, else the pool's zygote), so the pool did not
    start: nothing it made is left running.

    ``name`` is the module, as given (``"__main__"`` for the main module); the message
    says why, and ``__cause__`` is the import's own exception (in this process) or its
    traceback as the zygote printed it (a ``RemoteTraceback``).
    """

    def __init__(self, message: str, *, name: str | None = None) -> None:
        super().__init__(message, name=name)

    def __reduce__(self):
        return (_rebuild_preload_error, (str(self), self.name))


def _rebuild_preload_error(message: str, name: str | None) -> PreloadError:
    return PreloadError(message, name=name)


def signal_name(exitcode: int | None) -> str | None:
    """Name of the signal behind a negative exit code (``-9`` → ``"SIGKILL"``)."""
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def describe_exit(exitcode: int | None) -> str:
    """Human words for an exit status: "killed by SIGKILL" or "exited with code 3"."""
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        return f"killed by {signal_name(exitcode)}"
    return f"exited with code {exitcode}"


if not TYPE_CHECKING:  # the type checker reads the names imported above, not this hook
    __getattr__, __dir__ = _lazy.exports(
        globals(),
        dict.fromkeys(("WorkerLostError", "InitializerError", "DeathCause"), "_broken_pool"),
    )
