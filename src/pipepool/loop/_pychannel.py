"""A channel's buffers, in the pure twin: the queue of outgoing frames with the offset
already written, and the incoming frame not yet whole (the twin of ``pyx/_channel.pxi``).

No system calls here: ``PipeLoop`` (``_pyloop``) makes them and hands this module what a
write took or a read brought; this module keeps the counts and splits the bytes. The
loop imports it with its first channel: a worker, which loads ``_pyloop`` but makes no
channel, never does.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from ..frames import HEADER, HEADER_SIZE, MAGIC, check_header, encode_header
from ._pyloop import BIG_FRAME, BIG_TRUST  # the loop's tunables, declared with the others

if TYPE_CHECKING:  # what pump() returns, declared with the twins' interface
    from ._interface import Frame


class _Channel:
    __slots__ = (
        "big",
        "big_filled",
        "big_header",
        "big_size",
        "channel",
        "closed",
        "exit_fd",
        "inbuf",
        "offset",
        "out",
        "pending",
        "polling_out",
        "read_fd",
        "write_dead",
        "write_fd",
    )

    def __init__(self, channel: int, write_fd: int, read_fd: int, exit_fd: int) -> None:
        self.channel = channel
        self.write_fd = write_fd
        self.read_fd = read_fd
        self.exit_fd = exit_fd  # readable once the far end's process exited, or -1
        # (kind, ident, header, payload as given, its bytes: the payload or a byte view)
        self.out: deque[tuple[int, int, bytes, bytes, bytes | memoryview]] = deque()
        self.offset = 0  # bytes of out[0] already written
        self.pending = 0  # bytes queued and not yet written
        self.inbuf = bytearray()  # an incomplete small frame (or header), carried over
        # A big frame being read in place: its buffer (capacity = len(big)), the payload
        # bytes in it so far, its header's (kind, ident) and the length that header said.
        self.big: bytearray | None = None
        self.big_filled = 0
        self.big_header = (0, 0)
        self.big_size = 0
        self.closed = False  # reported closed by pump; nothing more is read
        self.write_dead = False  # EPIPE seen: the reader is gone
        self.polling_out = False

    def push(self, kind: int, ident: int, payload: bytes) -> None:
        """Queue one frame, its header encoded once; TypeError (nothing queued) if
        ``payload`` is no C-contiguous buffer."""
        data = as_bytes(payload)
        header = encode_header(kind, ident, len(data))
        self.out.append((kind, ident, header, payload, data))
        self.pending += HEADER_SIZE + len(data)

    def advance(self, written: int) -> None:
        """Drop what a write took: whole frames off the queue, and the offset into the
        first one left."""
        out = self.out
        self.pending -= written
        while written:
            size = HEADER_SIZE + len(out[0][4]) - self.offset
            if written < size:
                self.offset += written
                return
            written -= size
            out.popleft()
            self.offset = 0

    def take(self, data: bytes, frames: list[Frame], max_payload: int) -> None:
        """Split the frames out of what arrived: whole ones into ``frames``, a big one's
        start into its own buffer (``big``), an incomplete small one into ``inbuf``.
        Raises FrameError at a header that cannot be trusted."""
        buf: bytes | bytearray = data
        if self.inbuf:  # an incomplete small frame (or header) from earlier reads comes first
            self.inbuf += data
            buf = self.inbuf
        start = 0
        end = len(buf)
        unpack = HEADER.unpack_from
        with memoryview(buf) as view:
            while end - start >= HEADER_SIZE:
                magic, kind, flags, length, ident = unpack(buf, start)
                if magic != MAGIC or flags or length > max_payload:
                    check_header(magic, flags, length, max_payload)
                begin = start + HEADER_SIZE
                stop = begin + length
                if length >= BIG_FRAME:
                    if stop <= end:  # whole already: one copy, as a small one
                        frames.append((self.channel, kind, ident, bytearray(view[begin:stop])))
                        start = stop
                        continue
                    # What arrived of it is copied once, the rest read into it. Only what
                    # arrived or BIG_TRUST is allocated: the header may be lying.
                    have = end - begin
                    big = bytearray(max(have, min(length, BIG_TRUST)))
                    big[:have] = view[begin:end]
                    self.big, self.big_filled = big, have
                    self.big_header, self.big_size = (kind, ident), length
                    start = end
                    break
                if stop > end:
                    break
                frames.append((self.channel, kind, ident, bytes(view[begin:stop])))
                start = stop
            if buf is data and start < end:
                self.inbuf += view[start:]
        if buf is not data:
            del self.inbuf[:start]


def as_bytes(payload: bytes) -> bytes | memoryview:
    """``payload`` itself if it is bytes, else a flat byte view of it (its ``len`` is the
    byte length: an int array's ``len`` counts items); TypeError if it is no C-contiguous
    buffer, the same error as the compiled twin raises."""
    if payload.__class__ is bytes:
        return payload
    view = memoryview(payload)  # TypeError: not a buffer at all
    if not view.c_contiguous:
        raise TypeError("a frame payload must be a C-contiguous buffer")
    return view.cast("B")
