"""ClusterExecutor's round, the caller's side of it: the steps ``sync()`` runs (collect
what the IO thread received, report each outcome, time out, dispatch) and stopping one
dispatched task. None of them waits for the network (see ``pipepool.cluster``).

``ClusterRound`` is the base of ``ClusterExecutor`` (``DaskLink``, the IO thread's side,
is its own base): it declares the bookkeeping the steps share, the tasks handed to Dask
(``_inflight``) and the options that change what a step does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from concurrent.futures import CancelledError
from typing import Any

from .._outcome import load_exception, load_result
from .._task import RUNNING as _RUNNING
from .._task import Task as _Task
from .._task import pickle_call
from ..errors import TaskKilledError, TaskPicklingError, TaskTimeoutError
from ..events import Event, State
from ._link import DaskLink
from ._remote import _run_task


class ClusterRound(DaskLink):
    """Base of ``ClusterExecutor``: the steps of a round and the state they share."""

    def __init__(
        self,
        counters: Iterable[str],
        *,
        running_events: bool,
        kill_workers: bool,
        max_in_flight: int | None,
    ) -> None:
        super().__init__(counters)
        self.running_events = running_events  # see ClusterExecutor for these three
        self.kill_workers = kill_workers
        self.max_in_flight = max_in_flight
        self._inflight: dict[int, _Task] = {}  # tid -> task handed to Dask, not reported

    def _collect(self) -> None:
        starts, outcomes, inflight = self._starts, self._outcomes, self._inflight
        while starts:
            tid, address, pid = starts.popleft()
            t = inflight.get(tid)
            if t is None:
                continue  # reported already (timed out, killed): a late message
            t.started = True
            t.address, t.pid = address, pid
            if t.timeout is not None:
                # A retry on another worker (the first one died) starts a fresh clock.
                t.deadline = time.monotonic() + t.timeout
                self._timed[tid] = t
            self._publish(Event(t.key, State.RUNNING, pid=pid, dispatch=t.dispatch), terminal=False)
        while outcomes:
            tid, ok, value = outcomes[0]
            t = inflight.get(tid)
            if t is not None:
                self._report(t, ok, value)  # cannot raise: every failure becomes an event
                del inflight[tid]
            outcomes.popleft()

    def _report(self, t: _Task, ok: bool, value: Any) -> None:
        self._last_progress = time.monotonic()
        if not ok and t.cancelling and isinstance(value, CancelledError):
            # Dask dropped it, as cancel() asked: cancelled unless it was seen starting.
            error: BaseException = CancelledError(f"task {t.key!r} cancelled")
            if t.started:
                error = TaskKilledError(
                    f"task {t.key!r} was cancelled after it started on worker {t.address}: "
                    "Dask dropped its outcome (its call runs on there)"
                )
            self._finish(t, State.FAILED, exception=error, pid=t.pid)
            return
        if not ok:
            self._stats["lost"] += 1
            self._finish(t, State.FAILED, exception=self._lost_error(t, value), pid=t.pid)
            return
        # Unpickling cannot raise here (``_outcome``): whatever it raises, SystemExit
        # from a reducer included, is this task's failure, and the round goes on.
        if value[0] == "done":
            _, data, _address, pid = value
            ok, result = load_result(t.key, data, "here")
            if ok:
                self._finish(t, State.SUCCESS, result=result, pid=pid)
            else:
                self._finish(t, State.FAILED, exception=result, pid=pid)
            return
        _, tb, exc_bytes, _address, pid = value
        exc = load_exception(t.key, tb, exc_bytes, "here")
        self._finish(t, State.FAILED, exception=exc, pid=pid)

    def _time_out(self, t: _Task) -> None:
        self._stop_task(
            t,
            TaskTimeoutError(
                f"task {t.key!r} timed out after {t.timeout} s on worker {t.address}"
                + (
                    "; that worker process was killed"
                    if self.kill_workers
                    else "; it runs on there (Dask cannot stop a running call)"
                )
            ),
        )

    def _dispatch(self) -> None:
        queue = self._queue
        if not queue:
            return
        room = (
            len(queue) if self.max_in_flight is None else self.max_in_flight - len(self._inflight)
        )
        batch: list[_Task] = []
        payloads: list[bytes] = []
        while queue and len(batch) < room:
            t = queue.popleft()
            try:
                payloads.append(_pickle_call(t))
            except TaskPicklingError as exc:
                self._finish(t, State.FAILED, exception=exc)
                continue
            batch.append(t)
        if not batch:
            return
        tids = [t.tid for t in batch]
        topics = [
            self._token if self.running_events or t.timeout is not None else None for t in batch
        ]
        try:
            futures = self._client.map(
                _run_task,
                tids,
                payloads,
                topics,
                pure=False,
                key=[f"pipepool-{self._token}-{tid}" for tid in tids],
            )
        except BaseException:
            queue.extendleft(reversed(batch))  # not handed over: back to the front, in order
            raise
        # Order matters: the map is the step that can fail, the bookkeeping follows it.
        for t, future in zip(batch, futures, strict=True):
            t.future = future
            t.phase = _RUNNING
            self._inflight[t.tid] = t
        self._client.loop.add_callback(self._track, tids, futures)

    def _stop_task(self, t: _Task, reason: BaseException) -> None:
        """Report a dispatched task now and cancel it; kill its worker if so configured."""
        future = t.future  # _finish drops it
        addresses = [t.address] if self.kill_workers and t.started and t.address else []
        del self._inflight[t.tid]
        self._finish(t, State.FAILED, exception=reason, pid=t.pid)
        self._stats["killed_workers"] += len(addresses)
        self._control.append(
            asyncio.run_coroutine_threadsafe(
                self._cancel_and_kill([future], addresses), self._client.loop.asyncio_loop
            )
        )


def _pickle_call(t: _Task) -> bytes:
    """cloudpickle a task's call; on failure name the key and the part that failed."""
    import cloudpickle

    return pickle_call(t, cloudpickle.dumps)
