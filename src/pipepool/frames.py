"""The wire format shared by the parent's PipeLoop and the worker.

A frame is a 16-byte little-endian header followed by ``length`` payload bytes::

    offset  size  field
    0       1     magic   0xA7, a cheap check that the stream is still in step
    1       1     kind    one of the ``Kind`` values below
    2       2     flags   reserved, must be 0
    4       4     length  payload length in bytes (0 .. MAX_PAYLOAD)
    8       8     ident   task id (0 where a kind carries none; BATCH: its call count)

The payload, where a kind has one, is a pickle (protocol 5). ``kind`` and ``ident`` sit
in the header so that the hot path (dispatch bookkeeping, REVOKED) never unpickles.
There is no frame for "a task started": the worker stores a start mark in memory it
shares with the parent instead (``worker/_marks.py``; docs/design.md, "Start marks").

A decoder trusts nothing: a bad magic, non-zero flags or a length above the reader's
limit is a ``FrameError`` at once, and a reader allocates for the bytes that actually
arrived (the PipeLoop trusts a big frame's length for 4 MiB ahead of them, no more), so
a garbage length can neither hang the parent on a huge allocation nor make it wait for
data that will never come (the channel's EOF ends it).
"""

from __future__ import annotations

import enum
import os
import struct

from .errors import FrameError

HEADER = struct.Struct("<BBHIQ")
HEADER_SIZE = HEADER.size  # 16
MAGIC = 0xA7
MAX_PAYLOAD = 0xFFFFFFFF  # the most a uint32 length can say
PICKLE_PROTOCOL = 5
ELAPSED = struct.Struct("<d")  # a DONE payload's prefix: the call's run time, measured by
# the worker, which is what the adaptive depth learns from (no frame says "started")


class Kind(enum.IntEnum):
    """What a frame means; parent-to-worker kinds first."""

    TASK = 1  # parent → worker: pickle((fn, args, kwargs)), ident = task id
    # 2 was STARTED (worker → parent), replaced by start marks; a parent that reads it
    # treats the stream as broken, like any kind it does not expect
    DONE = 3  # worker → parent: ELAPSED (the seconds the call ran), then pickle(result)
    RAISED = 4  # worker → parent: pickle((traceback text, pickle(exception)))
    INIT_FAILED = 5  # worker → parent: as RAISED, ident 0; the worker exits after it
    REVOKE = 6  # parent → worker, on the control pipe: skip every task not yet started,
    # up to this worker's sequence number ``ident`` (tasks numbered 1, 2, ... as sent)
    REVOKED = 7  # worker → parent: the answer; ident = sequence number of the last task
    # it started (0: none); every later one up to the REVOKE's number will not run
    BATCH = 8  # parent → worker: pickle([(task id, fn, args, kwargs), ...]), ident = how
    # many calls: one frame and one pickle for several tasks (the function pickled once)
    REFUSED = 9  # worker → parent: a BATCH that could not be unpickled, none of it run;
    # ident = the sequence number of its first call. The parent sends those calls again,
    # one per frame, so that only the call that cannot be unpickled fails
    CANCEL = 11  # parent → worker, on the control pipe: skip task number ``ident`` (a
    # sequence number) if it has not started; the tasks around it are not touched
    CANCELLED = 12  # worker → parent: the answer to CANCEL ``ident``: that task will not run
    TOO_LATE = 13  # worker → parent: the answer to CANCEL ``ident``: that task had started
    # (its start mark is stored); it runs on and reports as usual
    UP = 14  # worker → parent, once, ident 0, no payload: its start-up (and initializer)
    # is done. Sent only to a pool that keeps idle workers (``WorkerStart.announce``): a
    # busy worker's first outcome or start mark says as much, an idle one says nothing
    SHARED = 10  # either way: the payload of a frame of another kind lies in the sender's
    # ring of the worker's shared region (``worker/_region.py``); the payload here is
    # ``REF``: that kind, the length and the offset; ident = that frame's own ident


def encode_header(kind: int, ident: int, length: int) -> bytes:
    """Pack one header; a payload the header cannot describe is a FrameError."""
    if length > MAX_PAYLOAD:
        raise FrameError(
            f"payload of {length} bytes exceeds the frame limit of {MAX_PAYLOAD} bytes"
        )
    return HEADER.pack(MAGIC, kind, 0, length, ident)


def check_header(magic: int, flags: int, length: int, max_payload: int) -> None:
    """Raise FrameError when a decoded header cannot be trusted."""
    if magic != MAGIC:
        raise FrameError(f"bad frame magic 0x{magic:02x} (stream out of step or corrupted)")
    if flags != 0:
        raise FrameError(f"bad frame flags 0x{flags:04x} (reserved bits set)")
    if length > max_payload:
        raise FrameError(f"frame length {length} exceeds the limit of {max_payload} bytes")


def split_frames(
    buffer: bytearray, out: list, max_payload: int = MAX_PAYLOAD, tag: object = None
) -> None:
    """Move every whole frame at the front of ``buffer`` into ``out``.

    Appends ``(kind, ident, payload)``, or ``(tag, kind, ident, payload)`` when ``tag``
    is given; leaves a trailing partial frame in ``buffer``. Raises FrameError on a header
    that cannot be trusted (frames before it are already in ``out``).
    """
    start = 0
    end = len(buffer)
    unpack = HEADER.unpack_from
    while end - start >= HEADER_SIZE:
        magic, kind, flags, length, ident = unpack(buffer, start)
        if magic != MAGIC or flags or length > max_payload:
            del buffer[:start]
            check_header(magic, flags, length, max_payload)
        stop = start + HEADER_SIZE + length
        if stop > end:
            break
        payload = bytes(buffer[start + HEADER_SIZE : stop])
        out.append((kind, ident, payload) if tag is None else (tag, kind, ident, payload))
        start = stop
    if start:
        del buffer[:start]


class FrameReader:
    """Blocking frame reader over one fd, used by the worker on its activity pipe."""

    READ_SIZE = 1 << 18  # large reads: fewer syscalls for big payloads, cheap for small

    def __init__(self, fd: int, max_payload: int = MAX_PAYLOAD) -> None:
        self._fd = fd
        self._max_payload = max_payload
        self._buffer = bytearray()
        self._frames: list[tuple[int, int, bytes]] = []
        self._next = 0

    def buffered(self) -> bool:
        """True when a whole frame is available without reading."""
        return self._next < len(self._frames)

    def read(self) -> tuple[int, int, bytes] | None:
        """Return the next ``(kind, ident, payload)``, blocking; None at a clean EOF."""
        while self._next >= len(self._frames):
            self._frames.clear()
            self._next = 0
            data = os.read(self._fd, self.READ_SIZE)
            if not data:
                if self._buffer:
                    raise FrameError(
                        f"EOF in the middle of a frame ({len(self._buffer)} bytes buffered)"
                    )
                return None
            self._buffer += data
            split_frames(self._buffer, self._frames, self._max_payload)
        frame = self._frames[self._next]
        self._frames[self._next] = None  # type: ignore[call-overload]  # free big payloads early
        self._next += 1
        return frame
