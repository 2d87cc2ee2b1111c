"""The pure-Python PipeLoop: the readable specification of the hot loop.

The compiled twin (``pipepool.loop._loop``, from ``pyx/_loop.pyx``) has the same names,
signatures, exceptions and behaviour; the docstrings live here, once.

A PipeLoop knows file descriptors and bytes, nothing about tasks. Each channel is a pair
of the parent's pipe ends to one worker: a non-blocking write end with a queue of
outgoing frames and the offset already written of the first one, and a non-blocking read
end with a buffer of incoming bytes. Nothing here ever blocks except ``wait``:

* ``send`` queues a frame and writes what the pipe takes now. A partial write advances
  the offset; the rest goes out when ``poll`` reports the pipe writable (EAGAIN is the
  normal "pipe full" answer, not an error). This is what removes the deadlock: the
  parent keeps reading results while its writes wait, so a worker blocked writing a
  result always gets unblocked.
* ``pump`` flushes writable channels, reads readable ones until they would block, and
  returns whole frames plus the channels that closed. A big frame (a payload of
  ``BIG_FRAME`` bytes or more) is read in place: once its header is in, the rest of it
  is read straight into the ``bytearray`` it is delivered as, so a 1 MiB result is
  copied once on its way from the pipe to ``pickle.loads`` (by the kernel), not three
  times. Smaller payloads are ``bytes``. A channel is reported closed once,
  when its read end reaches EOF (the worker exited; frames it wrote before exiting come
  first, in the same call) or carries a frame that cannot be trusted. A write end whose
  reader is gone (EPIPE) only stops being written: its EOF follows. A channel added with
  an *exit fd* (a pidfd: readable once the worker's process has exited) is also reported
  closed when that fd turns readable and its pipe is read dry, as at EOF: a child the
  worker forked may hold the pipe's write end open, and then no EOF comes, ever.
* ``remove`` closes a channel and hands back every frame that did not fully leave, so
  the layer above can dispatch those tasks again: a worker cannot have started a task
  whose frame it never fully received.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import select
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import FrameError
from ..frames import HEADER_SIZE, MAX_PAYLOAD, FrameReader

if TYPE_CHECKING:  # what pump() returns, declared with the twins' interface
    from ._interface import ClaimsAPI, Closed, Frame
    from ._pychannel import _Channel

__all__ = ["Claims", "FrameReader", "PipeLoop", "chunk_results"]  # the twins export these

# No compare-and-swap in Python: a pool on this twin cancels a task it sent to a worker
# by asking the worker (CANCEL), never by a claim in shared memory (docs/design.md,
# "Cancel claims"); the compiled twin's ``Claims`` is in pyx/_claims.pxi.
Claims: Callable[[Any, int, int], ClaimsAPI] | None = None

READ_SIZE = 1 << 18  # bytes per read(): big enough for large results, one page is wasteful
READ_BUDGET = 1 << 24  # bytes per channel per pump: one chatty worker cannot starve the rest
WRITE_IOV = 64  # frames gathered into one writev(): under every platform's IOV_MAX
# A payload this long or longer is read in place, into its own bytearray: above a default
# pipe's capacity (64 KiB) a frame always spans reads, and copying it out of the read
# chunk, into the carry-over buffer and out again is what this saves. Below it, one read
# chunk holds many frames, and reading a frame's tail on its own costs a system call.
BIG_FRAME = 1 << 16
# The most a big frame's header is trusted for before its bytes arrive: its buffer starts
# at min(length, BIG_TRUST) and doubles only once full (never past the length), so a lying
# header (4 GiB announced, 10 bytes sent) costs 4 MiB, and any channel holds at most
# max(BIG_TRUST, 2 x what actually arrived). Honest frames up to 4 MiB never grow.
BIG_TRUST = 1 << 22
_IN = select.POLLIN
_OUT = select.POLLOUT


class PipeLoop:
    """Non-blocking frame transport over many pipe pairs, polled together."""

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self._channels: dict[int, _Channel] = {}
        self._by_fd: dict[int, tuple[_Channel, bool]] = {}  # fd -> (channel, is write end)
        # poll(2), as the compiled twin: the same call on Linux and macOS (where it is
        # built on kqueue and serves pipes well; only devices such as ttys misbehave,
        # and none enter this set). No epoll or kqueue of our own.
        self._poller = select.poll()
        self._ready: list[tuple[int, int]] | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poller.register(self._wake_r, _IN)
        self._closed = False

    # -- channels ---------------------------------------------------------------------

    def add(self, channel: int, write_fd: int, read_fd: int, exit_fd: int = -1) -> None:
        """Take ownership of a worker's pipe ends (made non-blocking here) as ``channel``,
        and of ``exit_fd`` if one is given (>= 0): an fd that turns readable when the
        worker's process exits (a pidfd). Once it does, the channel is read dry and
        reported closed, as at EOF, though another process may hold the pipe open."""
        if channel in self._channels:
            raise ValueError(f"channel {channel} already exists")
        # Here, not at the top: a worker loads this module (the compiled twin does too,
        # for its docstrings) but never makes a channel, and must not pay for the import.
        from ._pychannel import _Channel

        os.set_blocking(write_fd, False)
        os.set_blocking(read_fd, False)
        ch = _Channel(channel, write_fd, read_fd, exit_fd)
        self._channels[channel] = ch
        self._by_fd[read_fd] = (ch, False)
        self._by_fd[write_fd] = (ch, True)
        self._poller.register(read_fd, _IN)
        if exit_fd >= 0:
            self._by_fd[exit_fd] = (ch, False)
            self._poller.register(exit_fd, _IN)

    def remove(self, channel: int) -> list[tuple[int, int, bytes]]:
        """Close a channel's fds; return ``(kind, ident, payload)`` of frames not fully written."""
        ch = self._channels.pop(channel)
        unsent = [(kind, ident, payload) for kind, ident, _, payload, _ in ch.out]
        ch.out.clear()
        self._forget_fd(ch.read_fd)
        self._forget_fd(ch.write_fd)
        os.close(ch.read_fd)
        os.close(ch.write_fd)
        if ch.exit_fd >= 0:
            self._forget_fd(ch.exit_fd)
            os.close(ch.exit_fd)
        return unsent

    def _forget_fd(self, fd: int) -> None:
        if self._by_fd.pop(fd, None) is not None:
            with contextlib.suppress(KeyError):
                self._poller.unregister(fd)

    def __contains__(self, channel: int) -> bool:
        return channel in self._channels

    def __len__(self) -> int:
        return len(self._channels)

    def pending(self, channel: int) -> int:
        """Bytes accepted by ``send`` on this channel and not yet written to its pipe."""
        return self._channels[channel].pending

    def unsent_frames(self, channel: int) -> int:
        """Frames on this channel not yet fully written."""
        return len(self._channels[channel].out)

    # -- writing ----------------------------------------------------------------------

    def send(
        self, channel: int, kind: int, ident: int, payload: bytes = b"", flush: bool = True
    ) -> None:
        """Queue one frame and write what the pipe takes now; never blocks.

        With ``flush=False`` the frame is only queued: a caller sending a batch calls
        ``flush(channel)`` once after it, so the batch leaves in one ``writev``.
        ``payload`` is ``bytes`` or any C-contiguous buffer, sent as its bytes (its
        length is ``memoryview(payload).nbytes``) and pinned until it has left; anything
        else is a TypeError, raised before anything is queued.
        """
        ch = self._channels[channel]
        ch.push(kind, ident, payload)
        if len(ch.out) == 1 and not ch.write_dead:
            if flush:
                self._flush(ch)
            else:
                self._want_out(ch, True)  # a forgotten flush still goes out on POLLOUT

    def flush(self, channel: int) -> None:
        """Write what the pipe takes of this channel's queued frames now; never blocks."""
        ch = self._channels[channel]
        if ch.out and not ch.write_dead:
            self._flush(ch)

    def _flush(self, ch: _Channel) -> None:
        """Write queued frames until the pipe is full (EAGAIN) or the queue is empty."""
        out = ch.out
        while out:
            iov: list[memoryview | bytes] = []
            offset = ch.offset
            for _kind, _ident, header, _payload, payload in out:
                if offset < HEADER_SIZE:
                    iov.append(memoryview(header)[offset:] if offset else header)
                    if payload:
                        iov.append(payload)
                else:
                    iov.append(memoryview(payload)[offset - HEADER_SIZE :])
                offset = 0
                if len(iov) >= WRITE_IOV:
                    break
            try:
                written = os.writev(ch.write_fd, iov)
            except BlockingIOError:
                # Full, or short of room for a write of at most PIPE_BUF bytes, which the
                # kernel takes whole or not at all (PIPE_BUF: 4096 on Linux, only 512 on
                # macOS). Both report POLLOUT only once PIPE_BUF bytes are free, so the
                # wait that follows cannot spin.
                break
            except OSError:  # EPIPE and friends: the worker is gone, its EOF will follow
                ch.write_dead = True
                break
            wanted = sum(map(len, iov))
            ch.advance(written)
            if written < wanted:
                break  # the pipe is full; POLLOUT will say when to go on
        self._want_out(ch, bool(out) and not ch.write_dead)

    def _want_out(self, ch: _Channel, want: bool) -> None:
        if want != ch.polling_out:
            if want:
                self._poller.register(ch.write_fd, _OUT)
            else:
                self._poller.unregister(ch.write_fd)
            ch.polling_out = want

    # -- waiting and reading ----------------------------------------------------------

    def wait(self, timeout: float | None) -> bool:
        """Block until a pipe is readable, a queued one writable, ``wake`` was called or
        ``timeout`` seconds passed (None: no limit). Changes no state a caller can see, so
        a signal handler may interrupt it; returns whether anything is ready."""
        ms = -1 if timeout is None else max(0, math.ceil(timeout * 1000))
        self._ready = self._poller.poll(ms)
        return bool(self._ready)

    def pump(self) -> tuple[list[Frame], list[Closed]]:
        """Flush, read and split without blocking; return ``(frames, closed)``.

        ``frames`` holds ``(channel, kind, ident, payload)`` in arrival order per channel;
        ``closed`` holds ``(channel, None)`` for EOF or ``(channel, error)`` for a read
        error or a frame that cannot be trusted (``FrameError``). Each channel is reported
        closed once; its frames read before the EOF are in ``frames``.
        """
        ready = self._ready
        self._ready = None
        if ready is None:
            ready = self._poller.poll(0)
        frames: list[Frame] = []
        closed: list[Closed] = []
        by_fd = self._by_fd
        # Any event means "go and look", whatever its bits: a writer's EOF is POLLHUP
        # (with POLLIN on macOS, alone on Linux once drained), a write end whose reader
        # is gone POLLERR (Linux) or POLLHUP (macOS); the read or write says which.
        for fd, _events in ready:
            entry = by_fd.get(fd)
            if entry is None:
                if fd == self._wake_r:
                    self._drain_wake()
                continue
            ch, is_write = entry
            if is_write:
                if ch.out and not ch.write_dead:
                    self._flush(ch)
            elif not ch.closed:
                self._read(ch, frames, closed, exited=fd == ch.exit_fd)
        return frames, closed

    def poll(self, timeout: float | None = 0.0) -> tuple[list[Frame], list[Closed]]:
        """``wait(timeout)`` then ``pump()``."""
        self.wait(timeout)
        return self.pump()

    def watched(self) -> tuple[list[int], list[int]]:
        """The fds ``wait`` would poll now, each list sorted: ``(readable, writable)``.

        Readable: the wake-up pipe's read end and each channel's read end (and exit fd,
        if it has one) until it is reported closed; writable: each channel's write end
        with frames queued that the pipe did not take. For a caller that waits in an event
        loop of its own instead of ``wait``: when one of them is ready, or ``wake`` was
        called, it calls ``pump`` (which polls again itself, with no wait). The sets change
        with ``add``, ``remove``, ``send`` and ``pump``: ask again after each. Empty once
        closed.
        """
        if self._closed:
            return [], []
        channels = self._channels.values()
        readable = [self._wake_r]
        for ch in channels:
            if not ch.closed:
                readable.append(ch.read_fd)
                if ch.exit_fd >= 0:
                    readable.append(ch.exit_fd)
        readable.sort()
        writable = sorted(ch.write_fd for ch in channels if ch.polling_out)
        return readable, writable

    def _read(
        self, ch: _Channel, frames: list[Frame], closed: list[Closed], exited: bool = False
    ) -> None:
        """Read what the pipe holds (up to the budget); ``exited``: the worker's process
        is gone (its exit fd), so a pipe read dry is its end, as an EOF would be."""
        fd = ch.read_fd
        budget = READ_BUDGET
        eof = False
        drained = False
        error: BaseException | None = None
        frame_error: FrameError | None = None
        while budget > 0:
            big = ch.big
            if big is not None:
                # The rest of a big frame: straight into its buffer, never past its end
                # (the next frame's header goes through the chunk, as usual).
                if ch.big_filled == len(big):
                    big += bytes(min(ch.big_size, 2 * len(big)) - len(big))
                want = len(big) - ch.big_filled
                try:
                    n = os.readv(fd, [memoryview(big)[ch.big_filled :]])
                except BlockingIOError:
                    drained = True
                    break
                except OSError as exc:
                    error = exc
                    break
                if not n:
                    eof = True
                    break
                budget -= n
                ch.big_filled += n
                if ch.big_filled == ch.big_size:
                    frames.append((ch.channel, *ch.big_header, big))
                    ch.big = None
                if n < want:
                    drained = True
                    break
                continue
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                drained = True
                break
            except OSError as exc:
                error = exc
                break
            if not data:
                eof = True
                break
            budget -= len(data)
            if frame_error is None:  # after a bad header the stream means nothing
                try:
                    ch.take(data, frames, self.max_payload)
                except FrameError as exc:
                    frame_error = exc
            if len(data) < READ_SIZE:
                drained = True  # an EOF behind it shows up on the next poll
                break
        if exited and drained and error is None:
            eof = True  # nobody writes anymore whoever holds the pipe open: its end
        if frame_error is not None:
            error = frame_error
        elif error is None and eof and (ch.inbuf or ch.big is not None):
            held = len(ch.inbuf) if ch.big is None else HEADER_SIZE + ch.big_filled
            error = FrameError(
                f"channel {ch.channel}: EOF in the middle of a frame "
                f"({held} bytes of an incomplete frame)"
            )
        if eof or error is not None:
            self._close_channel(ch)
            closed.append((ch.channel, error))

    def _close_channel(self, ch: _Channel) -> None:
        """Stop polling a channel that reached EOF or went bad; ``remove`` closes its fds."""
        ch.closed = True
        ch.inbuf.clear()
        ch.big = None
        self._poller.unregister(ch.read_fd)
        if ch.exit_fd >= 0:  # (readable for good once the process exited)
            self._poller.unregister(ch.exit_fd)
        self._want_out(ch, False)
        ch.write_dead = True

    # -- waking -----------------------------------------------------------------------

    def wake(self) -> None:
        """Make a ``wait`` in another thread return now; safe from any thread."""
        # A full wake-up pipe (BlockingIOError) already guarantees the waiter wakes.
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"\0")

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def wake_fds(self) -> tuple[int, int]:
        """The wake-up pipe's ``(read, write)`` ends, ``(-1, -1)`` once closed: fds the loop
        opened itself, for the owner's fork registry (a forked worker must not keep them)."""
        if self._closed:
            return -1, -1
        return self._wake_r, self._wake_w

    def close(self) -> None:
        """Close every channel's fds and the wake-up pipe; the loop is unusable after."""
        if self._closed:
            return
        self._closed = True
        for channel in list(self._channels):
            self.remove(channel)
        os.close(self._wake_r)
        os.close(self._wake_w)


def chunk_results(items: list[Any]) -> Iterator[Any]:
    """A chunked ``map``'s results in order, each dropped from ``items`` as it is handed
    out (a result the consumer lets go of is freed at once, as the stdlib's map does).

    Not a loop's job, but the compiled module is where C iteration lives: the twin
    (``pyx/_loop.pyx``) is an iterator type, with no Python frame per item; this one is
    ``map`` over ``list.pop``, in C as well. Declared with the classes
    (``loop/_interface.py``); both are tested against each other (tests/loop)."""
    items.reverse()
    return map(list.pop, itertools.repeat(items, len(items)))
