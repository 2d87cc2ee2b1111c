"""PipeLoop on real pipes, run against both implementations (they must agree)."""

from __future__ import annotations

import fcntl
import os
import select
import threading
import time

import pytest

from pipepool import FrameError
from pipepool.frames import HEADER_SIZE, Kind, encode_header, split_frames

pytestmark = [pytest.mark.smoke, pytest.mark.portable]

PAGE = 4096


def shrink(fd: int) -> None:
    if hasattr(fcntl, "F_SETPIPE_SZ"):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PAGE)


_peers: list[Peer] = []  # closed by the ``loop`` fixture, whatever the test did


class Peer:
    """The worker's side of one channel, driven by the test with plain blocking I/O."""

    def __init__(self, loop, channel: int, small: bool = False) -> None:
        _peers.append(self)
        act_r, act_w = os.pipe()  # loop -> peer
        res_r, res_w = os.pipe()  # peer -> loop
        if small:
            shrink(act_w)
            shrink(res_w)
        self.read_fd, self.write_fd = act_r, res_w
        loop.add(channel, act_w, res_r)
        self.buf = bytearray()

    def recv_frames(self, count: int) -> list[tuple[int, int, bytes]]:
        out: list = []
        while len(out) < count:
            chunk = os.read(self.read_fd, 1 << 16)
            assert chunk, "loop side closed early"
            self.buf += chunk
            split_frames(self.buf, out)
        return out

    def send(self, kind: int, ident: int, payload: bytes = b"") -> None:
        os.write(self.write_fd, encode_header(kind, ident, len(payload)) + payload)

    exit_w = -1  # the write end of an exit fd's stand-in pipe (``exit_fd_peer``)

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd, self.exit_w):
            if fd >= 0:
                os.close(fd)
        self.read_fd = self.write_fd = self.exit_w = -1


@pytest.fixture
def loop(loop_module):
    lp = loop_module.PipeLoop()
    yield lp
    lp.close()
    while _peers:
        _peers.pop().close()


def pump_until(loop, predicate, timeout: float = 10.0):
    """Poll until predicate(frames, closed) holds on the accumulated results."""
    frames: list = []
    closed: list = []
    deadline = time.monotonic() + timeout
    while not predicate(frames, closed):
        assert time.monotonic() < deadline, f"gave up waiting; frames={len(frames)} closed={closed}"
        f, c = loop.poll(0.05)
        frames += f
        closed += c
    return frames, closed


def test_roundtrip(loop):
    peer = Peer(loop, 1)
    loop.send(1, Kind.TASK, 5, b"hello")
    assert loop.pending(1) == 0
    assert peer.recv_frames(1) == [(Kind.TASK, 5, b"hello")]
    peer.send(Kind.REVOKED, 5)
    peer.send(Kind.DONE, 5, b"result")
    frames, closed = pump_until(loop, lambda f, c: len(f) == 2)
    assert frames == [(1, Kind.REVOKED, 5, b""), (1, Kind.DONE, 5, b"result")]
    assert closed == []
    peer.close()


def test_send_never_blocks_and_partial_writes_resume(loop):
    peer = Peer(loop, 1, small=True)
    big = os.urandom(1 << 20)
    loop.send(1, Kind.TASK, 1, big)  # far more than the pipe holds: must return at once
    loop.send(1, Kind.TASK, 2, b"after")
    assert 0 < loop.pending(1) <= len(big) + 2 * HEADER_SIZE + 5
    received: list = []
    reader = threading.Thread(target=lambda: received.extend(peer.recv_frames(2)))
    reader.start()
    deadline = time.monotonic() + 20
    while loop.pending(1) and time.monotonic() < deadline:
        loop.poll(0.05)
    reader.join(20)
    assert loop.pending(1) == 0
    assert received == [(Kind.TASK, 1, big), (Kind.TASK, 2, b"after")]
    peer.close()


def test_frames_split_across_arbitrary_chunks(loop):
    peer = Peer(loop, 3)
    payloads = [os.urandom(n) for n in (0, 1, 15, 16, 17, 4096, 70000)]
    stream = b"".join(encode_header(Kind.DONE, i, len(p)) + p for i, p in enumerate(payloads))
    got: list = []
    for start in range(0, len(stream), 777):
        os.write(peer.write_fd, stream[start : start + 777])
        f, c = loop.poll(0)
        got += f
        assert c == []
    frames, _ = pump_until(loop, lambda f, c: len(got) + len(f) == len(payloads))
    got += frames
    assert got == [(3, Kind.DONE, i, p) for i, p in enumerate(payloads)]
    peer.close()


def test_frames_before_eof_are_delivered_then_closed_once(loop):
    peer = Peer(loop, 2)
    peer.send(Kind.DONE, 1, b"last words")
    os.close(peer.write_fd)
    peer.write_fd = -1
    frames, closed = pump_until(loop, lambda f, c: bool(c))
    assert frames == [(2, Kind.DONE, 1, b"last words")]
    assert closed == [(2, None)]
    assert loop.poll(0) == ([], [])  # reported once
    peer.close()


def exit_fd_peer(loop, channel: int) -> tuple[Peer, int]:
    """A peer whose channel has an exit fd: a pipe's read end standing in for a pidfd
    (readable once the process exits); the returned fd, written to, is that exit."""
    peer = Peer.__new__(Peer)
    _peers.append(peer)
    act_r, act_w = os.pipe()
    res_r, res_w = os.pipe()
    exit_r, exit_w = os.pipe()
    peer.read_fd, peer.write_fd, peer.buf, peer.exit_w = act_r, res_w, bytearray(), exit_w
    loop.add(channel, act_w, res_r, exit_r)
    return peer, exit_w


@pytest.mark.parametrize("size", [10, 1 << 17])  # a small frame; a big one, read in place
def test_an_exit_fd_closes_a_channel_whose_pipe_stays_open(loop, size):
    """The worker exited and a child of it holds the result pipe: no EOF comes. Its exit
    fd (a pidfd in the executor) turning readable ends the channel as an EOF would: what
    is in the pipe first, then closed, once."""
    peer, exited = exit_fd_peer(loop, 4)
    payload = os.urandom(size)
    threading.Thread(target=peer.send, args=(Kind.DONE, 1, payload)).start()
    frames, closed = pump_until(loop, lambda f, c: bool(f))
    assert frames == [(4, Kind.DONE, 1, payload)] and closed == []
    assert loop.poll(0.05) == ([], [])  # the pipe is open and quiet: nothing happens
    peer.send(Kind.DONE, 2, b"last words")
    os.write(exited, b"x")  # the process is gone; peer.write_fd (the child's copy) is open
    frames, closed = pump_until(loop, lambda f, c: bool(c))
    assert frames == [(4, Kind.DONE, 2, b"last words")] and closed == [(4, None)]
    assert loop.poll(0) == ([], [])  # reported once; the exit fd no longer wakes the loop
    assert loop.wait(0) is False
    loop.remove(4)
    peer.close()


def test_an_exit_fd_in_the_middle_of_a_frame_is_a_frame_error(loop):
    peer, exited = exit_fd_peer(loop, 5)
    os.write(peer.write_fd, encode_header(Kind.DONE, 1, 100) + b"short")
    os.write(exited, b"x")
    frames, closed = pump_until(loop, lambda f, c: bool(c))
    assert frames == [] and [c for c, _ in closed] == [5]
    assert isinstance(closed[0][1], FrameError) and "middle of a frame" in str(closed[0][1])
    peer.close()


def test_remove_closes_the_exit_fd(loop):
    peer, exited = exit_fd_peer(loop, 6)
    exit_r = next(fd for fd in range(3, 1024) if _is_read_end_of(fd, exited))
    loop.remove(6)
    with pytest.raises(OSError):
        os.fstat(exit_r)
    peer.close()


def _is_read_end_of(fd: int, write_fd: int) -> bool:
    """Whether ``fd`` is the read end of the pipe ``write_fd`` writes."""
    try:
        return fd != write_fd and os.fstat(fd).st_ino == os.fstat(write_fd).st_ino
    except OSError:
        return False


@pytest.mark.parametrize(
    "garbage",
    [
        encode_header(Kind.DONE, 1, 100) + b"short",  # EOF mid-frame
        b"\x00" * HEADER_SIZE,  # wrong magic
        encode_header(Kind.DONE, 1, 0)[:4] + (2**31).to_bytes(4, "little") + bytes(8),  # huge
    ],
    ids=["eof-mid-frame", "bad-magic", "beyond-limit"],
)
def test_untrusted_input_closes_the_channel_with_frame_error(loop_module, garbage):
    loop = loop_module.PipeLoop(max_payload=1 << 20)
    try:
        peer = Peer(loop, 4)
        other = Peer(loop, 5)
        peer.send(Kind.REVOKED, 1)
        os.write(peer.write_fd, garbage)
        os.close(peer.write_fd)
        peer.write_fd = -1
        other.send(Kind.DONE, 9, b"fine")
        frames, closed = pump_until(loop, lambda f, c: bool(c) and len(f) == 2)
        assert (4, Kind.REVOKED, 1, b"") in frames and (5, Kind.DONE, 9, b"fine") in frames
        assert len(closed) == 1 and closed[0][0] == 4
        assert isinstance(closed[0][1], FrameError)
        peer.close()
        other.close()
    finally:
        loop.close()


def test_remove_hands_back_frames_that_did_not_fully_leave(loop):
    peer = Peer(loop, 1, small=True)
    loop.send(1, Kind.TASK, 1, b"a" * 100)  # fits: fully written
    loop.send(1, Kind.TASK, 2, b"b" * (1 << 18))  # partially written
    loop.send(1, Kind.TASK, 3, b"c")  # not written at all
    unsent = loop.remove(1)
    assert [(k, i) for k, i, _ in unsent] == [(Kind.TASK, 2), (Kind.TASK, 3)]
    assert unsent[0][2] == b"b" * (1 << 18)
    assert 1 not in loop
    peer.close()


def test_dead_reader_is_not_an_exception(loop):
    peer = Peer(loop, 1)
    os.close(peer.read_fd)
    peer.read_fd = -1
    loop.send(1, Kind.TASK, 1, b"x" * 10)  # EPIPE inside: kept, not raised
    os.close(peer.write_fd)
    peer.write_fd = -1
    _frames, closed = pump_until(loop, lambda f, c: bool(c))
    assert closed == [(1, None)]
    assert [i for _, i, _ in loop.remove(1)] == [1]


def test_wake_interrupts_wait_from_another_thread(loop):
    Peer(loop, 1)
    timer = threading.Timer(0.2, loop.wake)
    timer.start()
    started = time.monotonic()
    loop.wait(30)
    timer.join()
    assert time.monotonic() - started < 20  # woken, not timed out
    assert loop.pump() == ([], [])


def test_wake_fds_are_the_wake_up_pipes_ends_until_closed(loop_module):
    """What the executor lists in its fork registry (a fork worker closes them): the read
    end polled for wake-ups, and the write end wake() writes to; nothing once closed."""
    lp = loop_module.PipeLoop()
    r, w = lp.wake_fds()
    try:
        assert lp.watched() == ([r], [])
        assert os.fstat(r).st_ino == os.fstat(w).st_ino  # one pipe's two ends
        lp.wake()
        assert select.select([r], [], [], 0)[0] == [r]
    finally:
        lp.close()
    assert lp.wake_fds() == (-1, -1)
    for fd in (r, w):
        with pytest.raises(OSError):
            os.fstat(fd)


def test_many_channels_interleaved(loop):
    peers = {ch: Peer(loop, ch) for ch in range(1, 9)}
    for ch, peer in peers.items():
        for i in range(50):
            peer.send(Kind.DONE, i, bytes([ch]) * i)
    frames, _ = pump_until(loop, lambda f, c: len(f) == 400)
    for ch in peers:
        assert [(k, i, p) for c, k, i, p in frames if c == ch] == [
            (Kind.DONE, i, bytes([ch]) * i) for i in range(50)
        ]
    for peer in peers.values():
        peer.close()


def test_batched_send_leaves_on_flush_or_next_pump(loop):
    peer = Peer(loop, 1)
    for i in range(3):
        loop.send(1, Kind.TASK, i, b"x" * i, flush=False)
    assert loop.pending(1) == 3 * HEADER_SIZE + 3 and loop.unsent_frames(1) == 3
    loop.flush(1)
    assert loop.pending(1) == 0
    assert peer.recv_frames(3) == [(Kind.TASK, i, b"x" * i) for i in range(3)]
    loop.send(1, Kind.TASK, 9, b"late", flush=False)  # never flushed by the caller
    assert loop.pending(1) > 0
    loop.poll(1.0)  # the loop polls for POLLOUT, so the frame still goes out
    assert loop.pending(1) == 0
    assert peer.recv_frames(1) == [(Kind.TASK, 9, b"late")]
    peer.close()


# -- big frames: read in place, allocated as the bytes arrive --------------------------------


def _write_in_thread(peer: Peer, data: bytes, close: bool = False) -> threading.Thread:
    """Write ``data`` (blocking: the pipe is small), then close the write end if asked."""
    fd = peer.write_fd
    if close:
        peer.write_fd = -1

    def write() -> None:
        os.write(fd, data)
        if close:
            os.close(fd)

    writer = threading.Thread(target=write)
    writer.start()
    return writer


def _pump_traced(loop, until, writer: threading.Thread | None = None, timeout: float = 30.0):
    """Poll at least once and until ``until(frames, closed)`` (and ``writer`` finished);
    return the frames, the closed reports and the peak of traced memory meanwhile."""
    import tracemalloc

    frames: list = []
    closed: list = []
    deadline = time.monotonic() + timeout
    tracemalloc.start()
    try:
        while True:
            f, c = loop.poll(0.05)
            frames += f
            closed += c
            if until(frames, closed) and (writer is None or not writer.is_alive()):
                break
            assert time.monotonic() < deadline, "gave up waiting"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return frames, closed, peak


def test_a_big_frame_is_read_into_the_buffer_it_is_delivered_as(loop_module):
    """A 3 MiB result through a 64 KiB pipe costs the parent one buffer of 3 MiB: the
    bytearray it is handed over as, which pickle.loads reads. (Reading it through the
    read chunk into a carry-over buffer, then copying that into bytes, held two.)"""
    import pickle

    from pipepool.loop._pyloop import BIG_FRAME, BIG_TRUST

    result = os.urandom(3 << 20)
    payload = pickle.dumps(result, 5)
    assert BIG_FRAME <= len(payload) < BIG_TRUST
    small = pickle.dumps("small", 5)
    loop = loop_module.PipeLoop()
    peer = Peer(loop, 1)
    try:
        stream = encode_header(Kind.DONE, 1, len(payload)) + payload
        stream += encode_header(Kind.DONE, 2, len(small)) + small
        writer = _write_in_thread(peer, stream)
        frames, closed, peak = _pump_traced(loop, lambda f, c: len(f) == 2, writer)
        writer.join()
        assert closed == []
        assert [(c, k, i) for c, k, i, _ in frames] == [(1, Kind.DONE, 1), (1, Kind.DONE, 2)]
        assert type(frames[0][3]) is bytearray and type(frames[1][3]) is bytes
        assert pickle.loads(frames[0][3]) == result and pickle.loads(frames[1][3]) == "small"
        assert peak < len(payload) + (1 << 20), f"peak {peak} for a {len(payload)}-byte frame"
    finally:
        peer.close()
        loop.close()


def test_a_lying_length_costs_what_arrives_not_what_it_says(loop_module):
    """4 GiB announced (legal at the default limit): BIG_TRUST is allocated up front, the
    buffer then doubles only as bytes fill it, and the EOF is a FrameError."""
    from pipepool.loop._pyloop import BIG_TRUST

    loop = loop_module.PipeLoop()
    peer = Peer(loop, 1)
    try:
        header = encode_header(Kind.DONE, 1, 0)[:4] + (2**32 - 16).to_bytes(4, "little")
        os.write(peer.write_fd, header + bytes(8) + b"ten bytes!")
        frames, closed, peak = _pump_traced(loop, lambda f, c: True)
        assert (frames, closed) == ([], [])
        assert peak < BIG_TRUST + (1 << 20), f"{peak} bytes for 10 that arrived"
        more = 3 * BIG_TRUST // 2  # the buffer doubles once, to 2 x BIG_TRUST, then EOF
        writer = _write_in_thread(peer, bytes(more), close=True)
        frames, closed, peak = _pump_traced(loop, lambda f, c: bool(c), writer)
        assert peak < 4 * BIG_TRUST, f"{peak} bytes for {more} that arrived"
        assert frames == [] and closed[0][0] == 1 and isinstance(closed[0][1], FrameError)
        held = HEADER_SIZE + 10 + more
        assert f"EOF in the middle of a frame ({held} bytes" in str(closed[0][1])
    finally:
        peer.close()
        loop.close()


def test_watched_is_the_poll_set_an_outside_loop_waits_on(loop):
    # What an event loop of the caller's must watch instead of wait(): the wake-up pipe
    # and every read end; a write end only while its frames wait for room; nothing of a
    # channel once it is closed or removed (its fd number may be reused by then).
    readable, writable = loop.watched()
    assert len(readable) == 1 and writable == []  # the wake-up pipe
    wake_fd = readable[0]
    peer = Peer(loop, 1, small=True)
    read_end = loop.watched()[0]
    assert wake_fd in read_end and len(read_end) == 2
    loop.send(1, Kind.TASK, 1, os.urandom(1 << 18))  # more than the pipe holds
    readable, writable = loop.watched()
    assert len(writable) == 1 and writable[0] not in readable
    # The outside loop's view: the write end turns writable once the peer reads, and a
    # pump then writes on; once all has left, it is not watched any more.
    received: list = []
    reader = threading.Thread(target=lambda: received.extend(peer.recv_frames(1)))
    reader.start()
    deadline = time.monotonic() + 20
    while loop.watched()[1] and time.monotonic() < deadline:
        select.select([], loop.watched()[1], [], 1.0)
        loop.pump()
    reader.join(20)
    assert len(received) == 1 and loop.watched()[1] == [] and loop.pending(1) == 0
    os.close(peer.write_fd)  # the peer exits: EOF closes the channel
    peer.write_fd = -1
    pump_until(loop, lambda f, c: bool(c))
    assert loop.watched() == ([wake_fd], [])
    loop.remove(1)
    assert loop.watched() == ([wake_fd], [])
    loop.close()
    assert loop.watched() == ([], [])
