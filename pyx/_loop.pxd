# The compiled PipeLoop, declared: the design document of the hot path.
#
# src/pipepool/loop/_pyloop.py is the readable specification (signatures and docstrings
# live there, once); this twin keeps the same state in C. Sources: _loop.pyx (the loop:
# poll set, system calls), _channel.pxi (a channel's buffers), _wire.pxi (header,
# splitter, FrameReader). Every method is one of two kinds:
#   [buffers]  moves bytes or references between Python objects and C buffers, no I/O
#   [syscall]  makes the system call; EINTR is retried, EAGAIN is a count ("wait for
#              POLLOUT" / "nothing more to read"), only a real error takes the error path
#
# The Python-visible methods of PipeLoop:
#   add, remove, pending, unsent_frames, in, len    [buffers] (add/remove also set O_NONBLOCK
#                                                    and close fds, as the pure loop does;
#                                                    add may watch an exit fd, a pidfd)
#   send(channel, kind, ident, payload=b"", flush=True)
#                      [buffers] queue the frame, then [syscall] _flush when it is alone in
#                      the queue; with flush=False only queue it (and poll for POLLOUT)
#   flush(channel)     [syscall] write what the pipe takes of that channel's queue now
#   wait(timeout)      [syscall] poll() with the GIL released; on EINTR PyErr_CheckSignals
#                      (a KeyboardInterrupt raises here, nothing changed) and retry with
#                      what is left of the timeout
#   pump()             [syscall] flush writable channels, read readable ones, split frames;
#                      a big frame's rest is read straight into the bytearray it is
#                      delivered as (see BIG_FRAME). Runs no Python code at all: not
#                      even a finalizer, as it pauses the cyclic GC. So it is atomic
#                      from Python's view (no signal handler, no other thread in the
#                      middle of it), which the executor relies on.
#   poll(timeout=0.0)  wait + pump
#   watched()          [buffers] the poll set as (readable fds, writable fds), for a
#                      caller that waits in an event loop of its own and then pumps
#   wake()             [syscall] one byte into the wake-up pipe; from any thread
#   wake_fds()         [buffers] the wake-up pipe's (read, write) ends, (-1, -1) once
#                      closed: for the executor's fork registry (workers close them)
#   close()            remove every channel, close the wake-up pipe

from cpython.object cimport PyObject
from libc.stdint cimport uint32_t, uint64_t


cdef extern from "<poll.h>" nogil:
    # poll() only: it exists everywhere (no epoll/kqueue), and the set is small (2 fds per
    # worker), so a linear scan costs less than the bookkeeping of a kernel-side set.
    struct pollfd:
        int fd
        short events
        short revents
    ctypedef unsigned long nfds_t  # unsigned int on macOS; only the C name matters here
    int c_poll "poll"(pollfd *fds, nfds_t nfds, int timeout)
    enum: POLLIN
    enum: POLLOUT


cdef enum:
    # The wire header (frames.py documents it; _loop.pyx checks these against it at import).
    HEADER_SIZE = 16
    MAGIC = 0xA7
    # Write batching, identical to _pyloop so both make the same writev() calls (which is
    # what makes their pending() and remove() agree byte for byte on a full pipe).
    WRITE_IOV = 64
    IOV_SLOTS = WRITE_IOV + 2  # a frame adds up to two entries after the check
    # Reading, identical to _pyloop: the chunk size and the per-pump budget of a channel.
    READ_SIZE = 1 << 18    # bytes per read(): big enough for large results
    READ_BUDGET = 1 << 24  # bytes per channel per pump: one chatty worker cannot starve the rest
    # Big frames, identical to _pyloop (which says why): a payload of BIG_FRAME bytes or
    # more is a bytearray read in place; its header is trusted for BIG_TRUST bytes of
    # buffer before they arrive, then the buffer doubles only when full.
    BIG_FRAME = 1 << 16
    BIG_TRUST = 1 << 22


ctypedef struct OutFrame:
    # One queued outgoing frame. The references are owned (one each) until the frame has
    # fully left or remove() hands it back; `data` points into `payload` (or `view`), so
    # the unsent tail of a partly written frame is never copied.
    PyObject *kind     # exactly as given to send(): remove() hands these three back
    PyObject *ident
    PyObject *payload
    PyObject *view     # a memoryview pinning a payload that is not bytes, else NULL
    const char *data   # first payload byte
    Py_ssize_t size    # payload length
    unsigned char header[HEADER_SIZE]  # encoded once, by send()


cdef class _Channel:
    # A worker's two pipe ends, as the parent holds them.
    cdef readonly object channel  # the caller's id, handed back as given
    cdef int write_fd  # activity pipe, non-blocking
    cdef int read_fd   # result pipe, non-blocking
    cdef int exit_fd   # readable once the worker's process exited (a pidfd), or -1
    # write end: a ring of frames; out[head] is written up to `offset`
    cdef OutFrame *out
    cdef Py_ssize_t head, count, capacity  # capacity is a power of two
    cdef Py_ssize_t offset   # bytes of out[head] (header first) already written
    cdef Py_ssize_t pending  # bytes queued and not yet written
    # read end: the one incomplete small frame (or header) carried between reads
    # (complete ones are split straight out of the loop's read chunk); never bigger than
    # what arrived plus a chunk
    cdef unsigned char *inbuf
    cdef Py_ssize_t in_len, in_cap
    # read end, a big frame in progress: the bytearray it will be delivered as, read into
    # at big_filled; its size is its capacity: min(big_size, BIG_TRUST) (or what arrived
    # with the header, if more), doubled when full, never past big_size
    cdef object big        # bytearray, or None
    cdef Py_ssize_t big_filled  # payload bytes in it so far
    cdef Py_ssize_t big_size    # the payload length its header announced
    cdef unsigned char big_header[HEADER_SIZE]
    cdef bint closed       # reported closed by pump; nothing more is read
    cdef bint write_dead   # EPIPE (or closed): nothing more is written
    cdef bint polling_out  # write_fd is in the poll set for POLLOUT

    cdef int push(self, object kind, object ident, object payload) except -1  # [buffers]
    cdef void advance(self, Py_ssize_t written) noexcept  # [buffers] drop what writev took
    cdef list take_unsent(self)  # [buffers] empty the ring into (kind, ident, payload)s
    cdef int keep_in(self, const unsigned char *data, Py_ssize_t size,
                     Py_ssize_t frame_size) except -1  # [buffers] grow inbuf by what arrived
    cdef void drop_in(self) noexcept  # [buffers] free inbuf, drop a big frame
    cdef Py_ssize_t start_big(self, const unsigned char *header, const unsigned char *data,
                              Py_ssize_t size, list frames) except -1
        # [buffers] make a big frame's buffer and copy in what arrived of it (whole: the
        # frame goes to `frames`, else it is the channel's `big`); returns the bytes taken
    cdef int grow_big(self) except -1  # [buffers] double a full big buffer (up to big_size)


cdef class PipeLoop:
    cdef object _max_payload  # as given, for error messages
    cdef long long max_len    # the same limit as a C number
    cdef dict _channels  # channel -> _Channel
    cdef dict _by_fd     # fd -> _Channel (write end when fd == write_fd; its exit fd too)
    # The poll set, in registration order: the same order Python's select.poll uses (a
    # dict), so that both twins visit ready pipes, and so report frames, in the same order.
    cdef pollfd *pfds
    cdef Py_ssize_t npfds, pfds_cap
    cdef pollfd *wait_pfds   # wait()'s private copy: polled with the GIL released
    cdef Py_ssize_t wait_cap
    cdef int *ready          # fds wait() found ready, for the next pump()
    cdef Py_ssize_t nready, ready_cap
    cdef bint have_ready     # _pyloop's `_ready is not None`
    cdef bint waiting        # a wait() is in poll(): a second poller is an error
    cdef unsigned char *chunk  # one read()'s worth (READ_SIZE), shared by every channel
    cdef int wake_r, wake_w
    cdef bint _closed

    cdef int _register(self, int fd, short events) except -1  # [buffers] poll set only
    cdef bint _unregister(self, int fd) noexcept  # [buffers] False if fd was not there
    cdef int _forget_fd(self, int fd) except -1  # [buffers] drop a removed channel's fd
    cdef int _want_out(self, _Channel ch, bint want) except -1  # [buffers] POLLOUT on/off
    cdef int _flush(self, _Channel ch) except -1  # [syscall] writev until EAGAIN or empty
    cdef int _poll_now(self) except -1  # [syscall] poll(0) with the GIL held, into ready
    cdef int _keep_ready(self, pollfd *pfds, Py_ssize_t n, int rc) except -1  # [buffers]
    cdef int _read(self, _Channel ch, list frames, list closed, bint exited) except -1
        # [syscall] read: chunks into `chunk`, a big frame's rest into its own buffer;
        # `exited` (its exit fd is readable): a pipe read dry is its end, as at EOF
    cdef int _take(self, _Channel ch, const unsigned char *data, Py_ssize_t size,
                   list frames) except -1  # [buffers] split frames out of what arrived
    cdef int _close_channel(self, _Channel ch) except -1  # [buffers] stop polling it
    cdef int _drain_wake(self) except -1  # [syscall] empty the wake-up pipe


cdef class FrameReader:
    # Blocking reader of one fd (the worker's activity pipe).
    cdef int _fd
    cdef object _max_payload
    cdef long long max_len
    cdef unsigned char *buf  # bytes read and not yet split: at most one incomplete frame
    cdef Py_ssize_t blen, bcap
    cdef list _frames        # whole frames split out of the last read, served in order
    cdef Py_ssize_t _next
    cdef bint reading        # read() is in progress (possibly in read() without the GIL)

    cdef void _shrink(self) noexcept  # [buffers] give back the memory of a big frame
