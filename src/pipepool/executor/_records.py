"""RecordExecutor: a LocalExecutor for a face that keeps the task records itself (a
ProcessPoolExecutor's futures *are* its tasks: ``pipepool._bookkeeping``, "Two ways out").

Its verbs are the declared seam between such a face and the executor: the face hands
over records, runs a round, waits, takes the settled records back, cancels and withdraws
cancels, through these names only (``pipepool.futures._seam`` types the face against
them). ``hand_over`` is this class's own (only a records face queues records); every
other verb is LocalExecutor's own method under a public name (a class attribute naming
the same function), not a wrapper: no call is added per task (``published``, a
property, is read twice a turn).

It is typed by its record type: it is LocalExecutor's body (``LocalCore``) over the
face's record class (``TaskT``: ``RecordExecutor[Record]`` for the futures face), so the
queue, the workers' tasks and what ``take_records`` hands back are that class, and the
type checker proves the round-trip: what the face hands over is what it takes back. It
has no ``queue``/``queue_call`` of its own making (those make plain ``Task`` records,
``SchedulerAPI``'s): both are refused.

Where an outcome goes is this class's own: it overrides the hooks the event buffer's
steps publish from (``_finish``, ``_succeed``, ``_publish_starting``), so the shared
``SchedulerCore`` keeps no mode flag and its hot paths no branch for records.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from .._task import DONE, TaskT
from ..events import State
from ._local import LocalCore

_SUCCESS = State.SUCCESS  # a plain name: events.py says why


class RecordExecutor(LocalCore[TaskT]):
    """A LocalExecutor whose outcomes leave as the face's own records (of type ``TaskT``),
    not as events: ``hand_over`` records, run ``steps``, ``take_records`` that ended or
    began."""

    def __init__(
        self,
        parallelism: int | None = None,
        *,
        start_method: str | None = None,
        prefetch: int | None = None,
        max_tasks_per_child: int | None = None,
        initializer: Callable[..., object] | None = None,
        initargs: Iterable[Any] = (),
        loop_impl: str | None = None,
        preload: Iterable[str] = (),
    ) -> None:
        super().__init__(
            parallelism,
            start_method=start_method,
            prefetch=prefetch,
            max_tasks_per_child=max_tasks_per_child,
            initializer=initializer,
            initargs=initargs,
            loop_impl=loop_impl,
            preload=preload,
        )
        # The records way out (``pipepool._bookkeeping``, "Two ways out"): the face's own
        # records (``TaskT``, a subclass of Task this room does not know), as handed over.
        self._settled: list[TaskT] = []  # ended since the last take_records()
        self._began: list[TaskT] = []  # seen started since the last take_records()

    def hand_over(self, tasks: Sequence[TaskT]) -> None:
        """Queue task records the face built, in order; each ``tid`` unique here (the face
        numbers them, and nothing else queues on this executor)."""
        if self._state == "ended":
            raise RuntimeError(f"cannot queue on an ended {type(self).__name__}")
        self._queue.extend(tasks)  # one atomic extend: all queued, or (interrupted) none

    # The other verbs: LocalExecutor's own methods under their public names (no wrapper).
    steps = LocalCore._steps  # one round's steps; the caller defers signals around it
    idle = LocalCore._idle  # wait for a worker, a wake(), a deadline or ``timeout``
    cancel_tasks = LocalCore._cancel_tasks  # cancel these records unless started
    uncancel = LocalCore._uncancel  # withdraw a cancel its worker did not answer

    @property
    def published(self) -> int:
        """Outcomes (and starts) published so far: did a round produce anything?"""
        return self._published

    def make_do_with(self, workers: int) -> None:
        """Run with ``workers`` at most from now on (no worker can be started: the
        interpreter is shutting down, and the pool finishes with those it has)."""
        self.parallelism = workers

    def take_records(self) -> tuple[list[TaskT], list[TaskT]]:
        """The records that ended (their outcome in ``failed`` and ``value``) and those
        seen started since the last call, each list in the order it happened."""
        if self._starting:  # seen started outside a collect (kill, terminate read marks)
            self._publish_starting()
        settled, began = self._settled, self._began
        self._settled, self._began = [], []
        return settled, began

    # -- the calls a scheduler would queue: refused, with the reason ---------------------

    def queue(self, key: Hashable, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        """Refused: the face numbers its records and hands them over (``hand_over``)."""
        self.queue_call(key, fn, args, kwargs)

    def queue_call(self, key: Hashable, fn: Callable[..., Any], *_: Any, **__: Any) -> None:
        """Refused: the face numbers its records and hands them over (``hand_over``)."""
        if self._state == "ended":
            raise RuntimeError(f"cannot queue on an ended {type(self).__name__}")
        raise RuntimeError("this executor takes task records (hand_over), not calls")

    # -- the hooks of the records way out: where the event buffer's steps publish ----------

    def _finish(
        self,
        t: TaskT,
        state: State,
        *,
        result: Any = None,
        exception: BaseException | None = None,
        pid: int | None = None,
    ) -> None:
        """``Bookkeeping._finish`` for a record: done and counted as any task
        (``_end``), its outcome on it, and it is settled."""
        self._end(t, state)
        t.failed = state is not _SUCCESS
        t.value = exception if t.failed else result
        self._settled.append(t)
        self._published += 1

    def _succeed(self, tasks: list[TaskT], results: list[Any], pid: int | None) -> None:
        """``Bookkeeping._succeed`` for records: each one's value on it, all settled."""
        for t, result in zip(tasks, results, strict=True):
            t.phase = DONE
            t.fn = t.args = t.kwargs = None
            t.failed = False
            t.value = result
        settled = self._settled
        settled += tasks
        self._stats["done"] += len(tasks)
        self._published += len(tasks)

    def _publish_starting(self) -> None:
        """``Collector._publish_starting`` for records: a record seen started is handed
        back by ``take_records``, not published as an event."""
        self._began += [t for t, _ in self._starting]
        self._starting.clear()
