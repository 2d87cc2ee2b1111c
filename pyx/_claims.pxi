# Cancel claims (docs/design.md, "Cancel claims"): one ring of 8-byte words per worker in
# the pool's shared page, each word ``seq << 1 | flag`` (0: started, 1: skipped) for the
# latest task decided with that residue, by the worker (started or skipped) or by the
# parent's claim. The worker decides each task with a compare-and-swap, the parent claims
# one not yet decided with another (only from the word of the task ``ring`` before it,
# decided), so exactly one of them wins; both are wait-free (at most two tries each: the
# only rival writer of a word settles it), so a worker killed at any instruction never
# makes the parent wait.
# The pure twin has no atomics: it exports ``Claims = None`` and its pools use CANCEL.

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uint64_t


cdef extern from *:
    """
    #include <stdint.h>
    static inline uint64_t pipepool_load_u64(uint64_t *p) {
        return __atomic_load_n(p, __ATOMIC_SEQ_CST);
    }
    static inline void pipepool_store_u64(uint64_t *p, uint64_t v) {
        __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
    }
    /* 1 if *p held *expected and now holds desired; else 0 and *expected is what it held. */
    static inline int pipepool_cas_u64(uint64_t *p, uint64_t *expected, uint64_t desired) {
        return __atomic_compare_exchange_n(
            p, expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    """
    uint64_t atomic_load "pipepool_load_u64"(uint64_t *p) noexcept nogil
    void atomic_store "pipepool_store_u64"(uint64_t *p, uint64_t v) noexcept nogil
    bint atomic_cas "pipepool_cas_u64"(uint64_t *p, uint64_t *expected, uint64_t desired) noexcept nogil


cdef class Claims:
    """One worker's ring of claim words in shared memory: ``ring`` 8-byte words at byte
    ``offset`` of ``buffer`` (a writable mapping, 8-aligned; held until ``release()``,
    which its owner calls before it unmaps the memory)."""

    cdef Py_buffer view
    cdef bint held
    cdef uint64_t *words
    cdef readonly Py_ssize_t ring

    def __cinit__(self, buffer, Py_ssize_t offset, Py_ssize_t ring):
        self.held = False
        if ring <= 0 or offset < 0 or offset % 8:
            raise ValueError("a claim ring needs ring > 0 words at an 8-aligned offset")
        PyObject_GetBuffer(buffer, &self.view, PyBUF_WRITABLE)
        self.held = True
        if offset + ring * 8 > self.view.len or (<size_t>self.view.buf) % 8:
            self.release()
            raise ValueError("the claim ring does not fit the buffer, 8-aligned")
        self.words = <uint64_t *>(<char *>self.view.buf + offset)
        self.ring = ring

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)

    def release(self):
        """Let go of the memory (idempotent); every other method then raises ValueError."""
        if self.held:
            self.held = False
            self.words = NULL
            PyBuffer_Release(&self.view)

    cdef inline uint64_t *word(self, uint64_t seq) except NULL:
        if self.words == NULL:
            raise ValueError("the claim ring was released")
        if seq == 0 or seq >= (<uint64_t>1) << 62:
            raise ValueError(f"task numbers run from 1, not {seq}")
        return self.words + seq % <uint64_t>self.ring

    def decide(self, uint64_t seq):
        """The worker, deciding its task ``seq`` (in order, under its gate's lock): True
        and the word says started, unless the parent claimed it (False: skip it).

        A claimed word may be ahead: the parent claims task ``seq + ring`` once ``seq``
        is decided, by a claim too, so a word that says skipped at ``seq`` or later
        says the parent claimed ``seq`` (and stays, for the worker's later tasks)."""
        cdef uint64_t *p = self.word(seq)
        cdef uint64_t old = atomic_load(p)
        while True:  # at most twice: only the parent's claim of ``seq`` competes
            if old & 1 and old >> 1 >= seq:
                return False
            if atomic_cas(p, &old, seq << 1):
                return True

    def skip(self, uint64_t seq):
        """The worker skips task ``seq`` for a reason of its own (REVOKE, CANCEL): the
        word says so, as a claim would, unless the parent's claims are there already."""
        cdef uint64_t *p = self.word(seq)
        cdef uint64_t old = atomic_load(p)
        while old >> 1 < seq:  # at most twice, as decide()
            if atomic_cas(p, &old, seq << 1 | 1):
                return

    def claim(self, uint64_t seq):
        """The parent, cancelling task ``seq`` of this worker without asking it: True
        (claimed: it never runs), False (the worker decided to start it first) or None
        (not decidable here: the task ``ring`` before it is not decided yet, or the
        worker skipped this one on its own; its answer to a frame says more)."""
        cdef uint64_t *p = self.word(seq)
        cdef uint64_t old = atomic_load(p)
        cdef uint64_t ring = <uint64_t>self.ring
        cdef int tries
        for tries in range(2):  # a failed swap means the worker just decided ``seq``
            if old >> 1 == seq:
                return False if old & 1 == 0 else None
            if not (old >> 1 == seq - ring or (seq <= ring and old == 0)):
                return None  # an earlier task of this residue is not decided
            if atomic_cas(p, &old, seq << 1 | 1):
                return True
        return None

    def read(self, uint64_t seq):
        """The word task ``seq`` maps to, as it is now (tests, diagnostics)."""
        return atomic_load(self.word(seq))
