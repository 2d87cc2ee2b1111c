"""LocalExecutor's collect step: what comes back from the workers. Outcome frames
(DONE, RAISED), the answers to REVOKE and to a refused BATCH, an initializer's failure,
closed result pipes, and the start marks, read from shared memory without a syscall.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Hashable, Sequence
from concurrent.futures import CancelledError
from typing import Any

from .._outcome import load_failure, result_error
from .._task import QUEUED as _QUEUED
from .._task import RUNNING as _RUNNING
from .._task import TaskT
from ..errors import FrameError
from ..events import Event, State
from ..frames import ELAPSED, Kind
from ._lifecycle import WorkerLifecycle
from ._state import _Worker

# Plain names for the values the hot path compares with (events.py says why).
_DONE, _RAISED, _REVOKED, _REFUSED, _INIT_FAILED, _SHARED = (
    int(k)
    for k in (Kind.DONE, Kind.RAISED, Kind.REVOKED, Kind.REFUSED, Kind.INIT_FAILED, Kind.SHARED)
)
_CANCELLED, _TOO_LATE, _UP = int(Kind.CANCELLED), int(Kind.TOO_LATE), int(Kind.UP)
_FAILED, _STARTED = State.FAILED, State.RUNNING
_ELAPSED_SIZE = ELAPSED.size
_elapsed_of = ELAPSED.unpack_from
_loads = pickle.loads
_new = tuple.__new__
# A frame as the loop reads it, or an outcome out of the shared ring (a memoryview):
Outcome = tuple[int, int, int, "bytes | bytearray | memoryview"]
COPY_BELOW = 4096  # bytes: a smaller result's pickle is sliced out of its frame (a copy
# that costs less than a memoryview); a bigger one is unpickled in place


class Collector(WorkerLifecycle[TaskT]):
    """The collect step and what each frame kind does (it kills a worker whose stream
    cannot be trusted, and counts an initializer's failure: ``WorkerLifecycle``)."""

    def _collect(self) -> None:
        assert self._loop is not None
        frames, closed = self._loop.pump()
        now = time.monotonic() if frames else 0.0  # one clock read per batch, not per frame
        if frames:
            self._apply(frames, now)
        self._read_marks(now or time.monotonic())
        if self._starting:
            self._publish_starting()
        for channel, error in closed:
            w = self._workers.get(channel)
            if w is not None:
                w.closing = True
                w.closed_at = time.monotonic()
                # The first reason stays: a bad frame _on_frame saw is followed by the
                # plain EOF of the worker it killed.
                w.close_error = w.close_error or error
                if error is not None:  # a stream we cannot trust: the worker must go
                    self._kill_worker(w, None)

    def _publish_starting(self) -> None:
        """The tasks seen started since the last collect, as RUNNING events: last, and
        only for tasks still running (one whose outcome came in the same batch would have
        its RUNNING event replaced right away, newest per key, so building it is skipped:
        most tiny tasks). The records way out overrides it (``RecordExecutor``)."""
        starting = self._starting
        for t, pid in starting:
            if t.phase == _RUNNING:
                self._publish(
                    _new(Event, (t.key, _STARTED, None, None, pid, t.dispatch)),
                    terminal=False,
                )
        starting.clear()

    def _apply(self, frames: Sequence[Outcome], now: float) -> None:
        """Apply a batch of frames in their order. A DONE frame ends its task here and
        only here, in bulk (``_succeed``): one from the shared ring comes back here too
        (``_on_shared``); every other frame, and a DONE too short to read, is ``_on_frame``'s."""
        workers = self._workers
        tasks: list[TaskT] = []  # successes not yet recorded, all of worker ``w``
        results: list[Any] = []
        elapsed: list[float] = []  # the run times of the tasks that ended, in order
        ran = False  # a task ended since the last frame of another kind
        last = None
        w: _Worker[TaskT] | None = None
        pid: int | None = None
        for channel, kind, ident, payload in frames:
            if channel != last:
                if tasks:
                    self._succeed(tasks, results, pid)
                    tasks, results = [], []
                last = channel
                w = workers.get(channel)
                pid = w.pid if w is not None else None  # whose results ``tasks`` holds
                if w is not None and w.close_error is None:
                    w.heard = True
            # Nothing behind a frame we cannot trust counts, not even a well-formed
            # result in the same read: the stream is out of step or forged from there on.
            if w is None or w.close_error is not None:
                continue
            if kind == _DONE and len(payload) >= _ELAPSED_SIZE:
                t = w.in_flight.pop(ident, None)
                if t is None:
                    continue  # already retired or revoked: its outcome counts no more
                ran = True
                t.started = True  # too short for its start mark to have been seen, mostly
                if w.current is t:
                    w.current = None
                elapsed.append(_elapsed_of(payload)[0])
                # Whatever unpickling raises (SystemExit from a reducer included) is this
                # task's failure, and the other frames of the read go on (``_outcome``).
                try:
                    if len(payload) < COPY_BELOW:
                        result = _loads(payload[_ELAPSED_SIZE:])
                    else:
                        result = _loads(memoryview(payload)[_ELAPSED_SIZE:])
                except BaseException as exc:
                    error = result_error(t.key, exc, "in the parent")
                    if tasks:
                        self._succeed(tasks, results, w.pid)
                        tasks, results = [], []
                    self._finish(t, _FAILED, exception=error, pid=w.pid)
                    continue
                tasks.append(t)
                results.append(result)
                continue
            # Any other frame: what came before it is recorded first, in its order.
            if tasks:
                self._succeed(tasks, results, w.pid)
                tasks, results = [], []
            if ran:
                ran = False
                self._init_failures = 0  # a task ran, so the initializer works
                self._last_progress = now
            self._on_frame(w, kind, ident, payload, now)
        if tasks:
            self._succeed(tasks, results, pid)
        if ran:
            self._init_failures = 0
            self._last_progress = now
        if elapsed:
            self._depth.observe_all(elapsed)

    def _read_marks(self, now: float) -> None:
        """Note the tasks each worker began since the last look (their start marks)."""
        assert self._marks is not None
        read = self._marks.read
        for w in self._workers.values():
            if not w.in_flight:
                continue
            mark = read(w.slot)
            if mark != w.mark:
                w.mark = mark
                # A task began: it got through start-up, as a frame would have shown (a
                # worker whose first task blocks sends none).
                w.heard = True
                if w.asked:
                    self._mark_started_but_asked(w, mark, now)
                else:
                    self._mark_started(w, mark, now, publish=True)

    def _mark_started_but_asked(self, w: _Worker[TaskT], mark: int, now: float) -> None:
        """``_mark_started`` for a worker with CANCELs unanswered: a mark past a task a
        CANCEL names does not say that one started (the worker may have skipped it and
        gone on), its answer does (``_on_cancel_answer``). Off the hot path: a worker
        with no CANCEL out never comes here."""
        asked = [t for t in w.in_flight.values() if t.seq in w.asked and not t.started]
        for t in asked:  # passed over by _mark_started as if started, for this call
            t.started = True
        try:
            self._mark_started(w, mark, now, publish=True)
        finally:
            for t in asked:
                t.started = False

    def _mark_started(self, w: _Worker[TaskT], mark: int, now: float, *, publish: bool) -> None:
        """Every task of ``w`` numbered up to ``mark`` has begun; the last one runs."""
        for t in w.in_flight.values():  # dispatch order, so numbers only grow
            if t.seq > mark:
                break
            if t.started:
                continue
            t.started = True
            t.began = now
            w.current = t
            if t.timeout is not None:
                t.deadline = now + t.timeout
                self._timed[t.tid] = t
            if publish:
                self._starting.append((t, w.pid))

    def _on_frame(
        self,
        w: _Worker[TaskT],
        kind: int,
        ident: int,
        payload: bytes | bytearray | memoryview,
        now: float,
    ) -> None:
        if kind in (_DONE, _RAISED):
            t = w.in_flight.get(ident)
            if t is None:
                return
            self._init_failures = 0  # a task ran, so the initializer works
            self._last_progress = now
            t.started = True  # too short for its start mark to have been seen, mostly
            if w.current is t:
                w.current = None
            if kind == _DONE:  # ``_apply`` ends the rest: this one is too short to read
                w.close_error = FrameError(
                    f"a DONE frame of {len(payload)} bytes from worker pid {w.pid} "
                    "is too short to carry its run time"
                )
                self._kill_worker(w, None)
                return
            # Unpickling cannot raise here: whatever it raises (SystemExit from a reducer
            # included) is this task's failure, and the other frames of the read go on.
            self._finish(t, _FAILED, exception=_remote_exception(t.key, payload), pid=w.pid)
            del w.in_flight[ident]
            return
        if kind == _REVOKED and w.revoking:
            self._on_revoked(w, ident)
            return
        if kind == _REFUSED:
            self._on_refused(w, ident)
            return
        if kind in (_CANCELLED, _TOO_LATE) and ident in w.asked:
            self._on_cancel_answer(w, ident, kind == _CANCELLED, now)
            return
        if kind == _INIT_FAILED:
            # Counted now, not when the worker is retired: by then a replacement would
            # already be on its way and the back-off would come too late.
            self._note_init_failure(w, _remote_exception(None, payload))
            return
        if kind == _SHARED:
            self._on_shared(w, ident, payload, now)
            return
        if kind == _UP:  # a warm pool's worker started up (``heard``, set by ``_apply``)
            self._init_failures = 0  # so the initializer works
            return
        # Any other kind from a worker is a broken stream.
        w.close_error = FrameError(f"unexpected frame kind {kind} from worker pid {w.pid}")
        self._kill_worker(w, None)

    def _on_shared(
        self, w: _Worker[TaskT], ident: int, ref: bytes | bytearray | memoryview, now: float
    ) -> None:
        """An outcome whose payload is in the worker's shared ring: handled as if it had
        come by the pipe, then its space goes back to the worker (``worker._region``)."""
        region = w.region
        try:
            if region is None:
                raise FrameError("a SHARED frame from a worker that has no shared region")
            kind, payload = region.take(ref)
        except FrameError as exc:
            w.close_error = exc
            self._kill_worker(w, None)
            return
        try:
            if kind == _DONE and len(payload) >= _ELAPSED_SIZE:  # ended where all DONEs are
                self._apply([(w.wid, kind, ident, payload)], now)
            else:
                self._on_frame(w, kind, ident, payload, now)
        finally:
            del payload
            region.release()  # unpickled: nothing refers to the ring's bytes any more

    def _on_revoked(self, w: _Worker[TaskT], last_started: int) -> None:
        """The worker will skip everything it was sent after ``last_started``: those
        tasks go back to the front of the queue, in their order, for any worker."""
        upto, w.revoking = w.revoking, 0
        # Only up to what the REVOKE covered: a task sent after it (at depth 1 a worker
        # may get one once its queue drained) runs where it is.
        back = [t for t in w.in_flight.values() if last_started < t.seq <= upto and not t.started]
        for t in back:
            self._take_back(w, t)
        self._requeue_or_cancel(back, revoked=True)

    def _on_cancel_answer(self, w: _Worker[TaskT], seq: int, skipped: bool, now: float) -> None:
        """The worker's answer to the CANCEL of its task ``seq``: it will not run it
        (``skipped``: it ends cancelled, or goes back to the queue if ``uncancel`` came
        meanwhile), or it had started it (its start mark says so; it runs on)."""
        w.asked.discard(seq)
        t = next((t for t in w.in_flight.values() if t.seq == seq), None)
        if t is None or t.started:
            return  # taken back already (a REVOKE's answer came first), or ended
        if skipped:
            self._take_back(w, t)
            self._requeue_or_cancel([t])
        else:  # started: a mark read before may have passed over it (above)
            current = w.current
            self._mark_started_but_asked(w, seq, now)
            if w.mark > seq:  # a later task began since: that one is the current one
                w.current = current

    @staticmethod
    def _take_back(w: _Worker[TaskT], t: TaskT) -> None:
        """``t`` leaves ``w`` unstarted (revoked, skipped, claimed or refused): no longer
        one of its tasks, and queued as far as its phase says, until the caller requeues
        or ends it. A start mark read before may have covered it: it never ran."""
        del w.in_flight[t.tid]
        if w.current is t:
            w.current = None
        t.phase = _QUEUED
        w.sent -= 1

    def _requeue_or_cancel(self, back: list[TaskT], *, revoked: bool = False) -> None:
        """Tasks taken back unstarted: to the front of the queue, in their order, but
        the ones ``cancel()`` asked for, which end here (CancelledError)."""
        requeue = [t for t in back if not t.cancelling]
        if revoked:
            self._stats["revoked"] += len(requeue)
        self._queue.extendleft(reversed(requeue))
        if len(requeue) < len(back):
            for t in back:
                if t.cancelling:
                    self._finish(t, _FAILED, exception=cancelled_error(t.key))

    def _on_refused(self, w: _Worker[TaskT], first: int) -> None:
        """The worker could not unpickle the BATCH whose first call is ``first`` and ran
        none of it: queue those calls again, to go one per frame, so that only a call
        that cannot be unpickled fails (with its own TaskUnpicklingError)."""
        back = [t for t in w.in_flight.values() if t.batch == first]
        for t in back:
            self._take_back(w, t)
            t.started = False
            t.deadline = None
            t.solo = True
        self._requeue_or_cancel(back)


def cancelled_error(key: Hashable) -> CancelledError:
    return CancelledError(f"task {key!r} cancelled")


def _remote_exception(key: Hashable, payload: bytes | bytearray | memoryview) -> BaseException:
    """Rebuild a worker's exception with its traceback as ``__cause__``; never raises."""
    return load_failure(key, payload, "in the parent")
