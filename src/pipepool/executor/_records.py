"""RecordExecutor: a LocalExecutor for a face that keeps the task records itself (a
ProcessPoolExecutor's futures *are* its tasks: ``pipepool._api``, "Two ways out").

Its verbs are the declared seam between such a face and the executor: the face hands
over records, runs a round, waits, takes the settled records back, cancels and withdraws
cancels, through these names only (``pipepool.futures._seam`` types the face against
them). Each verb is the executor's own method under a public name (a class attribute
naming the same function), not a wrapper: no call is added per task or per round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from . import LocalExecutor


class RecordExecutor(LocalExecutor):
    """A LocalExecutor whose outcomes leave as the face's own records, not as events:
    ``hand_over`` records, run ``steps``, ``take_records`` that ended or began."""

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
    ) -> None:
        super().__init__(
            parallelism,
            start_method=start_method,
            prefetch=prefetch,
            max_tasks_per_child=max_tasks_per_child,
            initializer=initializer,
            initargs=initargs,
            loop_impl=loop_impl,
            _records=True,
        )

    # The verbs: LocalExecutor's own methods under their public names (no wrapper).
    hand_over = LocalExecutor._queue_tasks  # queue records, in order (tids the face's)
    steps = LocalExecutor._steps  # one round's steps; the caller defers signals around it
    idle = LocalExecutor._idle  # wait for a worker, a wake(), a deadline or ``timeout``
    cancel_tasks = LocalExecutor._cancel_tasks  # cancel these records unless started
    uncancel = LocalExecutor._uncancel  # withdraw a cancel its worker did not answer
    take_records = LocalExecutor._take_records  # (ended, began) since the last call

    @property
    def published(self) -> int:
        """Outcomes (and starts) published so far: did a round produce anything?"""
        return self._published

    def make_do_with(self, workers: int) -> None:
        """Run with ``workers`` at most from now on (no worker can be started: the
        interpreter is shutting down, and the pool finishes with those it has)."""
        self.parallelism = workers
