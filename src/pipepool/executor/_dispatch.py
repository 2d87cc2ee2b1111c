"""LocalExecutor's dispatch step, and the revoke that takes back what it sent too far
ahead: every write the parent makes to a worker, the activity pipe's through the loop
(which never blocks) and the control pipe's REVOKE (which cannot).
"""

from __future__ import annotations

import itertools
import os
import pickle
import select
from collections.abc import Sequence

from .._task import QUEUED as _QUEUED
from .._task import RUNNING as _RUNNING
from .._task import Task, TaskT, pickle_call
from ..errors import TaskPicklingError
from ..events import State
from ..frames import HEADER_SIZE, MAX_PAYLOAD, PICKLE_PROTOCOL, Kind, encode_header
from ._state import LocalState, _Worker

_TASK, _BATCH = int(Kind.TASK), int(Kind.BATCH)  # plain names: events.py says why
_REVOKE, _CANCEL = int(Kind.REVOKE), int(Kind.CANCEL)
_ATOMIC = getattr(select, "PIPE_BUF", 512)  # bytes one pipe write delivers whole or not at
# all (POSIX: at least 512): CANCEL frames go in writes of at most this many bytes
_FAILED = State.FAILED


class Dispatcher(LocalState[TaskT]):
    """The dispatch step (give each worker with room the next tasks) and the revoke."""

    def _dispatch(self) -> None:
        """Give each worker with room the next queued tasks, up to the depth."""
        if not self._queue:
            return
        depth = self._depth.depth()
        open_workers = self._open_workers(depth)
        if open_workers:
            self._send_shares(self._share_out(open_workers, depth))

    def _share_out(
        self, open_workers: list[_Worker[TaskT]], depth: int
    ) -> dict[_Worker[TaskT], list[TaskT]]:
        """Each worker's share of the head of the queue, dealt breadth first (one task per
        worker per pass, so a deep dispatch stays fair); the queue is not changed yet."""
        queue = self._queue
        limit = self.max_tasks_per_child
        rooms = [
            min(depth - len(w.in_flight), limit - w.sent) if limit else depth - len(w.in_flight)
            for w in open_workers
        ]
        total = min(len(queue), sum(rooms))
        count = len(open_workers)
        if min(rooms) * count >= total:
            # Room for every pass: worker i takes tasks i, i + count, i + 2 count, ...
            # (the same deal as the passes below, in slices instead of one task at a time).
            head = list(itertools.islice(queue, total))
            return {w: head[i::count] for i, w in enumerate(open_workers) if i < total}
        shares: dict[_Worker[TaskT], list[TaskT]] = {}
        room = dict(zip(open_workers, rooms, strict=True))
        taken = 0
        while taken < total and open_workers:
            still_open = []
            for w in open_workers:
                if taken == total:
                    break
                shares.setdefault(w, []).append(queue[taken])
                taken += 1
                room[w] -= 1
                if room[w] > 0:
                    still_open.append(w)
            open_workers = still_open
        return shares

    def _send_shares(self, shares: dict[_Worker[TaskT], list[TaskT]]) -> None:
        """Take the shared-out tasks off the queue and send each worker its share (one
        frame and one writev each); what was not sent goes back to the front."""
        queue = self._queue
        popleft = queue.popleft
        taken_tasks = [popleft() for _ in range(sum(map(len, shares.values())))]
        try:
            for w, share in shares.items():
                self._send_share(w, share)
        except BaseException:
            # A pickling error (any BaseException a __reduce__ raises) stops the step:
            # what was not sent yet goes back to the front, in its order.
            unsent = [t for t in taken_tasks if t.phase == _QUEUED]
            queue.extendleft(reversed(unsent))
            raise

    def _send_share(self, w: _Worker[TaskT], share: list[TaskT]) -> None:
        """Send ``share`` to ``w``: one BATCH frame (one pickle) when it can, else a TASK
        frame per call; a call that cannot be pickled fails alone."""
        loop = self._loop
        assert loop is not None
        if len(share) > 1:
            solo = [t for t in share if t.solo]  # REFUSED once: alone from now on
            batch = [t for t in share if not t.solo] if solo else share
            payload = _pickle_batch(batch) if len(batch) > 1 else None
        else:
            payload = None
        if payload is not None:
            # Order matters: the send is the step that can fail, the bookkeeping
            # follows it and cannot, so a task is never counted as sent unless it was.
            loop.send(w.wid, *_via_region(w, _BATCH, len(batch), payload), False)
            in_flight = w.in_flight
            seq = w.seq
            first = seq + 1
            for t in batch:  # _note_sent for each, in one loop
                seq += 1
                t.phase = _RUNNING
                t.seq = seq
                t.batch = first
                in_flight[t.tid] = t
            w.seq = seq
            w.sent += len(batch)
            share = solo
        for t in share:
            try:
                payload = _pickle_call(t)
            except TaskPicklingError as exc:
                self._finish(t, _FAILED, exception=exc)
                continue
            loop.send(w.wid, *_via_region(w, _TASK, t.tid, payload), False)
            self._note_sent(w, t)
            t.batch = 0
        loop.flush(w.wid)

    @staticmethod
    def _note_sent(w: _Worker[TaskT], t: TaskT) -> None:
        t.phase = _RUNNING
        w.in_flight[t.tid] = t
        w.sent += 1
        w.seq += 1
        t.seq = w.seq

    def _revoke_trapped(self) -> None:
        """Take back the tasks sent ahead to a worker whose current task overruns (the
        depth policy says which workers).

        A REVOKE on the worker's control pipe (a 16-byte write into a pipe that holds at
        most one, so it cannot block) makes it skip them; its REVOKED answer says which,
        and ``_on_revoked`` queues them again.
        """
        for w in self._depth.trapped(self._workers.values()):
            self._send_revoke(w)

    @staticmethod
    def _send_revoke(w: _Worker[TaskT]) -> None:
        """Ask ``w`` to skip every task it holds and has not started (REVOKE); its REVOKED
        answer says which. Nothing if one is out already (it covers every task ``w``
        holds: a worker with a REVOKE out is sent nothing new) or if ``w`` is closing (its
        exit re-dispatches, or cancels, what it never started)."""
        if w.revoking or w.closing:
            return
        try:
            os.write(w.control_fd, encode_header(_REVOKE, w.seq, 0))
        except OSError:  # gone (EPIPE): its exit will re-dispatch what it never started
            return
        w.revoking = w.seq

    @staticmethod
    def _send_cancels(w: _Worker[TaskT], tasks: list[TaskT]) -> None:
        """Ask ``w`` to skip ``tasks`` (held by it, not started, flagged ``cancelling``).

        One CANCEL per task, so the tasks around them stay where they are; the worker
        answers each (CANCELLED or TOO_LATE). A REVOKE instead, and the tasks behind
        are sent again, only where that costs nothing or is needed: every task ``w``
        holds and has not started is being cancelled (one frame, nothing to send
        again). Nothing is written if a REVOKE is out (it covers every task ``w``
        holds) or ``w`` is closing (its exit cancels what it never started).
        """
        if w.revoking or w.closing:
            return
        asked = w.asked
        fresh = [t for t in tasks if t.seq not in asked]
        if not fresh:
            return
        if all(t.cancelling or t.started for t in w.in_flight.values()):
            Dispatcher._send_revoke(w)
            return
        frames = b"".join([encode_header(_CANCEL, t.seq, 0) for t in fresh])
        step = _ATOMIC - _ATOMIC % HEADER_SIZE  # whole frames per write
        for start in range(0, len(frames), step):
            try:
                os.write(w.control_fd, frames[start : start + step])
            except OSError:
                # Gone (EPIPE: its exit cancels them), or its control pipe full (a worker
                # whose task holds the GIL, thousands of cancels unread): the rest are
                # flagged and untold, as if the worker could not answer; each ends with
                # the worker if it never starts.
                return
            asked.update(t.seq for t in fresh[start // HEADER_SIZE : (start + step) // HEADER_SIZE])


def _via_region(w: _Worker[TaskT], kind: int, ident: int, payload: bytes) -> tuple[int, int, bytes]:
    """A frame as sent: a payload of the region's threshold or more is copied into the
    worker's shared ring and the frame becomes its SHARED reference; without room there
    it goes through the pipe as it is (the parent never waits for room)."""
    region = w.region
    if region is not None and len(payload) >= region.threshold:
        ref = region.put(kind, payload)
        if ref is not None:
            return Kind.SHARED, ident, ref
    return kind, ident, payload


def _pickle_call(t: Task) -> bytes:
    """Pickle a task's call; on failure name the key and the part that failed."""
    payload = pickle_call(
        t,
        advice="; functions must be importable (no lambdas or local functions) and "
        "arguments picklable",
    )
    if len(payload) > MAX_PAYLOAD:
        raise TaskPicklingError(
            f"task {t.key!r}: its pickled call is {len(payload)} bytes, above the "
            f"frame limit of {MAX_PAYLOAD}",
            key=t.key,
            part="arguments",
        )
    return payload


def _pickle_batch(batch: Sequence[Task]) -> bytes | None:
    """One pickle for several calls (a shared function is pickled once), or None when
    one of them cannot be pickled or it is too big: they then go one per frame, and
    ``_pickle_call`` names the call and the part at fault."""
    try:
        payload = pickle.dumps([(t.tid, t.fn, t.args, t.kwargs) for t in batch], PICKLE_PROTOCOL)
    except Exception:
        return None
    return payload if len(payload) <= MAX_PAYLOAD else None
