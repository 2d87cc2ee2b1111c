"""Start marks: how the parent learns that a worker began a task, without a frame.

Each worker owns one 8-byte slot in a page of memory shared with its pool's parent. Before
it runs a task it stores that task's sequence number there (tasks are numbered 1, 2, ...
per worker, in the order the parent sent them). The parent reads the slot when it wants
to know (every ``sync()`` round, and once more after the worker died): every task up to
the mark was started, every later one never was. That replaces a STARTED frame per task
(a pickle-free write and a parent wake-up each) with one store.

Why this keeps the bookkeeping exact (docs/design.md, "Start marks"):

* The worker stores the mark before it runs the task, and writes the task's outcome
  into its result pipe before it stores the next mark. So when a worker dies, the tasks
  up to its final mark whose outcome never arrived number at most one: the task it was
  running. That one fails as lost; every later one is dispatched again.
* The store is one aligned 8-byte write (``memoryview.cast("Q")`` item assignment is a
  single ``memcpy`` of 8 bytes, one instruction on the platforms we build for), so the
  parent never reads a half-written number, even from a worker killed mid-store.
* A pipe write is a system call, which orders the worker's memory: a parent that has
  read task k's outcome reads a mark of at least k.

The page comes from ``memfd_create`` where the OS has it (Linux), else from an unlinked
temporary file; its fd reaches spawn and forkserver children like the pipes do.

With the compiled loop the same memory also holds each worker slot's ring of cancel
claims (``CLAIM_RING`` words after the marks, the loop's ``Claims``): the parent cancels
a task the worker has not decided yet by a compare-and-swap there, without asking the
worker (docs/design.md, "Cancel claims").
"""

from __future__ import annotations

import mmap
import os
import weakref
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..loop import ClaimsAPI

    ClaimsType = Callable[[mmap.mmap, int, int], ClaimsAPI]

SLOT_SIZE = 8
SLOTS_PER_WORKER = 4  # slots per unit of parallelism: room for workers that are dying
# (closed, not yet reaped) while their replacements start; 4x is never reached in practice
CLAIM_RING = 64  # claim words per worker slot: a task sent this far behind the one the
# worker decides next cannot be claimed yet (its word still holds an undecided task's
# predecessor), and is cancelled by asking the worker instead


class Unmappable(Protocol):
    def unmap(self) -> None: ...


_mapped: weakref.WeakSet[Unmappable] = weakref.WeakSet()  # what unmap_in_children registered


def unmap_in_children(owner: Unmappable) -> None:
    """Unmap ``owner``'s shared memory (its ``unmap()``) in every process forked from
    this one, right after the fork: a forked worker maps what it is handed instead, and a
    task's forked child (which may outlive the pool) holds none of the pool's memory.
    Not ``MADV_DONTFORK``: a child would then hold mmap objects whose addresses it may
    reuse, and unmap the wrong memory when one is freed."""
    _mapped.add(owner)


def _unmap_inherited() -> None:
    for owner in list(_mapped):
        owner.unmap()


os.register_at_fork(after_in_child=_unmap_inherited)


def shared_fd(size: int, name: str = "pipepool-marks") -> int:
    """An fd for ``size`` bytes of memory no other process can name (sparse: a page costs
    memory once touched). Also the payload regions' (``_region``)."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        fd = memfd_create(name, os.MFD_CLOEXEC)
    else:  # macOS: an unlinked file; its pages live in the page cache
        import tempfile  # the parent's side only: a worker never imports it for this

        fd, path = tempfile.mkstemp(prefix=f"{name}-")
        os.unlink(path)
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _pages(size: int) -> int:
    return -(-size // mmap.PAGESIZE) * mmap.PAGESIZE


class MarkTable:
    """The parent's side: a shared page of start marks, one slot per live worker; with a
    ``claims`` type (the compiled loop's ``Claims``), a ring of claim words per slot too."""

    def __init__(self, parallelism: int, claims: ClaimsType | None = None) -> None:
        size = _pages(max(16, SLOTS_PER_WORKER * parallelism) * SLOT_SIZE)
        slots = size // SLOT_SIZE  # the page's worth
        # Where the claim rings begin (0: none), after the marks, a ring per slot.
        self.claims_at = size if claims is not None else 0
        if claims is not None:
            size += slots * CLAIM_RING * SLOT_SIZE  # (sparse: a ring costs once used)
        self.fd = shared_fd(size)  # kept open: spawn and forkserver children map it
        try:
            self._map = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise
        self._claims_type = claims
        self._marks = memoryview(self._map).cast("Q")
        self._rings: dict[int, ClaimsAPI] = {}  # slot -> its claim ring, while claimed
        self._free = list(range(slots - 1, -1, -1))
        unmap_in_children(self)

    def claim(self) -> int | None:
        """A free slot set to 0 (its claim ring too) for a new worker, or None when every
        slot is taken. Its last worker has exited: nobody else writes there."""
        if not self._free:
            return None
        slot = self._free.pop()
        self._marks[slot] = 0
        if self._claims_type is not None:
            offset = claims_offset(self.claims_at, slot)
            self._map[offset : offset + CLAIM_RING * SLOT_SIZE] = bytes(CLAIM_RING * SLOT_SIZE)
            self._rings[slot] = self._claims_type(self._map, offset, CLAIM_RING)
        return slot

    def ring(self, slot: int) -> ClaimsAPI | None:
        """The claim ring of a claimed slot (None without claims)."""
        return self._rings.get(slot)

    def release(self, slot: int) -> None:
        """Give back the slot of a worker that has exited."""
        ring = self._rings.pop(slot, None)
        if ring is not None:
            ring.release()
        self._free.append(slot)

    def read(self, slot: int) -> int:
        """The sequence number of the last task the slot's worker began (0: none)."""
        return self._marks[slot]

    def unmap(self) -> None:
        for ring in self._rings.values():  # they hold the mapping: let go of it first
            ring.release()
        self._rings.clear()
        self._marks.release()
        self._map.close()

    def close(self) -> None:
        self.unmap()
        os.close(self.fd)


def claims_offset(claims_at: int, slot: int) -> int:
    """The byte offset of ``slot``'s claim ring in a MarkTable whose rings begin at
    ``claims_at``."""
    return claims_at + slot * CLAIM_RING * SLOT_SIZE


class StartMark:
    """The worker's side: the one slot it stores its start marks in, and its claim ring
    (``claims``, None unless the pool gave it one: ``claims_at`` and the loop's type)."""

    __slots__ = ("__weakref__", "_map", "_marks", "_slot", "claims")

    def __init__(
        self, fd: int, slot: int, claims_at: int = 0, claims: ClaimsType | None = None
    ) -> None:
        self._map = mmap.mmap(fd, 0)
        self._marks = memoryview(self._map).cast("Q")
        self._slot = slot
        self.claims: ClaimsAPI | None = None
        if claims_at and claims is not None:
            self.claims = claims(self._map, claims_offset(claims_at, slot), CLAIM_RING)
        unmap_in_children(self)

    def set(self, seq: int) -> None:
        """Say that task ``seq`` is about to run."""
        self._marks[self._slot] = seq

    def view(self) -> tuple[memoryview, int]:
        """Where ``set`` stores: the page and this worker's slot in it (the task loop
        stores there itself, ``_serve._Gate.start``)."""
        return self._marks, self._slot

    def unmap(self) -> None:
        if self.claims is not None:  # it holds the mapping: let go of it first
            self.claims.release()
        self._marks.release()
        self._map.close()
