# A channel's buffers: the queue of outgoing frames and the incomplete incoming frame.
# Included by _loop.pyx; no system calls here (PipeLoop makes them).


cdef inline void release(OutFrame *f) noexcept:
    Py_DECREF(<object>f.kind)
    Py_DECREF(<object>f.ident)
    Py_DECREF(<object>f.payload)
    Py_XDECREF(f.view)


cdef class _Channel:

    def __cinit__(self, channel, int write_fd, int read_fd, int exit_fd):
        self.channel = channel
        self.write_fd = write_fd
        self.read_fd = read_fd
        self.exit_fd = exit_fd

    def __dealloc__(self):
        while self.count:
            release(&self.out[self.head])
            self.head = (self.head + 1) & (self.capacity - 1)
            self.count -= 1
        PyMem_Free(self.out)
        PyMem_Free(self.inbuf)

    cdef int push(self, object kind, object ident, object payload) except -1:
        cdef OutFrame *f
        cdef OutFrame *ring
        cdef Py_ssize_t i, size, capacity
        cdef const char *data
        cdef object view = None
        cdef bytes header
        if PyBytes_CheckExact(payload):
            data = PyBytes_AS_STRING(payload)
            size = PyBytes_GET_SIZE(payload)
        else:  # any C-contiguous buffer; the memoryview pins it until it is written
            view = memoryview(payload)
            if not view.c_contiguous:
                raise TypeError("a frame payload must be a C-contiguous buffer")
            data = <const char *>PyMemoryView_GET_BUFFER(view).buf
            size = PyMemoryView_GET_BUFFER(view).len
        if self.count == self.capacity:
            capacity = self.capacity * 2 if self.capacity else 8
            ring = <OutFrame *>PyMem_Realloc(NULL, capacity * sizeof(OutFrame))
            if ring == NULL:
                raise MemoryError()
            for i in range(self.count):
                ring[i] = self.out[(self.head + i) & (self.capacity - 1)]
            PyMem_Free(self.out)
            self.out = ring
            self.head = 0
            self.capacity = capacity
        f = &self.out[(self.head + self.count) & (self.capacity - 1)]
        if (PyLong_Check(kind) and PyLong_Check(ident) and size <= 0xFFFFFFFF
                and 0 <= kind <= 0xFF and 0 <= ident <= 0xFFFFFFFFFFFFFFFF):
            put_header(f.header, <unsigned char>kind, <uint64_t>ident, <uint32_t>size)
        else:  # anything unusual: frames.encode_header packs it or raises what it raises
            header = _frames.encode_header(kind, ident, size)
            memcpy(f.header, PyBytes_AS_STRING(header), HEADER_SIZE)
        Py_INCREF(kind)
        Py_INCREF(ident)
        Py_INCREF(payload)
        f.kind = <PyObject *>kind
        f.ident = <PyObject *>ident
        f.payload = <PyObject *>payload
        f.view = NULL
        if view is not None:
            Py_INCREF(view)
            f.view = <PyObject *>view
        f.data = data
        f.size = size
        self.count += 1
        self.pending += HEADER_SIZE + size
        return 0

    cdef void advance(self, Py_ssize_t written) noexcept:
        cdef Py_ssize_t left
        cdef OutFrame *f
        while written:
            f = &self.out[self.head]
            left = HEADER_SIZE + f.size - self.offset
            if written < left:
                self.offset += written
                return
            written -= left
            release(f)
            self.head = (self.head + 1) & (self.capacity - 1)
            self.count -= 1
            self.offset = 0

    cdef list take_unsent(self):
        cdef list unsent = []
        cdef OutFrame *f
        while self.count:
            f = &self.out[self.head]
            unsent.append((<object>f.kind, <object>f.ident, <object>f.payload))
            release(f)
            self.head = (self.head + 1) & (self.capacity - 1)
            self.count -= 1
        self.offset = 0
        return unsent

    cdef int keep_in(self, const unsigned char *data, Py_ssize_t size,
                     Py_ssize_t frame_size) except -1:
        cdef Py_ssize_t needed = self.in_len + size
        if needed > self.in_cap:
            # What arrived plus at most one more read chunk, never what the header claims
            # (frame_size is trusted only as an upper bound once it passed the limit check).
            if frame_size:
                grow(&self.inbuf, &self.in_cap, min(frame_size, needed + READ_SIZE))
            else:
                grow(&self.inbuf, &self.in_cap, max(needed, HEADER_SIZE))
        memcpy(self.inbuf + self.in_len, data, size)
        self.in_len = needed
        return 0

    cdef void drop_in(self) noexcept:
        PyMem_Free(self.inbuf)
        self.inbuf = NULL
        self.in_len = self.in_cap = 0
        self.big = None

    cdef Py_ssize_t start_big(self, const unsigned char *header, const unsigned char *data,
                              Py_ssize_t size, list frames) except -1:
        # The header has passed the limit check; of what it announces only BIG_TRUST (or
        # what already arrived) is allocated before the bytes are there.
        cdef Py_ssize_t length = <Py_ssize_t>le32(header + 4)
        cdef Py_ssize_t have = min(length, size)
        cdef object big = PyByteArray_FromStringAndSize(
            NULL, max(have, min(length, <Py_ssize_t>BIG_TRUST)))
        memcpy(PyByteArray_AS_STRING(big), data, have)
        if have == length:
            frames.append(frame_tuple(self.channel, True, header, big))
        else:
            memcpy(self.big_header, header, HEADER_SIZE)
            self.big = big
            self.big_filled = have
            self.big_size = length
        return have

    cdef int grow_big(self) except -1:
        cdef Py_ssize_t cap = PyByteArray_GET_SIZE(self.big)
        if PyByteArray_Resize(self.big, min(self.big_size, 2 * cap)) < 0:
            raise MemoryError()
        return 0
