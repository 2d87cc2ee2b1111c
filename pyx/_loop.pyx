# cython: language_level=3
"""The compiled PipeLoop and FrameReader: the twin of ``pipepool.loop._pyloop``.

Same names, signatures, exceptions and behaviour, down to the order of frames and closed
reports and what ``remove`` hands back; ``src/pipepool/loop/_pyloop.py`` is the
specification and carries the docstrings, ``pyx/_loop.pxd`` declares the state. What
changes is where the work happens: frames are queued as C records that point into the
caller's bytes (the unsent tail of a partial write is an offset, never a copy), written
with ``writev``, read into one reusable chunk and split in C (one copy per payload, into
its bytes object; a big frame's rest is read straight into its bytearray), and ``wait``
polls with the GIL released. Python's ``select.poll`` is replaced by a C array kept in
the same (registration) order, so both twins visit ready pipes in the same order.
"""

import math
import os

cimport cython

from cpython.bytearray cimport (
    PyByteArray_AS_STRING,
    PyByteArray_FromStringAndSize,
    PyByteArray_GET_SIZE,
    PyByteArray_Resize,
)
from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_CheckExact,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from cpython.exc cimport PyErr_CheckSignals
from cpython.long cimport PyLong_Check, PyLong_CheckExact
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.memoryview cimport PyMemoryView_GET_BUFFER
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF
from libc.errno cimport EBADF, EINTR, errno
from libc.limits cimport INT_MAX
from libc.string cimport memcpy, memmove
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from posix.uio cimport iovec, writev
from posix.unistd cimport _SC_IOV_MAX, sysconf
from posix.unistd cimport read as c_read
from posix.unistd cimport write as c_write

from pipepool import frames as _frames
from pipepool.errors import FrameError

__all__ = ["Claims", "FrameReader", "PipeLoop", "chunk_results"]  # the twins export exactly these

MAX_PAYLOAD = _frames.MAX_PAYLOAD
if _frames.HEADER_SIZE != HEADER_SIZE or _frames.MAGIC != MAGIC:
    raise ImportError("pipepool.loop._loop was built for another wire format than frames.py; rebuild it")


cdef extern from "Python.h":
    # Pausing the cyclic GC inside pump(): a collection could run a finalizer (Python
    # code) in the middle of it, and with it a signal handler or another thread.
    int PyGC_Enable()
    int PyGC_Disable()
    void PyObject_GC_UnTrack(void *op)


include "_wire.pxi"


# writev() takes at most IOV_MAX entries; POSIX only promises 16, real systems 1024.
cdef int iov_limit = WRITE_IOV
cdef long _iov_max = sysconf(_SC_IOV_MAX)
if 0 < _iov_max < IOV_SLOTS:
    iov_limit = <int>_iov_max - 1


cdef inline long long monotonic_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef extern from *:
    # In C: EWOULDBLOCK equals EAGAIN on most systems, which a Cython switch would reject.
    """
    static int pipepool_would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK; }
    """
    bint would_block "pipepool_would_block"(int err) noexcept nogil


cdef object os_error(int err):
    return OSError(err, os.strerror(err))  # the subclass os.read would raise (errno-mapped)


include "_channel.pxi"
include "_claims.pxi"


cdef class PipeLoop:
    """Non-blocking frame transport over many pipe pairs, polled together.

    The compiled twin of ``pipepool.loop._pyloop.PipeLoop`` (same methods, arguments,
    exceptions and behaviour); each method's docstring is the pure loop's, shared at import.
    """

    def __cinit__(self, *args, **kwargs):
        self._channels = {}
        self._by_fd = {}
        self.wake_r = self.wake_w = -1
        self._closed = True  # until __init__ has the wake-up pipe
        self.chunk = <unsigned char *>PyMem_Realloc(NULL, READ_SIZE)
        if self.chunk == NULL:
            raise MemoryError()

    def __init__(self, max_payload=MAX_PAYLOAD):
        self.max_payload = max_payload
        wake_r, wake_w = os.pipe()  # os.pipe: close-on-exec, as in the pure loop
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        self.wake_r, self.wake_w = wake_r, wake_w
        self._register(self.wake_r, POLLIN)
        self._closed = False

    def __dealloc__(self):
        # Like the pure loop, a loop that was never closed leaves its fds open.
        PyMem_Free(self.pfds)
        PyMem_Free(self.wait_pfds)
        PyMem_Free(self.ready)
        PyMem_Free(self.chunk)

    @property
    def max_payload(self):
        return self._max_payload

    @max_payload.setter
    def max_payload(self, value):
        self.max_len = limit_of(value)
        self._max_payload = value

    # -- channels ---------------------------------------------------------------------

    def add(self, channel, write_fd, read_fd, exit_fd=-1):
        if channel in self._channels:
            raise ValueError(f"channel {channel} already exists")
        os.set_blocking(write_fd, False)
        os.set_blocking(read_fd, False)
        cdef _Channel ch = _Channel(channel, write_fd, read_fd, exit_fd)
        self._channels[channel] = ch
        self._by_fd[ch.read_fd] = ch
        self._by_fd[ch.write_fd] = ch
        self._register(ch.read_fd, POLLIN)
        if ch.exit_fd >= 0:
            self._by_fd[ch.exit_fd] = ch
            self._register(ch.exit_fd, POLLIN)

    def remove(self, channel):
        cdef _Channel ch = self._channels.pop(channel)
        # Unreachable first (no fd maps to it), then emptied: nothing can see it half-done.
        self._forget_fd(ch.read_fd)
        self._forget_fd(ch.write_fd)
        if ch.exit_fd >= 0:
            self._forget_fd(ch.exit_fd)
        unsent = ch.take_unsent()
        ch.drop_in()
        os.close(ch.read_fd)
        os.close(ch.write_fd)
        if ch.exit_fd >= 0:
            os.close(ch.exit_fd)
        return unsent

    cdef int _forget_fd(self, int fd) except -1:
        if self._by_fd.pop(fd, None) is not None:
            self._unregister(fd)
        return 0

    def __contains__(self, channel):
        return channel in self._channels

    def __len__(self):
        return len(self._channels)

    def pending(self, channel):
        return (<_Channel>self._channels[channel]).pending

    def unsent_frames(self, channel):
        return (<_Channel>self._channels[channel]).count

    # -- the poll set -------------------------------------------------------------------

    cdef int _register(self, int fd, short events) except -1:
        cdef Py_ssize_t i, nbytes
        for i in range(self.npfds):
            if self.pfds[i].fd == fd:
                self.pfds[i].events = events  # as a dict update: keeps its place
                return 0
        nbytes = self.pfds_cap * sizeof(pollfd)
        if self.npfds == self.pfds_cap:
            grow(<unsigned char **>&self.pfds, &nbytes, (2 * self.pfds_cap + 8) * sizeof(pollfd))
            self.pfds_cap = nbytes // sizeof(pollfd)
        self.pfds[self.npfds].fd = fd
        self.pfds[self.npfds].events = events
        self.pfds[self.npfds].revents = 0
        self.npfds += 1
        return 0

    cdef bint _unregister(self, int fd) noexcept:
        cdef Py_ssize_t i
        for i in range(self.npfds):
            if self.pfds[i].fd == fd:
                memmove(&self.pfds[i], &self.pfds[i + 1], (self.npfds - i - 1) * sizeof(pollfd))
                self.npfds -= 1
                return True
        return False

    cdef int _want_out(self, _Channel ch, bint want) except -1:
        if want != ch.polling_out:
            if want:
                self._register(ch.write_fd, POLLOUT)
            else:
                self._unregister(ch.write_fd)
            ch.polling_out = want
        return 0

    # -- writing ----------------------------------------------------------------------

    def send(self, channel, kind, ident, payload=b"", flush=True):
        cdef _Channel ch = self._channels[channel]
        ch.push(kind, ident, payload)
        if ch.count == 1 and not ch.write_dead:
            if flush:
                self._flush(ch)
            else:
                self._want_out(ch, True)

    def flush(self, channel):
        cdef _Channel ch = self._channels[channel]
        if ch.count and not ch.write_dead:
            self._flush(ch)

    cdef int _flush(self, _Channel ch) except -1:
        cdef iovec iov[IOV_SLOTS]
        cdef int n, err
        cdef Py_ssize_t i, offset, skip, wanted
        cdef Py_ssize_t mask = ch.capacity - 1
        cdef ssize_t written
        cdef OutFrame *f
        while ch.count:
            # The same gather list as _pyloop builds, so both make the same writev() calls.
            n = 0
            wanted = 0
            offset = ch.offset
            i = 0
            while i < ch.count:
                f = &ch.out[(ch.head + i) & mask]
                if offset < HEADER_SIZE:
                    iov[n].iov_base = &f.header[offset]
                    iov[n].iov_len = HEADER_SIZE - offset
                    n += 1
                    if f.size:
                        iov[n].iov_base = <void *>f.data
                        iov[n].iov_len = f.size
                        n += 1
                    wanted += HEADER_SIZE - offset + f.size
                else:
                    skip = offset - HEADER_SIZE
                    iov[n].iov_base = <void *>(f.data + skip)
                    iov[n].iov_len = f.size - skip
                    n += 1
                    wanted += f.size - skip
                offset = 0
                i += 1
                if n >= iov_limit:
                    break
            while True:
                written = writev(ch.write_fd, iov, n)
                if written >= 0:
                    break
                err = errno
                if err != EINTR:
                    break
            if written < 0:
                if not would_block(err):
                    ch.write_dead = True  # EPIPE and friends: the worker is gone, its EOF will follow
                break  # EAGAIN: full, or no room for a write <= PIPE_BUF (512 on macOS);
                # POLLOUT will say when to go on (see _pyloop._flush)
            ch.pending -= written
            ch.advance(written)
            if written < wanted:
                break  # a partial write: the rest waits for POLLOUT
        self._want_out(ch, ch.count > 0 and not ch.write_dead)
        return 0

    # -- waiting and reading ----------------------------------------------------------

    def wait(self, timeout):
        cdef int ms, rc, err
        cdef Py_ssize_t i, n, nbytes
        cdef long long deadline = 0, left
        if timeout is None:
            ms = -1
        else:
            whole = max(0, math.ceil(timeout * 1000))
            if whole > INT_MAX:
                raise OverflowError("timeout is too large")
            ms = whole
        if self._closed:  # as the pure loop's poll of its closed wake-up fd (POLLNVAL)
            self.nready = 0
            self.have_ready = True
            return True
        if self.waiting:
            raise RuntimeError("concurrent poll() invocation")
        n = self.npfds
        nbytes = self.wait_cap * sizeof(pollfd)
        grow(<unsigned char **>&self.wait_pfds, &nbytes, n * sizeof(pollfd))
        self.wait_cap = nbytes // sizeof(pollfd)
        memcpy(self.wait_pfds, self.pfds, n * sizeof(pollfd))
        if ms >= 0:
            deadline = monotonic_ns() + <long long>ms * 1000000
        self.waiting = True
        try:
            while True:
                with nogil:  # the private copy: add/remove from other threads stay safe
                    rc = c_poll(self.wait_pfds, <nfds_t>n, ms)
                    err = errno
                if rc >= 0:
                    break
                if err != EINTR:
                    raise os_error(err)
                PyErr_CheckSignals()  # a KeyboardInterrupt raises here; no state changed yet
                if ms >= 0:
                    left = deadline - monotonic_ns()
                    if left < 0:
                        rc = 0
                        break
                    ms = <int>((left + 999999) // 1000000)
        finally:
            self.waiting = False
        self._keep_ready(self.wait_pfds, n, rc)
        return self.nready > 0

    cdef int _keep_ready(self, pollfd *pfds, Py_ssize_t n, int rc) except -1:
        cdef Py_ssize_t i, nbytes = self.ready_cap * sizeof(int)
        grow(<unsigned char **>&self.ready, &nbytes, n * sizeof(int))
        self.ready_cap = nbytes // sizeof(int)
        self.nready = 0
        if rc > 0:
            for i in range(n):
                if pfds[i].revents:
                    self.ready[self.nready] = pfds[i].fd
                    self.nready += 1
        self.have_ready = True
        return 0

    cdef int _poll_now(self) except -1:
        cdef int rc, err
        while True:
            rc = c_poll(self.pfds, <nfds_t>self.npfds, 0)
            if rc >= 0:
                break
            err = errno
            if err != EINTR:  # EINTR: retried without running handlers, pump stays atomic
                raise os_error(err)
        self._keep_ready(self.pfds, self.npfds, rc)
        return 0

    def pump(self):
        cdef list frames, closed
        cdef tuple result
        cdef Py_ssize_t i
        cdef int fd, gc_was_on
        cdef _Channel ch
        if self._closed:  # as the pure loop's read of its closed wake-up fd
            self.have_ready = False
            raise os_error(EBADF)
        if not self.have_ready:
            if self.waiting:
                raise RuntimeError("concurrent poll() invocation")
            self._poll_now()
        self.have_ready = False
        # From here to the return nothing runs Python code: not even a finalizer that a
        # collection started by one of our allocations would run (so no signal handler
        # and no other thread can see the channels half-updated).
        gc_was_on = PyGC_Disable()
        try:
            frames = []
            closed = []
            for i in range(self.nready):
                fd = self.ready[i]
                entry = self._by_fd.get(fd)
                if entry is None:
                    if fd == self.wake_r:
                        self._drain_wake()
                    continue
                ch = <_Channel>entry
                if fd == ch.write_fd:
                    if ch.count and not ch.write_dead:
                        self._flush(ch)
                elif not ch.closed:
                    self._read(ch, frames, closed, fd == ch.exit_fd)
            result = (frames, closed)
        finally:
            if gc_was_on:
                PyGC_Enable()
        return result

    def poll(self, timeout=0.0):
        self.wait(timeout)
        return self.pump()

    def watched(self):
        cdef Py_ssize_t i
        cdef list readable = [], writable = []
        for i in range(self.npfds):  # the poll set itself: what wait() would poll
            if self.pfds[i].events & POLLIN:
                readable.append(self.pfds[i].fd)
            if self.pfds[i].events & POLLOUT:
                writable.append(self.pfds[i].fd)
        readable.sort()
        writable.sort()
        return readable, writable

    cdef int _read(self, _Channel ch, list frames, list closed, bint exited) except -1:
        cdef Py_ssize_t budget = READ_BUDGET
        cdef Py_ssize_t want
        cdef ssize_t n
        cdef int err
        cdef bint eof = False
        cdef bint drained = False
        cdef object error = None
        cdef object frame_error = None
        while budget > 0:
            if ch.big is not None:
                # The rest of a big frame: straight into its buffer, never past its end
                # (the next frame's header goes through the chunk, as usual).
                if ch.big_filled == PyByteArray_GET_SIZE(ch.big):
                    ch.grow_big()
                want = PyByteArray_GET_SIZE(ch.big) - ch.big_filled
                n = c_read(ch.read_fd, PyByteArray_AS_STRING(ch.big) + ch.big_filled, want)
                if n < 0:
                    err = errno
                    if err == EINTR:
                        continue
                    if not would_block(err):
                        error = os_error(err)
                    else:
                        drained = True
                    break
                if n == 0:
                    eof = True
                    break
                budget -= n
                ch.big_filled += n
                if ch.big_filled == ch.big_size:
                    frames.append(frame_tuple(ch.channel, True, ch.big_header, ch.big))
                    ch.big = None
                if n < want:
                    drained = True
                    break
                continue
            n = c_read(ch.read_fd, self.chunk, READ_SIZE)
            if n < 0:
                err = errno
                if err == EINTR:
                    continue
                if not would_block(err):
                    error = os_error(err)
                else:
                    drained = True
                break
            if n == 0:
                eof = True
                break
            budget -= n
            if frame_error is None:  # after a bad header the stream means nothing
                try:
                    self._take(ch, self.chunk, n, frames)
                except FrameError as exc:
                    frame_error = exc
            if n < READ_SIZE:
                drained = True  # an EOF behind it shows up on the next poll
                break
        if exited and drained and error is None:
            eof = True  # nobody writes anymore whoever holds the pipe open: its end
        if frame_error is not None:
            error = frame_error
        elif error is None and eof and (ch.in_len or ch.big is not None):
            error = FrameError(
                f"channel {ch.channel}: EOF in the middle of a frame "
                f"({ch.in_len if ch.big is None else HEADER_SIZE + ch.big_filled} bytes "
                "of an incomplete frame)"
            )
        if eof or error is not None:
            self._close_channel(ch)
            closed.append((ch.channel, error))
        return 0

    cdef int _take(self, _Channel ch, const unsigned char *data, Py_ssize_t size,
                   list frames) except -1:
        cdef Py_ssize_t take, frame_size, consumed = 0
        if ch.in_len:  # finish the frame carried over from earlier reads
            if ch.in_len < HEADER_SIZE:
                take = min(HEADER_SIZE - ch.in_len, size)
                ch.keep_in(data, take, 0)
                data += take
                size -= take
                if ch.in_len < HEADER_SIZE:
                    return 0
                if not header_ok(ch.inbuf, self.max_len):
                    raise header_error(ch.inbuf, self._max_payload)
            frame_size = HEADER_SIZE + <Py_ssize_t>le32(ch.inbuf + 4)
            if frame_size - HEADER_SIZE >= BIG_FRAME:  # only its header was carried
                take = ch.start_big(ch.inbuf, data, size, frames)
                data += take
                size -= take
                ch.in_len = 0
            else:
                take = min(frame_size - ch.in_len, size)
                ch.keep_in(data, take, frame_size)
                data += take
                size -= take
                if ch.in_len < frame_size:
                    return 0
                frames.append(frame_tuple(ch.channel, True, ch.inbuf, PyBytes_FromStringAndSize(
                    <const char *>ch.inbuf + HEADER_SIZE, frame_size - HEADER_SIZE)))
                ch.in_len = 0
                if ch.in_cap > READ_SIZE:
                    ch.drop_in()  # a big carried frame's memory goes back at once
        if size:  # the common case: whole frames straight out of the read chunk
            split_frames(data, size, frames, ch.channel, True, self.max_len,
                         self._max_payload, &consumed, BIG_FRAME)
            if consumed < size:
                data += consumed
                size -= consumed
                if size >= HEADER_SIZE and le32(data + 4) >= BIG_FRAME:
                    ch.start_big(data, data + HEADER_SIZE, size - HEADER_SIZE, frames)
                else:
                    frame_size = HEADER_SIZE + <Py_ssize_t>le32(data + 4) if size >= HEADER_SIZE else 0
                    ch.keep_in(data, size, frame_size)
        return 0

    cdef int _close_channel(self, _Channel ch) except -1:
        ch.closed = True
        ch.drop_in()
        self._unregister(ch.read_fd)
        if ch.exit_fd >= 0:  # (readable for good once the process exited)
            self._unregister(ch.exit_fd)
        self._want_out(ch, False)
        ch.write_dead = True
        return 0

    # -- waking -----------------------------------------------------------------------

    def wake(self):
        cdef ssize_t n
        cdef int err
        cdef char zero = 0
        while True:
            n = c_write(self.wake_w, &zero, 1)
            if n >= 0:
                return
            err = errno
            if err == EINTR:
                continue
            if would_block(err):
                return  # already full of wake-ups: the waiter will wake anyway
            raise os_error(err)

    def wake_fds(self):
        return self.wake_r, self.wake_w  # (-1, -1) once closed, as the pure loop's

    cdef int _drain_wake(self) except -1:
        cdef ssize_t n
        cdef int err
        while True:
            n = c_read(self.wake_r, self.chunk, 4096)
            if n > 0:
                continue
            if n == 0:
                return 0
            err = errno
            if err == EINTR:
                continue
            if would_block(err):
                return 0
            raise os_error(err)

    def close(self):
        if self._closed:
            return
        self._closed = True
        for channel in list(self._channels):
            self.remove(channel)
        self._unregister(self.wake_r)
        wake_r, wake_w = self.wake_r, self.wake_w
        self.wake_r = self.wake_w = -1  # a later wake() fails with EBADF, never hits a reused fd
        os.close(wake_r)
        os.close(wake_w)



cdef class ChunkResults:
    """The twin of ``_pyloop.chunk_results``: a chunked map's results in order, each
    dropped from the chunk (its slot set to None) as it is handed out."""

    cdef list items
    cdef Py_ssize_t next_index

    def __cinit__(self, list items):
        self.items = items
        self.next_index = 0

    def __iter__(self):
        return self

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def __next__(self):
        cdef list items = self.items
        cdef Py_ssize_t i = self.next_index
        if items is None or i >= len(items):
            self.items = None  # the chunk's list goes as soon as it is done with
            raise StopIteration
        item = items[i]
        items[i] = None
        self.next_index = i + 1
        return item


def chunk_results(list items):
    """The twin of ``_pyloop.chunk_results`` (see there)."""
    return ChunkResults(items)

def _share_docstrings():
    """Give each public method of the twins the pure loop's docstring, kept there once.

    A Cython function's ``__doc__`` is writable; a cdef class's own docstring is not,
    so the two class docstrings are literals (PipeLoop above, FrameReader in _wire.pxi).
    """
    from pipepool.loop import _pyloop

    chunk_results.__doc__ = _pyloop.chunk_results.__doc__
    for name in ("FrameReader", "PipeLoop"):
        spec, twin = getattr(_pyloop, name), globals()[name]
        for attr, method in vars(twin).items():
            documented = getattr(spec, attr, None)
            if not attr.startswith("_") and callable(method) and callable(documented):
                method.__doc__ = documented.__doc__


_share_docstrings()
del _share_docstrings
