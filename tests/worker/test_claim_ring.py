"""Cancel claims, the parts (docs/design.md, "Cancel claims"): the compiled loop's
``Claims`` (one worker's ring of claim words, decided by compare-and-swap), the start
marks' page that holds a ring per worker slot, and the worker's gate deciding each task
through it. The pure loop has no ``Claims``; its pools cancel by asking the worker (the
pools' tests run both loops: tests/futures/test_cancel_claims.py,
tests/executor/test_cancel_claims.py).
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import textwrap

import pytest

from helpers import twins
from pipepool.frames import Kind, split_frames
from pipepool.worker._marks import CLAIM_RING, MarkTable, StartMark, shared_fd
from pipepool.worker._serve import _Gate

pytestmark = [pytest.mark.timeout(60), pytest.mark.portable]

RING = 4


@pytest.fixture
def claims_type():
    return twins()[1].Claims


@pytest.fixture
def ring(claims_type):
    memory = mmap.mmap(-1, mmap.PAGESIZE)
    claims = claims_type(memory, 64, RING)
    yield claims
    claims.release()
    memory.close()


def test_a_claim_before_the_decision_wins_and_the_worker_skips(ring):
    assert ring.claim(1) is True
    assert ring.read(1) == 1 << 1 | 1
    assert ring.decide(1) is False  # the worker finds it claimed: it never runs
    assert ring.claim(1) is None  # decided (skipped), not by this claim: undecidable


def test_a_decision_before_the_claim_wins_and_the_claim_says_started(ring):
    assert ring.decide(1) is True
    assert ring.read(1) == 1 << 1
    assert ring.claim(1) is False  # too late: it runs
    assert ring.read(1) == 1 << 1


def test_a_task_whose_predecessor_in_the_ring_is_undecided_cannot_be_claimed(ring):
    """Task 1 + RING shares task 1's word: until the worker decides 1, the word cannot
    tell task 1 + RING's fate, so the claim says None and changes nothing."""
    later = 1 + RING
    assert ring.claim(later) is None and ring.read(later) == 0
    assert ring.decide(1) is True
    assert ring.claim(later) is True  # task 1 decided: task 1 + RING can be claimed
    assert ring.decide(later) is False
    assert ring.claim(later + RING) is True  # after a claim as after a start


def test_claims_chained_ahead_of_the_worker_are_all_skipped(ring):
    """Claimed, task 1 counts as decided: task 1 + RING can be claimed before the worker
    reaches either. The word then names the later claim, and the worker must still
    skip both (and a skip of its own must not overwrite that word)."""
    assert ring.claim(1) is True and ring.claim(1 + RING) is True
    assert ring.claim(1 + 2 * RING) is True
    ring.skip(1)  # say a REVOKE covered task 1 too
    assert ring.read(1) == (1 + 2 * RING) << 1 | 1
    assert ring.decide(1) is False
    assert ring.decide(1 + RING) is False
    assert ring.decide(1 + 2 * RING) is False
    assert ring.decide(1 + 3 * RING) is True  # the first one nobody claimed runs
    assert ring.claim(1 + 3 * RING) is False


def test_a_skip_of_the_workers_own_is_written_and_is_not_a_claim(ring):
    ring.skip(2)  # a REVOKE or a CANCEL frame skipped it
    assert ring.read(2) == 2 << 1 | 1
    assert ring.claim(2) is None  # the worker's answer to its frame settles it
    assert ring.claim(2 + RING) is True  # and the next task of the word is decidable


def test_the_ring_checks_its_arguments_and_lets_go_of_the_memory(claims_type):
    memory = mmap.mmap(-1, mmap.PAGESIZE)
    with pytest.raises(ValueError):
        claims_type(memory, 4, RING)  # not 8-aligned
    with pytest.raises(ValueError):
        claims_type(memory, mmap.PAGESIZE - 8, RING)  # does not fit
    claims = claims_type(memory, 0, RING)
    with pytest.raises(ValueError):
        claims.claim(0)  # tasks are numbered from 1
    with pytest.raises(BufferError):
        memory.close()  # held: the ring points into it
    claims.release()
    claims.release()  # idempotent
    memory.close()
    with pytest.raises(ValueError):
        claims.claim(1)  # released: never a write into unmapped memory


# The shared memory of the race below, in 8-byte words: the ring, then three flags, then
# a byte per task saying how the worker decided it.
GO, READY, CLAIMING = 0, 1, 2  # after the ring: go (parent), ready (worker), the task
# the parent claims next (the worker stays within LEAD tasks of it: they keep racing)
LEAD = 3

CHILD = textwrap.dedent(
    """
    import mmap, random, sys
    from pipepool.loop import _loop
    fd, tasks, ring, lead = (int(a) for a in sys.argv[1:])
    memory = mmap.mmap(fd, 0)
    words = memoryview(memory).cast("Q")
    flags, decided = ring, (ring + 3) * 8
    claims = _loop.Claims(memory, 0, ring)
    words[flags + 1] = 1  # ready
    while words[flags] != 1:  # the parent says go: both sides race from here
        pass
    spins = random.Random(5).choices(range(30), k=tasks)  # who wins varies
    for seq in range(1, tasks + 1):
        while words[flags + 2] + lead < seq:  # not too far ahead of the parent
            pass
        for _ in range(spins[seq - 1]):
            pass
        memory[decided + seq] = 2 if claims.decide(seq) else 3  # started, or skipped
    words.release()
    claims.release()
    """
)


def test_claims_racing_decisions_across_processes_never_both_win(claims_type):
    """A worker process decides tasks 1..N in order while this process claims each even
    one as soon as the worker has decided the one before it (both race for the same
    word; the worker never runs more than LEAD tasks ahead): each task is started by
    the worker or claimed here, never both and never neither; a claim that says False
    was started."""
    tasks, ring = 20000, 8
    flags, decided = ring, (ring + 3) * 8
    fd = shared_fd(-(-(decided + tasks + 1) // mmap.PAGESIZE) * mmap.PAGESIZE)
    memory = mmap.mmap(fd, 0)
    words = memoryview(memory).cast("Q")
    claims = claims_type(memory, 0, ring)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(fd), str(tasks), str(ring), str(LEAD)],
        pass_fds=(fd,),
    )
    claimed, too_late, undecidable = set(), set(), set()
    try:
        while words[flags + READY] != 1:
            assert child.poll() is None, "the worker process failed to start"
        words[flags + GO] = 1
        for seq in range(2, tasks + 1, 2):
            words[flags + CLAIMING] = seq
            while not memory[decided + seq - 1]:  # it decides ``seq`` next: race it
                if child.poll() is not None:
                    assert memory[decided + seq - 1], "the worker ended early"
            answer = claims.claim(seq)
            # None: the worker decided a ring past it meanwhile (its word moved on)
            (claimed if answer else too_late if answer is False else undecidable).add(seq)
        words[flags + CLAIMING] = tasks
        assert child.wait(timeout=50) == 0
        outcome = bytes(memory[decided : decided + tasks + 1])
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        claims.release()
        words.release()
        memory.close()
        os.close(fd)
    started = {s for s in range(1, tasks + 1) if outcome[s] == 2}
    skipped = {s for s in range(1, tasks + 1) if outcome[s] == 3}
    assert skipped == claimed and not claimed & started
    assert claimed | started == set(range(1, tasks + 1))
    assert too_late | undecidable <= started
    assert set(range(1, tasks + 1, 2)) <= started  # nobody claimed the odd ones
    assert claimed and too_late, "precondition: claims both won and lost the race"


def test_the_marks_page_gives_each_worker_slot_a_clean_ring(claims_type):
    table = MarkTable(1, claims_type)
    try:
        assert table.claims_at > 0
        slot = table.claim()
        ring = table.ring(slot)
        assert ring is not None and ring.ring == CLAIM_RING
        assert ring.decide(1) and ring.decide(2)
        table.release(slot)  # its worker exited: the ring is let go of
        with pytest.raises(ValueError):
            ring.claim(3)
        again = table.claim()
        assert again == slot
        fresh = table.ring(again)
        assert fresh.read(1) == fresh.read(2) == 0  # a new worker numbers from 1 again
    finally:
        table.close()  # rings still held: close lets go of them first


def test_without_a_claims_type_the_page_has_no_rings():
    table = MarkTable(1)
    try:
        assert table.claims_at == 0
        assert table.ring(table.claim()) is None
    finally:
        table.close()


def frames_in(fd: int) -> list[tuple[int, int]]:
    os.set_blocking(fd, False)
    try:
        data = os.read(fd, 4096)
    except BlockingIOError:
        return []
    frames: list = []
    split_frames(bytearray(data), frames)
    return [(kind, ident) for kind, ident, _ in frames]


def test_the_gate_skips_a_claimed_task_and_writes_every_skip_of_its_own(claims_type):
    """The worker's side: a task the parent claimed is skipped silently (no mark, no
    frame); one it decides to start takes the word first (the claim says False); one
    skipped for a REVOKE or a CANCEL has its word say skipped, so the claim of the task
    a ring later is decidable."""
    table = MarkTable(1, claims_type)
    slot = table.claim()
    parent = table.ring(slot)
    mark = StartMark(table.fd, slot, table.claims_at, claims_type)
    result_r, result_w = os.pipe()
    try:
        gate = _Gate(result_w, mark)
        assert gate.claims is mark.claims is not None
        assert parent.claim(1) is True
        assert gate.start(1) is False  # claimed: skipped, no mark
        assert table.read(slot) == 0 and gate.current == 0
        assert gate.start(2) is True
        assert table.read(slot) == 2 and parent.claim(2) is False
        gate.cancel(3)  # a CANCEL frame's answer: it will skip task 3
        assert gate.start(3) is False and parent.read(3) == 3 << 1 | 1
        gate.revoke(4)
        assert gate.start(4) is False and parent.read(4) == 4 << 1 | 1
        assert frames_in(result_r) == [(Kind.CANCELLED, 3), (Kind.REVOKED, 2)]
        assert parent.claim(3 + CLAIM_RING) is True  # its word is decidable again
        assert gate.start(3 + CLAIM_RING) is False
    finally:
        mark.unmap()  # it holds the worker's ring: let go of first, then unmapped
        table.close()
        os.close(result_r)
        os.close(result_w)


def test_a_gate_without_a_ring_decides_as_before():
    table = MarkTable(1)
    slot = table.claim()
    mark = StartMark(table.fd, slot)
    result_r, result_w = os.pipe()
    try:
        gate = _Gate(result_w, mark)
        assert gate.claims is None
        assert gate.start(1) is True and table.read(slot) == 1
    finally:
        mark.unmap()
        table.close()
        os.close(result_r)
        os.close(result_w)
