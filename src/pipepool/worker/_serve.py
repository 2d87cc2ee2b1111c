"""The worker's task loop: read a frame, mark the task started, run it, send the outcome.

``serve`` runs in the worker's main thread; ``_watch``, its second thread, ends the
process when the lifeline closes and answers REVOKE through the ``_Gate`` both share.
The invariants they keep are listed in ``pipepool.worker`` (docs/design.md, "Start
marks" and "The revoke protocol").
"""

from __future__ import annotations

import os
import pickle
import select
import threading
from collections.abc import Callable
from time import perf_counter
from typing import Any

from .. import _spin, _startup_watch
from .. import loop as _impl
from .._outcome import encode_failure, unsendable_result
from ..errors import FrameError, TaskUnpicklingError
from ..frames import (
    ELAPSED,
    HEADER,
    MAGIC,
    PICKLE_PROTOCOL,
    Kind,
    encode_header,
    split_frames,
)
from . import _tree
from ._marks import StartMark
from ._region import Region

EXIT_PARENT_DIED = _startup_watch.EXIT_PARENT_DIED  # the lifeline closed: the parent is gone
EXIT_INIT_FAILED = 71  # the initializer raised; the parent got an INIT_FAILED frame
EXIT_BAD_FRAME = 72  # the activity pipe carried a frame that cannot be trusted
SMALL_WRITE = 16384  # bytes up to which a frame's parts are joined before one write;
# above it they go by writev, so a big result is never copied just to be sent

_retiring = False  # set by retire_after_task(): leave the loop after this task's outcome


def retire_after_task() -> None:
    """Called from inside a task: this worker exits cleanly once the task's outcome is
    sent, as if it had reached ``max_tasks_per_child`` (the parent counts a recycle and
    starts a replacement; anything already sent to it and not started runs elsewhere).
    Integrations use it to recycle a worker whose memory grew past a limit."""
    global _retiring
    _retiring = True


def _write_all(fd: int, buffers: list[bytes]) -> None:
    """Blocking gather write that survives partial writes (a signal can cut one short)."""
    if len(buffers) == 1 or sum(map(len, buffers)) <= SMALL_WRITE:
        # Small frames (most outcomes): one join and one write beat a gather list.
        data = buffers[0] if len(buffers) == 1 else b"".join(buffers)
        written = os.write(fd, data)
        if written == len(data):
            return
        views = [memoryview(data)[written:]]
    else:
        views = [memoryview(b) for b in buffers if b]
    while views:
        written = os.writev(fd, views[:64])
        while written:
            if written >= len(views[0]):
                written -= len(views.pop(0))
            else:
                views[0] = views[0][written:]
                written = 0


class _Gate:
    """What the task loop and the watcher thread share: the result pipe's writes (whole
    frames only, never interleaved) and the start-or-skip decision of each task."""

    __slots__ = (
        "claims",
        "current",
        "lock",
        "mark",
        "marks",
        "region",
        "result_fd",
        "revoked_upto",
        "shared_min",
        "skipped",
        "slot",
    )

    def __init__(
        self, result_fd: int, mark: StartMark | None = None, region: Region | None = None
    ) -> None:
        self.lock = threading.Lock()
        self.result_fd = result_fd
        self.mark = mark  # None only in tests that drive serve() without a pool
        # Where the mark is stored, bound once: ``start`` writes it there itself (a
        # method call per task less); a page of our own when there is no pool.
        self.marks, self.slot = mark.view() if mark is not None else (_no_marks(), 0)
        # Its ring of cancel claims (docs/design.md, "Cancel claims"), or None: the
        # parent then cancels only by CANCEL and REVOKE frames.
        self.claims = mark.claims if mark is not None else None
        self.region = region  # big payloads' shared rings; None: everything by the pipe
        # A payload this long goes into the ring (its threshold; never without one).
        self.shared_min = region.threshold if region is not None else 1 << 62
        self.current = 0  # sequence number of the last task decided to start
        self.revoked_upto = 0  # tasks numbered above current and up to this are skipped
        self.skipped: set[int] = set()  # tasks numbered above current a CANCEL named

    def write(self, buffers: list[bytes]) -> None:
        """Write one frame (header, then its payload's pieces; or a small frame whole,
        in one piece); a big payload goes into the shared ring first, and the pipe
        carries its reference (``_region``). Only the main thread writes payloads, so the
        ring needs no lock of its own."""
        if len(buffers) == 1:  # a small frame whole (most outcomes): below any threshold
            data = buffers[0]
            with self.lock:
                written = os.write(self.result_fd, data)
                if written != len(data):  # cut short (a signal): the rest, in order
                    _write_all(self.result_fd, [data[written:]])
            return
        if len(buffers) > 3:  # a result in pieces: big, some maybe views of its memory
            if self.region is not None:
                buffers = self.region.send(buffers)  # copied into the ring: 1 buffer left
            if len(buffers) > 3:  # for the pipe, whose write may wait: a copy of its own
                buffers = [b if type(b) is bytes else bytes(b) for b in buffers]
        elif len(buffers[-1]) >= self.shared_min and self.region is not None:
            buffers = self.region.send(buffers)
        with self.lock:
            _write_all(self.result_fd, buffers)

    def start(self, seq: int) -> bool:
        """Decide task ``seq``: False if it was revoked, cancelled or claimed by the
        parent, else store its start mark and return True; either way atomically with
        ``revoke`` and ``cancel`` (the lock), and with the parent's claim (the claim
        word's compare-and-swap: exactly one of the two decides)."""
        with self.lock:
            claims = self.claims
            if seq <= self.revoked_upto or (self.skipped and seq in self.skipped):
                self.skipped.discard(seq)
                if claims is not None:
                    claims.skip(seq)  # the word says skipped, as a claim would
                return False
            if claims is not None and not claims.decide(seq):
                return False  # the parent claimed it: its cancel() said True
            self.current = seq
            self.marks[self.slot] = seq  # the start mark (StartMark.set, inline)
            return True

    def revoke(self, upto: int) -> None:
        """Skip every task not yet started up to ``upto``; say which ran last."""
        with self.lock:
            self.revoked_upto = max(self.revoked_upto, upto)
            _write_all(self.result_fd, [encode_header(Kind.REVOKED, self.current, 0)])

    def cancel(self, seq: int) -> None:
        """Skip task ``seq`` if it has not started (CANCELLED), else say it had
        (TOO_LATE); either way atomically with ``start``. The tasks around it go on."""
        with self.lock:
            if seq > self.current:
                self.skipped.add(seq)
                kind = Kind.CANCELLED
            else:
                kind = Kind.TOO_LATE
            _write_all(self.result_fd, [encode_header(kind, seq, 0)])


def _watch(lifeline_fd: int, control_fd: int, gate: _Gate) -> None:
    """Exit at the lifeline's EOF; answer REVOKE and CANCEL frames from the control pipe."""
    # A pipe's EOF, not prctl(PR_SET_PDEATHSIG): that is Linux-only and fires when the
    # parent *thread* that started us exits; the lifeline works the same on macOS.
    poller = select.poll()
    poller.register(lifeline_fd, select.POLLIN)
    poller.register(control_fd, select.POLLIN)
    # The lifeline is watched from here on: a spawn worker's start-up watch, which
    # covered its imports, ends (``_startup_watch``).
    _startup_watch.stop()
    control = bytearray()
    try:
        while True:
            for fd, _ in poller.poll():
                if fd == lifeline_fd:
                    if not os.read(lifeline_fd, 1):
                        _tree.kill_own_group()  # the task's processes go with us
                        os._exit(EXIT_PARENT_DIED)
                    continue
                data = os.read(fd, 4096)
                if not data:  # the parent stopped us: the activity pipe's EOF ends the loop
                    poller.unregister(fd)
                    continue
                control += data
                frames: list[tuple[int, int, bytes]] = []
                split_frames(control, frames, 0)
                for kind, ident, _payload in frames:
                    if kind == Kind.REVOKE:
                        gate.revoke(ident)
                    elif kind == Kind.CANCEL:
                        gate.cancel(ident)
                    else:
                        os._exit(EXIT_BAD_FRAME)
    except FrameError:
        os._exit(EXIT_BAD_FRAME)
    except OSError:
        pass
    os._exit(EXIT_PARENT_DIED)


def _no_marks() -> memoryview:
    """A start-mark slot nobody reads: a gate's without a pool (tests drive serve())."""
    return memoryview(bytearray(8)).cast("Q")


def _failure_frame(kind: int, ident: int, exc: BaseException) -> list[bytes]:
    """Header and payload carrying ``pickle((traceback text, pickle(exception)))``
    (``_outcome.encode_failure``)."""
    payload = pickle.dumps(encode_failure(exc), PICKLE_PROTOCOL)
    return [encode_header(kind, ident, len(payload)), payload]


_result_parts: list = []


class _ResultSink:
    """The result pickler's file: it keeps what the pickler writes, as written."""

    write = staticmethod(_result_parts.append)


# Results are pickled by this one pickler, not by ``pickle.dumps``, so that a bytes object
# of 64 KiB or more inside a result is a piece of its own: the C pickler hands such a
# payload straight to its file's write() instead of copying it into its buffer, and the
# pieces go out behind the frame header in the worker's one writev. A 1 MiB result is
# then not first copied into a fresh 1 MiB pickle (that copy was most of the worker's CPU
# per 1 MiB result). The bytes on the wire are dumps's; a small result is one piece and
# costs what dumps costs. dump() starts from an empty buffer, also after one that failed.
_result_pickler = pickle.Pickler(_ResultSink, PICKLE_PROTOCOL)


_SCALARS = frozenset({int, float, bool, complex, type(None)})  # hold no buffer: dumps is cheaper
_DONE = int(Kind.DONE)  # a plain name: an enum member's look-up costs more, per task
_ELAPSED_SIZE = ELAPSED.size
_pack_elapsed = ELAPSED.pack
_header = HEADER.pack  # a frame's header, for payloads far below MAX_PAYLOAD
_dumps = pickle.dumps


def _done_frame(ident: int, elapsed: bytes, result: object) -> list[bytes]:
    """The DONE frame carrying ``elapsed`` and ``pickle(result)``: one piece for a
    scalar (header and payload joined: one buffer to write), else header and pieces."""
    if type(result) in _SCALARS:
        data = _dumps(result, PICKLE_PROTOCOL)
        return [_header(MAGIC, _DONE, 0, _ELAPSED_SIZE + len(data), ident) + elapsed + data]
    parts = _result_parts
    try:
        _result_pickler.dump(result)
    except BaseException:
        parts.clear()
        raise
    finally:
        _result_pickler.clear_memo()  # the memo holds the result: let it go now
    if len(parts) == 1:
        data = parts.pop()
        return [encode_header(Kind.DONE, ident, len(elapsed) + len(data)), elapsed, data]
    # A bytearray (or buffer) piece is still the result's own mutable memory: copied
    # before the frame leaves (``_Gate.write``), so what is sent is the result as it was
    # returned.
    pieces = parts.copy()
    parts.clear()
    size = len(elapsed) + sum(len(p) if type(p) is bytes else memoryview(p).nbytes for p in pieces)
    return [encode_header(Kind.DONE, ident, size), elapsed, *pieces]


def _outcome(ident: int, payload: bytes) -> list[bytes]:
    """Unpickle and run one task sent alone; return the frame that reports how it ended."""
    try:
        fn, args, kwargs = pickle.loads(payload)
    except BaseException as exc:  # any unpickling failure is the task's, not ours
        error: Exception = TaskUnpicklingError(
            f"the worker could not unpickle the task ({type(exc).__name__}: {exc}); "
            "with spawn or forkserver the function must be importable by module name",
            part="task",
        )
        error.__cause__ = exc
        return _failure_frame(Kind.RAISED, ident, error)
    del payload
    return _run(ident, fn, args, kwargs)


def _run(ident: int, fn: Callable[..., Any], args: tuple, kwargs: dict) -> list[bytes]:
    """Run one call; return the frame that reports how it ended."""
    began = perf_counter()
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # SystemExit and friends are outcomes too
        return _failure_frame(Kind.RAISED, ident, exc)
    finally:
        del fn, args, kwargs
    elapsed = _pack_elapsed(perf_counter() - began)
    if type(result) in _SCALARS:  # most outcomes: _done_frame's first case, inline
        data = _dumps(result, PICKLE_PROTOCOL)
        return [_header(MAGIC, _DONE, 0, _ELAPSED_SIZE + len(data), ident) + elapsed + data]
    try:
        return _done_frame(ident, elapsed, result)
    except BaseException as exc:
        return _failure_frame(Kind.RAISED, ident, unsendable_result(result, exc))


def _unpickle_batch(payload: bytes, count: int) -> list | None:
    """The calls of a BATCH frame, or None when it cannot be unpickled here."""
    try:
        calls = pickle.loads(payload)
    except BaseException:  # the parent resends them one per frame: only the bad one fails
        return None
    if not isinstance(calls, list) or len(calls) != count:
        raise FrameError(f"a BATCH frame announced {count} calls and carried another shape")
    return calls


def _shared_payload(region: Region | None, ref: bytes) -> tuple[int, Any]:
    """The kind and payload a SHARED frame names in the calls' ring; a reference that
    cannot be trusted (or a SHARED frame without a region) is a bad frame."""
    if region is None:
        os._exit(EXIT_BAD_FRAME)
    try:
        return region.take(ref)
    except FrameError:
        os._exit(EXIT_BAD_FRAME)


def serve(
    activity_fd: int,
    result_fd: int,
    max_tasks: int | None = None,
    impl: str | None = None,
    gate: _Gate | None = None,
) -> None:
    """Run tasks from ``activity_fd`` until EOF (or ``max_tasks``), outcomes to ``result_fd``.

    ``impl`` picks the frame reader ("python" or "cython"), the parent's loop by default;
    ``gate`` is shared with the watcher thread that answers REVOKE frames and holds the
    start mark.
    """
    reader = _impl.load(impl)[1].FrameReader(activity_fd)
    gate = gate or _Gate(result_fd)
    region = gate.region
    held = region.inbound.held if region is not None else ()  # ring payloads being read
    shared, task, batch = int(Kind.SHARED), int(Kind.TASK), int(Kind.BATCH)
    start, write = gate.start, gate.write  # per call: bound once
    served = 0
    seq = 0  # calls read so far: the numbering start marks, REVOKE and REVOKED use
    # After an outcome, the next task may come within microseconds (a caller that waits
    # for each result): poll the activity pipe briefly before sleeping in read() (_spin).
    spin = _spin.Spin() if _spin.ENABLED else None
    activity = select.poll()
    activity.register(activity_fd, select.POLLIN)

    def readable() -> bool:
        return bool(activity.poll(0))

    while (max_tasks is None or served < max_tasks) and not _retiring:
        if held and region is not None:
            # The last frame's payload was in the shared ring and is done with: unpickled
            # and its outcome written since (a system call), or skipped unread.
            region.release_all()
        if spin is not None and served and not reader.buffered():
            spin.wait(readable)
        try:
            frame = reader.read()
        except FrameError:
            os._exit(EXIT_BAD_FRAME)
        if frame is None:
            break
        kind, ident, payload = frame
        del frame
        if kind == shared:
            kind, payload = _shared_payload(region, payload)
        if kind == task:
            seq += 1
            if start(seq):  # else revoked: the parent gave it to another worker
                # The outcome is in the pipe before the next mark: a later crash never
                # loses it, and a dead worker's lost task is the one its mark names.
                write(_outcome(ident, payload))
                served += 1
            del payload
            continue
        if kind != batch:
            os._exit(EXIT_BAD_FRAME)
        try:
            calls = _unpickle_batch(payload, ident)
        except FrameError:
            os._exit(EXIT_BAD_FRAME)
        del payload
        if calls is None:
            gate.write([encode_header(Kind.REFUSED, seq + 1, 0)])
            seq += ident
            continue
        for i, call in enumerate(calls):
            calls[i] = None  # free each call's arguments once it has run
            seq += 1
            if start(seq):
                ident, fn, args, kwargs = call  # ident: the task id, as for a TASK frame
                del call
                write(_run(ident, fn, args, kwargs))
                del fn, args, kwargs
                served += 1
                if _retiring:  # the rest of the batch never started: it runs elsewhere
                    break
        # A worker never gets more calls than max_tasks_per_child allows, so a batch is
        # never cut short by it; ``served`` is checked again before the next read.
