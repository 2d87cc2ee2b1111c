# The wire format in C: header fields, the frame splitter, and the blocking FrameReader.
# Included by _loop.pyx (one extension module); frames.py is the specification.

cdef inline uint32_t le32(const unsigned char *p) noexcept nogil:
    return <uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t le64(const unsigned char *p) noexcept nogil:
    return <uint64_t>le32(p) | (<uint64_t>le32(p + 4) << 32)


cdef inline void put_header(unsigned char *h, unsigned char kind, uint64_t ident,
                            uint32_t length) noexcept nogil:
    cdef int i
    h[0] = MAGIC
    h[1] = kind
    h[2] = 0
    h[3] = 0
    for i in range(4):
        h[4 + i] = (length >> (8 * i)) & 0xFF
    for i in range(8):
        h[8 + i] = (ident >> (8 * i)) & 0xFF


cdef inline bint header_ok(const unsigned char *h, long long max_len) noexcept nogil:
    return h[0] == MAGIC and h[2] == 0 and h[3] == 0 and <long long>le32(h + 4) <= max_len


cdef inline tuple frame_tuple(object tag, bint tagged, const unsigned char *h, object payload):
    """``(tag, kind, ident, payload)`` or ``(kind, ident, payload)``, untracked by the GC.

    It holds only ints and bytes or a bytearray (and the caller's channel id when that is
    an int), so no
    reference cycle can pass through it; CPython would untrack it itself, but only at its
    next collection, after scanning it in every young one until then."""
    cdef tuple t
    if tagged:
        t = (tag, h[1], le64(h + 8), payload)
        if PyLong_CheckExact(tag):
            PyObject_GC_UnTrack(<void *>t)
    else:
        t = (h[1], le64(h + 8), payload)
        PyObject_GC_UnTrack(<void *>t)
    return t


cdef object header_error(const unsigned char *h, object max_payload):
    """The FrameError frames.check_header raises for this header, built without calling
    Python code (pump() must stay atomic)."""
    cdef unsigned int flags = h[2] | (h[3] << 8)
    if h[0] != MAGIC:
        return FrameError(f"bad frame magic 0x{h[0]:02x} (stream out of step or corrupted)")
    if flags:
        return FrameError(f"bad frame flags 0x{flags:04x} (reserved bits set)")
    return FrameError(f"frame length {le32(h + 4)} exceeds the limit of {max_payload} bytes")


cdef long long limit_of(object max_payload) except? -2:
    """``max_payload`` as a C number with the same ``length > max_payload`` outcome for
    every uint32 length."""
    if max_payload >= 0x7FFFFFFFFFFFFFFF:
        return 0x7FFFFFFFFFFFFFFF
    if max_payload < 0:
        return -1
    return <long long>math.floor(max_payload)


cdef int split_frames(const unsigned char *data, Py_ssize_t size, list out, object tag,
                      bint tagged, long long max_len, object max_payload,
                      Py_ssize_t *consumed, long long big=-1) except -1:
    """frames.split_frames over a C buffer: append every whole frame at the front of
    ``data`` to ``out`` and set ``consumed`` to the bytes they took. On a header that cannot
    be trusted, ``consumed`` is where it starts, and FrameError is raised (the frames
    before it are already in ``out``). One copy per payload (into its bytes object, or a
    bytearray when ``big`` >= 0 and the payload is at least that long), no slice objects,
    and no allocation a header asks for: only what has arrived is copied. Stops before a
    big frame that is not whole (the PipeLoop reads the rest of it in place)."""
    cdef Py_ssize_t start = 0
    cdef Py_ssize_t stop
    cdef const unsigned char *h
    cdef uint32_t length
    cdef object payload
    while size - start >= HEADER_SIZE:
        h = data + start
        if not header_ok(h, max_len):
            consumed[0] = start
            raise header_error(h, max_payload)
        length = le32(h + 4)
        stop = start + HEADER_SIZE + <Py_ssize_t>length
        if stop > size:
            break
        if 0 <= big <= length:
            payload = PyByteArray_FromStringAndSize(<const char *>h + HEADER_SIZE, length)
        else:
            payload = PyBytes_FromStringAndSize(<const char *>h + HEADER_SIZE, length)
        out.append(frame_tuple(tag, tagged, h, payload))
        start = stop
    consumed[0] = start
    return 0


cdef int grow(unsigned char **buf, Py_ssize_t *cap, Py_ssize_t needed) except -1:
    cdef unsigned char *bigger
    if needed <= cap[0]:
        return 0
    bigger = <unsigned char *>PyMem_Realloc(buf[0], needed)
    if bigger == NULL:
        raise MemoryError()
    buf[0] = bigger
    cap[0] = needed
    return 0


cdef class FrameReader:
    """Blocking frame reader over one fd, used by the worker on its activity pipe."""

    READ_SIZE = 1 << 18  # as frames.FrameReader; informational, reads use the C constant

    def __cinit__(self, *args, **kwargs):
        self._fd = -1
        self._frames = []

    def __init__(self, int fd, max_payload=MAX_PAYLOAD):
        self._fd = fd
        self.max_len = limit_of(max_payload)
        self._max_payload = max_payload

    def __dealloc__(self):
        PyMem_Free(self.buf)

    def buffered(self):
        return self._next < len(self._frames)

    def read(self):
        cdef ssize_t n
        cdef int err
        cdef Py_ssize_t consumed = 0
        cdef object frame
        if self.reading:
            raise RuntimeError("FrameReader.read() called while another read() is running")
        self.reading = True
        try:
            while self._next >= len(self._frames):
                self._frames.clear()
                self._next = 0
                # Room for one read beyond what is buffered: the only allocation a peer's
                # header does not control is this bounded chunk.
                grow(&self.buf, &self.bcap, self.blen + READ_SIZE)
                while True:
                    with nogil:  # a blocking read: let the lifeline thread (and any other) run
                        n = c_read(self._fd, self.buf + self.blen, READ_SIZE)
                        err = errno
                    if n >= 0:
                        break
                    if err != EINTR:
                        raise OSError(err, os.strerror(err))
                    PyErr_CheckSignals()  # as os.read: a handler's exception propagates
                if n == 0:
                    if self.blen:
                        raise FrameError(
                            f"EOF in the middle of a frame ({self.blen} bytes buffered)")
                    return None
                self.blen += n
                try:
                    split_frames(self.buf, self.blen, self._frames, None, False,
                                 self.max_len, self._max_payload, &consumed)
                finally:  # also on FrameError: the bad header stays at the front, as in frames.py
                    self.blen -= consumed
                    if consumed and self.blen:
                        memmove(self.buf, self.buf + consumed, self.blen)
                    if self.bcap > 4 * READ_SIZE and self.blen < READ_SIZE:
                        self._shrink()
            frame = self._frames[self._next]
            self._frames[self._next] = None  # free big payloads early
            self._next += 1
            return frame
        finally:
            self.reading = False

    cdef void _shrink(self) noexcept:
        # After a big frame, give the memory back (realloc to less cannot fail usefully).
        cdef unsigned char *smaller = <unsigned char *>PyMem_Realloc(self.buf, 2 * READ_SIZE)
        if smaller != NULL:
            self.buf = smaller
            self.bcap = 2 * READ_SIZE
