"""Big payloads through shared memory: one region per worker, two rings, small frames.

A pipe moves 64 KiB per wake-up, and the parent, which never blocks, moves one pipe-full
per worker per ``sync()``: a 1 MiB argument took 16 rounds of a scheduler's heartbeat to
reach its worker, and its result 16 more. So each worker gets a region of memory shared
with the parent alone, made by the parent before the worker starts and handed to it like
the start marks' page (``_marks.shared_fd``: an anonymous memfd on Linux, an unlinked
temporary file elsewhere). It holds two rings with one writer and one reader each:
parent to worker for calls (TASK and BATCH payloads), worker to parent for outcomes
(DONE, RAISED, INIT_FAILED payloads). A payload of ``threshold`` bytes or more is copied
into the writer's ring once, and the pipe carries a SHARED frame naming it: the header's
ident as the payload's own frame would have it, and ``REF`` (its kind, length and offset)
as the payload. The reader unpickles from the mapped memory and releases the space.

Layout: one page of header (``LAYOUT``: sizes the parent chose, so a worker started by
spawn reads them instead of trusting its own module; then each ring's *released* count,
a 64-bit counter on a cache line of its own, stored by its reader), the calls' ring, the
outcomes' ring. Sparse: a page costs memory only once a payload touched it.

The rules (docs/design.md, "Big payloads"):

* Every extent starts on a page and rings are consumed in order: the reader releases
  extents in the order it read their frames, which is the order the writer placed them
  (one pipe keeps order), so a count of releases tells the writer which extents are
  free. Nothing else is shared: the writer knows where it wrote, the frame says where
  to read.
* The writer copies the payload, then writes the frame (a system call): a reader that
  has read the frame sees the whole payload. A writer killed half way never wrote the
  frame, so nothing refers to the torn bytes, and the region dies with the worker.
* The reader stores the count after it is done with the bytes (``pickle.loads`` copied
  them out; nothing keeps a view of the ring). The store is one aligned 8-byte write,
  never seen half-written. The writer reads it without a system call; on x86-64 a store
  is never seen before the loads that precede it; on arm64 the architecture allows it,
  within the reader's out-of-order window, which the rest of ``pickle.loads`` and the
  interpreter's work before the store (microseconds) far exceed; the worker, the one
  reader in a hurry, releases after its next pipe write, a system call, anyway.
* Placement prefers the first ``warm`` bytes of a ring, whose pages stay allocated for
  the worker's life (an empty ring starts again at 0, so one payload at a time reuses the
  same pages and never faults); beyond them, pages are given back (``MADV_REMOVE``) as
  they are released, where the OS has it (Linux), so a 100 MB payload costs its memory
  only while it is in flight.
* No room: the parent, which never blocks, sends the payload through the pipe as before;
  a worker, which may block, keeps its unread outcomes within the warm pages and waits
  until the parent has released enough (it releases an extent in the same round it reads
  its frame). A payload larger than the ring always goes through the pipe.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import sys
import time
from collections import deque
from collections.abc import Sequence

from ..errors import FrameError
from ..frames import HEADER, Kind
from ..frames import MAGIC as MAGIC_FRAME
from ._marks import shared_fd, unmap_in_children

# The limits (docs/design.md, "Big payloads"): the parent reads them when it makes a
# region and writes them into its header; a worker reads them from there.
_MADV_REMOVE: int | None = getattr(mmap, "MADV_REMOVE", None)  # Linux: give pages back

THRESHOLD = 32 << 10  # payloads of this many bytes or more go through the ring (below
# it the pipe costs the parent less: measured in docs/design.md, "Big payloads")
WARM = 8 << 20  # bytes at the start of each ring kept allocated once used; beyond them
# pages go back to the OS as soon as their payload is released (Linux). A worker keeps
# its unread outcomes within them (it waits for the parent past that); the parent's calls
# and any payload larger than this may go beyond
RING_SIZE = (256 << 20) if sys.maxsize > 2**32 and _MADV_REMOVE is not None else WARM
# per ring: the largest payload it takes (larger ones use the pipe); address space, not
# memory, until used. Where pages cannot be given back (macOS), no larger than WARM: a
# 100 MB payload would otherwise keep 100 MB of the ring's pages for the worker's life

PAGE = mmap.PAGESIZE
MAGIC = b"PPRG"
LAYOUT = struct.Struct("<4sIQQQ")  # magic, version, ring size, warm, threshold
VERSION = 1
RELEASED = (64 // 8, 128 // 8)  # index, in 8-byte words, of each ring's released count
CALLS, OUTCOMES = 0, 1  # the rings: parent -> worker, worker -> parent
REF = struct.Struct("<BxxxxxxxQQ")  # a SHARED frame's payload: kind, length, offset
# A whole SHARED frame in one pack: the frames.HEADER fields, then REF's.
SHARED_FRAME = struct.Struct("<BBHIQBxxxxxxxQQ")
WAIT_FIRST = 0.001  # s a worker first sleeps while its ring is full; doubles (the parent
WAIT_MOST = 0.01  # is behind then: looking sooner gains nothing) up to this


class _Writer:
    """One ring's writer: where the payloads it placed lie, and which are released."""

    __slots__ = ("base", "live", "made", "released", "size", "slot", "view", "warm")

    def __init__(
        self, view: memoryview, words: memoryview, ring: int, size: int, warm: int
    ) -> None:
        self.view = view
        self.base = PAGE + ring * size
        self.size = size
        self.warm = warm
        self.released = words  # the region's first page as 64-bit words
        self.slot = RELEASED[ring]
        self.live: deque[tuple[int, int]] = deque()  # (start, end) of unreleased extents
        self.made = 0  # extents ever placed

    def place(self, length: int, spill: bool = True) -> int | None:
        """The offset where ``length`` bytes fit now, or None. Past the warm pages only
        if ``spill`` (else None: the caller waits for the warm ones to be released)."""
        need = -(-length // PAGE) * PAGE
        if need > self.size:
            return None
        live = self.live
        if live:
            # Forget what the reader released. A count it could not have stored (above
            # what was made, or below what it stored before) is ignored: a broken reader
            # only hurts itself.
            gone = self.released[self.slot] - (self.made - len(live))
            if gone > 0:
                for _ in range(min(gone, len(live))):
                    live.popleft()
        if not live:
            return 0  # empty: start again at the warm pages
        oldest = live[0][0]
        cursor = live[-1][1]
        if live[-1][0] >= oldest:  # not wrapped: free are [cursor, size) and [0, oldest)
            if cursor + need <= self.warm:
                return cursor
            if need <= oldest:
                return 0  # back to the warm start rather than on into cold pages
            return cursor if spill and cursor + need <= self.size else None
        return cursor if cursor + need <= oldest else None  # wrapped: free is [cursor, oldest)

    def copy(self, offset: int, pieces: Sequence[bytes | memoryview], length: int) -> None:
        """Copy ``pieces`` (``length`` bytes in all) to ``offset``, placed by ``place``."""
        pos = self.base + offset
        view = self.view
        for piece in pieces:
            n = len(piece)
            view[pos : pos + n] = piece
            pos += n
        self.live.append((offset, offset - (-length // PAGE) * PAGE))
        self.made += 1


class _Reader:
    """One ring's reader: the extents read and not yet released, in order."""

    __slots__ = (
        "base", "count", "held", "map", "punch", "released", "size", "slot", "view", "warm"
    )  # fmt: skip

    def __init__(
        self, m: mmap.mmap, view: memoryview, words: memoryview, ring: int, size: int, warm: int
    ) -> None:
        self.map = m
        self.view = view
        self.base = PAGE + ring * size
        self.size = size
        self.warm = warm
        self.released = words
        self.slot = RELEASED[ring]
        self.count = 0  # extents released so far: what the writer reads
        self.held: deque[tuple[int, int]] = deque()  # (start, end) read, not released
        self.punch = _MADV_REMOVE is not None

    def take(self, ref: bytes | bytearray | memoryview) -> tuple[int, memoryview]:
        """The kind and bytes a SHARED frame names; FrameError if it cannot be trusted."""
        try:
            kind, length, offset = REF.unpack(ref)
        except struct.error:
            raise FrameError(f"a SHARED frame of {len(ref)} bytes (expected {REF.size})") from None
        if kind == Kind.SHARED:
            raise FrameError("a SHARED frame names another SHARED frame")
        if offset % PAGE or offset + length > self.size:
            raise FrameError(
                f"a SHARED frame names {length} bytes at {offset}: not a page-aligned "
                f"extent of a ring of {self.size} bytes"
            )
        end = offset - (-length // PAGE) * PAGE  # its pages'
        self.held.append((offset, end))
        start = self.base + offset
        return kind, self.view[start : start + length]

    def release(self) -> None:
        """Done with the oldest extent taken: give its cold pages back, tell the writer."""
        offset, end = self.held.popleft()
        if end > self.warm and self.punch:
            self._give_back(max(offset, self.warm), end)
        self.count += 1
        self.released[self.slot] = self.count

    def _give_back(self, start: int, end: int) -> None:
        """Return the pages of ``[start, end)`` to the OS (their contents are done with)."""
        if _MADV_REMOVE is None:
            return
        try:
            self.map.madvise(_MADV_REMOVE, self.base + start, end - start)
        except OSError:  # a file system without hole punching: the pages stay
            self.punch = False


class Region:
    """One worker's shared region, from either side: the parent writes calls and reads
    outcomes; the worker reads calls and writes outcomes."""

    __slots__ = ("__weakref__", "fd", "inbound", "map", "outbound", "threshold", "view", "words")

    def __init__(self, fd: int, *, worker: bool) -> None:
        self.fd = fd
        self.map = mmap.mmap(fd, 0)
        try:
            magic, version, size, warm, threshold = LAYOUT.unpack_from(self.map)
            if magic != MAGIC or version != VERSION:
                raise ValueError("not a pipepool region of this version")
        except BaseException:
            self.map.close()
            raise
        self.view = memoryview(self.map)
        self.words = self.view[:PAGE].cast("Q")
        self.threshold = threshold
        ours, theirs = (OUTCOMES, CALLS) if worker else (CALLS, OUTCOMES)
        self.outbound = _Writer(self.view, self.words, ours, size, warm)
        self.inbound = _Reader(self.map, self.view, self.words, theirs, size, warm)
        unmap_in_children(self)  # only the two ends ever hold the region

    @classmethod
    def create(cls) -> Region:
        """The parent's side of a new worker's region; ``fd`` goes to the worker."""
        fd = shared_fd(PAGE + 2 * RING_SIZE, "pipepool-payloads")
        try:
            with mmap.mmap(fd, PAGE) as head:
                LAYOUT.pack_into(head, 0, MAGIC, VERSION, RING_SIZE, WARM, THRESHOLD)
            return cls(fd, worker=False)
        except BaseException:
            os.close(fd)
            raise

    def put(self, kind: int, payload: bytes) -> bytes | None:
        """Parent: copy a call's payload into the ring; its SHARED reference, or None when
        the ring has no room now (the caller sends the payload through the pipe)."""
        out = self.outbound
        length = len(payload)
        offset = out.place(length)
        if offset is None:
            return None
        pos = out.base + offset
        out.view[pos : pos + length] = payload
        out.live.append((offset, offset - (-length // PAGE) * PAGE))
        out.made += 1
        return REF.pack(kind, length, offset)

    def send(self, buffers: list[bytes]) -> list[bytes]:
        """Worker: a frame's buffers (header, then its payload's pieces) as the one buffer
        of a SHARED frame whose payload is in the ring, waiting for room if the ring is
        full; the buffers as they were if the payload is larger than the ring, or cannot
        be copied as bytes."""
        _magic, kind, _flags, length, ident = HEADER.unpack(buffers[0])
        out = self.outbound
        need = -(-length // PAGE) * PAGE
        if length < self.threshold or need > out.size:
            return buffers
        pieces: list = buffers[1:]
        for i, piece in enumerate(pieces):
            if type(piece) is not bytes:
                try:
                    pieces[i] = memoryview(piece).cast("B")
                except TypeError:  # not C-contiguous: the pipe copies it as it can
                    return buffers
        # Into the warm pages, waiting for them if need be (the parent releases what it
        # read every round): a worker running ahead of its parent would otherwise fault
        # in fresh pages for every payload. One larger than they are goes wherever it fits.
        spill = need > out.warm
        offset = out.place(length, spill)
        pause = WAIT_FIRST
        while offset is None:
            time.sleep(pause)
            pause = min(pause * 2, WAIT_MOST)
            offset = out.place(length, spill)
        out.copy(offset, pieces, length)
        return [
            SHARED_FRAME.pack(MAGIC_FRAME, Kind.SHARED, 0, REF.size, ident, kind, length, offset)
        ]

    def take(self, ref: bytes | bytearray | memoryview) -> tuple[int, memoryview]:
        """The payload a SHARED frame names, as a view of the ring (``_Reader.take``)."""
        return self.inbound.take(ref)

    def release(self) -> None:
        """Done with the oldest payload taken (``_Reader.release``)."""
        self.inbound.release()

    def release_all(self) -> None:
        """Done with every payload taken."""
        inbound = self.inbound
        while inbound.held:
            inbound.release()

    def close(self) -> None:
        """Unmap (the fd, if still open, is the caller's). A view a traceback still holds
        keeps the mapping until it goes; nothing of it is on any file system."""
        self.threshold = 1 << 62  # nothing more goes through it
        self.inbound.held.clear()
        self.words.release()
        self.view.release()
        with contextlib.suppress(BufferError):
            self.map.close()

    unmap = close  # in a process forked from this one (``_marks.unmap_in_children``)
