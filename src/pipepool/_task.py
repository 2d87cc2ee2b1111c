"""The task record both executors keep, and how a call is pickled for the trip.

A task is in exactly one phase at every return to user code: queued (in the executor's
``_queue``), running (handed to a worker or to the cluster), or done (its terminal event
published). One record serves both executors: a few fields are only one's (marked below), which
costs a few unused slots and saves the queue path a second ``__init__`` call per task.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from .errors import TaskPicklingError
from .frames import PICKLE_PROTOCOL

QUEUED, RUNNING, DONE = 0, 1, 2  # a task's phase
NO_KWARGS: dict[str, Any] = {}  # the ``kwargs`` of every call without keyword arguments
# (``Task.__init__`` puts it in place of an empty one): one shared dict, never changed (a
# worker calls ``fn(*args, **kwargs)``, a copy). Its own empty dict per task was one more
# object for the garbage collector per task in flight (each one counts toward its next
# collection), and in a batch it pickles once.


class Task:
    __slots__ = (
        "address",
        "args",
        "batch",
        "began",
        "cancelling",
        "deadline",
        "dispatch",
        "failed",
        "fn",
        "future",
        "key",
        "kwargs",
        "phase",
        "pid",
        "seq",
        "solo",
        "started",
        "tid",
        "timeout",
        "value",
    )
    # Its outcome, set when it ends, for a face that reads the records themselves
    # (``_bookkeeping``, "Two ways out"); unset until then, which saves the queue path two stores.
    failed: bool  # it ended in failure: ``value`` is the exception
    value: Any  # the result, or the exception

    def __init__(
        self,
        tid: int,
        key: Hashable,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        timeout: float | None,
    ) -> None:
        # ``futures._item.Record.__init__`` makes these same stores in its own frame: a
        # field added here goes there too (tests/futures/test_record_fields.py).
        self.tid = tid
        self.key = key
        self.fn: Callable[..., Any] | None = fn  # the call: None once done (freed early)
        self.args: tuple | None = args
        self.kwargs: dict | None = kwargs or NO_KWARGS  # one shared empty dict
        self.timeout = timeout
        self.phase = QUEUED
        self.started = False  # known to have begun (start mark, start message, outcome)
        self.deadline: float | None = None
        self.dispatch = 1  # which dispatch of its key (``Event.dispatch``); set by queue_call
        # LocalExecutor's:
        self.seq = 0  # its number in the stream of the worker it was last sent to
        self.batch = 0  # the seq of the first call of the BATCH frame it went in (0: alone)
        self.solo = False  # its batch was REFUSED: it goes alone from now on
        self.cancelling = False  # cancel() asked while it was sent and not started: if
        # its worker skips it (REVOKED), or dies before starting it, it is cancelled
        self.began = 0.0  # when we saw its start mark
        # ClusterExecutor's:
        self.future: Any = None  # the Dask future, until the outcome is in
        self.address: str | None = None  # the worker running it, from its "started"
        self.pid: int | None = None


# The record type an executor keeps: ``Task``, or a face's own subclass of it (a
# ProcessPoolExecutor's futures), so the type checker follows a record from the face that
# hands it over to the face that takes it back (``executor.RecordExecutor``).
TaskT = TypeVar("TaskT", bound=Task)


def pickle_call(
    t: Task, dumps: Callable[[Any, int], bytes] = pickle.dumps, advice: str = ""
) -> bytes:
    """Pickle a task's call with ``dumps``; on failure name the key and the part that
    failed, then ``advice`` (what the caller can do about it)."""
    try:
        return dumps((t.fn, t.args, t.kwargs), PICKLE_PROTOCOL)
    except Exception as exc:
        try:
            dumps(t.fn, PICKLE_PROTOCOL)
        except Exception:
            part = "function"
        else:
            part = "arguments"
        raise TaskPicklingError(
            f"task {t.key!r}: cannot pickle its {part} ({type(exc).__name__}: {exc}){advice}",
            key=t.key,
            part=part,
        ) from exc
