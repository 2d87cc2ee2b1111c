"""Big payloads through each worker's shared region (worker/_region.py, docs/design.md
"Big payloads").

What could break: a payload that waits for further sync() calls (the heartbeat case of
issue 26), a ring that hands out space its reader still reads, a full ring that blocks
the parent, a worker that dies reading or writing one, and memory that outlives the pool.
The writer killed half way is ``test_faults.py::test_worker_killed``
(mid-result-copy), and forged references are in ``test_bad_frames.py::test_bad_frame``'s
table.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from concurrent.futures import CancelledError

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proc_table
import tasks
from helpers import Recorder
from pipepool import State, TaskUnpicklingError
from pipepool.executor import _collect, _dispatch
from pipepool.frames import Kind
from pipepool.worker import _region
from pipepool.worker._region import PAGE, REF, Region

pytestmark = pytest.mark.portable

MiB = 1 << 20
KiB = 1 << 10


def distinct(i: int, size: int) -> bytes:
    """``size`` bytes that differ from any other ``i``'s everywhere, not just at the start."""
    return (i.to_bytes(4, "little") + bytes(range(252))) * (size // 256) + bytes(size % 256)


# -- the heartbeat: one sync() moves a payload whole ------------------------------------


@pytest.mark.timeout(120)
def test_a_heartbeat_moves_every_payload_in_one_sync(make):
    """Issue 26's case, counted rather than timed: two workers, ten tasks each taking a
    distinct 1 MiB and returning 1 MiB. Between two sync() calls the scheduler waits only
    until something arrived (as a heartbeat's sleep would, but never longer than
    needed): through the pipes that is every 64 KiB, 16 calls per MiB each way; through
    the rings, each call collects whole outcomes. At most 1.5 calls per task."""
    ex = make(2)
    args = {i: distinct(i, MiB) for i in range(10)}
    for i, arg in args.items():
        ex.queue(i, tasks.reverse_bytes, arg)
    done = {}
    ex.sync()  # starts the workers and sends what fits
    calls = 1
    while len(done) < len(args):
        assert ex._loop.wait(60), f"nothing arrived in 60 s; stats={ex.stats()}"
        ex.sync()
        calls += 1
        done.update((k, e) for k, e in ex.get_event_buffer().items() if e.state.terminal)
    assert all(done[i].result == arg[::-1] for i, arg in args.items())
    assert calls <= 15, f"{calls} sync() calls for {len(args)} tasks"


# -- the ring itself ---------------------------------------------------------------------


@pytest.fixture
def small_rings(monkeypatch):
    """Rings of 1 MiB with 256 KiB warm, so that tests reach every case quickly."""
    monkeypatch.setattr(_region, "RING_SIZE", MiB)
    monkeypatch.setattr(_region, "WARM", 256 * KiB)


@pytest.fixture
def pair(small_rings):
    """Both ends of one region in this process: the parent's, and a worker's mapping."""
    parent = Region.create()
    worker = Region(os.dup(parent.fd), worker=True)
    yield parent, worker
    for region in (parent, worker):
        region.close()
        os.close(region.fd)


def send(parent: Region, data: bytes) -> int | None:
    """Put ``data`` in the calls' ring: its offset, or None when it has no room."""
    ref = parent.put(Kind.TASK, data)
    return None if ref is None else REF.unpack(ref)[2]


def receive(worker: Region, offset: int, length: int) -> bytes:
    kind, view = worker.take(REF.pack(Kind.TASK, length, offset))
    assert kind == Kind.TASK
    return view.tobytes()


def resident(region: Region) -> int:
    """Bytes of the region that hold memory (a sparse memfd's allocated blocks)."""
    return os.fstat(region.fd).st_blocks * 512


def test_an_empty_ring_starts_again_at_its_warm_pages(pair):
    parent, worker = pair
    for i in range(5):
        offset = send(parent, distinct(i, 100 * KiB))
        assert offset == 0  # released each time: the same pages, never a fault
        assert receive(worker, offset, 100 * KiB) == distinct(i, 100 * KiB)
        worker.release()
    assert resident(parent) <= PAGE + 100 * KiB + PAGE  # header, one payload's pages


def test_a_ring_places_in_order_waits_for_releases_and_wraps(pair):
    parent, worker = pair
    sizes = [300 * KiB, 300 * KiB, 300 * KiB]
    offsets = [send(parent, distinct(i, n)) for i, n in enumerate(sizes)]
    assert offsets == [0, 300 * KiB, 600 * KiB]  # past the warm pages: on, while it fits
    assert send(parent, distinct(3, 200 * KiB)) is None  # 124 KiB left: no room
    assert receive(worker, 0, sizes[0]) == distinct(0, sizes[0])
    assert send(parent, distinct(3, 200 * KiB)) is None  # read, not released yet
    worker.release()
    assert send(parent, distinct(3, 200 * KiB)) == 0  # back to the start, before the oldest
    assert send(parent, distinct(4, 200 * KiB)) is None  # 100 KiB until the oldest
    for i, offset in ((1, 300 * KiB), (2, 600 * KiB), (3, 0)):
        size = 200 * KiB if i == 3 else 300 * KiB
        assert receive(worker, offset, size) == distinct(i, size)
        worker.release()
    assert send(parent, distinct(5, MiB)) == 0  # empty: all of it, whatever its size
    assert send(parent, b"x") is None


@pytest.mark.skipif(_region._MADV_REMOVE is None, reason="no MADV_REMOVE: pages are kept")
def test_pages_past_the_warm_ones_go_back_once_released(pair):
    parent, worker = pair
    offset = send(parent, distinct(0, 900 * KiB))
    assert resident(parent) >= 900 * KiB
    receive(worker, offset, 900 * KiB)
    worker.release()
    assert resident(parent) <= PAGE + 256 * KiB  # the header and the warm pages


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.integers(1, 700 * KiB), st.just(0)), min_size=1, max_size=60))
def test_a_ring_never_hands_out_space_its_reader_has_not_released(steps):
    """A random run of puts (sizes) and reads (0: read and release the oldest), against a
    model: each read returns exactly what was put, and a put into an empty ring fits."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_region, "RING_SIZE", MiB)
        patch.setattr(_region, "WARM", 256 * KiB)
        parent = Region.create()
        worker = Region(os.dup(parent.fd), worker=True)
    try:
        unread: list[tuple[int, bytes]] = []
        for i, size in enumerate(steps):
            if size == 0:
                if unread:
                    offset, data = unread.pop(0)
                    assert receive(worker, offset, len(data)) == data
                    worker.release()
                continue
            data = distinct(i, size)
            offset = send(parent, data)
            if not unread:
                assert offset is not None
            if offset is not None:
                unread.append((offset, data))
        for offset, data in unread:
            assert receive(worker, offset, len(data)) == data
            worker.release()
    finally:
        for region in (parent, worker):
            region.close()
            os.close(region.fd)


# -- faults: the reader killed, the ring full --------------------------------------------


def region_mappings() -> int:
    """This process's mappings of payload regions."""
    with open("/proc/self/maps") as f:
        return sum("pipepool-payloads" in line for line in f)


@pytest.mark.timeout(120)
def test_a_call_is_not_overwritten_while_its_worker_unpickles_it(make, tmp_path):
    """The reader releases a payload only once it has unpickled it: a worker is held in
    the middle of unpickling a 512 KiB call from its ring while the parent sends it the
    next one; released too early, the next would be placed over the first (an empty ring
    starts again at 0), and the first call would run with the second's bytes."""
    started, go = str(tmp_path / "started"), str(tmp_path / "go")
    ex = make(1, prefetch=2)
    first, second = distinct(1, 512 * KiB), distinct(2, 512 * KiB)
    ex.queue(1, tasks.echo, (tasks.HeldWhileUnpickled(started, go), first))
    rec = Recorder(ex)
    rec.run_until(lambda: os.path.exists(started))
    ex.queue(2, tasks.echo, second)
    rec.run_until(lambda: 2 in ex.running)  # sent while the worker is held
    open(go, "w").close()
    rec.finish()
    assert rec.terminal[1].result == ("held", first)
    assert rec.terminal[2].result == second


@pytest.mark.timeout(120)
def test_a_worker_killed_reading_its_shared_batch_loses_nothing(make, tmp_path):
    """The reader killed half way: the one worker dies while it unpickles a BATCH from
    its ring (an argument kills it, once). None of that batch started, so every call runs
    again, exactly once and with its whole argument, on the replacement, through the
    replacement's own region; and no region stays mapped in the parent."""
    log = str(tmp_path / "runs.log")
    ex = make(1, prefetch=4)
    killer = tasks.DieWhileUnpickled(str(tmp_path / "died"))
    args = {i: distinct(i, 256 * KiB) for i in range(8)}
    ex.queue(0, tasks.record, log, 0, 0, (killer, len(args[0])))
    for i in range(1, 8):
        ex.queue(i, tasks.record, log, i, 0, args[i][::-1])
    rec = Recorder(ex)
    rec.finish()
    assert os.path.exists(tmp_path / "died")
    assert not rec.duplicates and all(e.state is State.SUCCESS for e in rec.terminal.values())
    assert rec.terminal[0].result == ("survived", len(args[0]))
    assert all(rec.terminal[i].result == args[i][::-1] for i in range(1, 8))
    with open(log) as f:
        assert Counter(f.read().split()) == {str(i): 1 for i in range(8)}
    assert ex.stats()["tasks_lost"] == 0
    if proc_table.HAVE_PROC:
        assert region_mappings() == 0  # ended: every region unmapped, the dead one's too


@pytest.mark.timeout(120)
def test_refused_and_revoked_calls_give_their_ring_space_back(make, tmp_path):
    """A BATCH the worker cannot unpickle (REFUSED, resent one call per frame) and calls
    it skips unread (cancelled while sent ahead: REVOKE) are released like any other:
    once the worker is idle its calls' ring is empty again, as each call's space would
    stay taken for the worker's life otherwise, and the ring fill up."""
    release = str(tmp_path / "release")
    ex = make(1, prefetch=4)
    args = {i: distinct(i, 64 * KiB) for i in range(7)}
    ex.queue(0, tasks.echo, (tasks.UnpicklableInParent(), args[0]))
    for i in (1, 2, 3):
        ex.queue(i, tasks.echo, args[i])
    rec = Recorder(ex)
    rec.run_until(lambda: len(rec.terminal) == 4)
    assert isinstance(rec.terminal[0].exception, TaskUnpicklingError)
    assert all(rec.terminal[i].result == args[i] for i in (1, 2, 3))
    ex.queue("block", tasks.wait_for, release)
    rec.run_until(lambda: "block" in rec.running_seen)
    for i in (4, 5, 6):
        ex.queue(i, tasks.echo, args[i])
    rec.run_until(lambda: ex.stats()["tasks_running"] == 4)  # sent ahead, behind "block"
    assert [ex.cancel(i) for i in (4, 5, 6)] == [1, 1, 1]
    # Cancelled once the worker answers, while "block" still holds it (released before,
    # the worker could start them first: started or cancelled, whichever comes first).
    rec.run_until(lambda: all(i in rec.terminal for i in (4, 5, 6)))
    assert all(isinstance(rec.terminal[i].exception, CancelledError) for i in (4, 5, 6))
    open(release, "w").close()
    rec.run_until(lambda: len(rec.terminal) == 8)
    (w,) = ex._workers.values()
    calls = w.region.outbound
    deadline = time.monotonic() + 30  # it releases before it reads its next frame
    while calls.place(PAGE) != 0:  # an empty ring places at 0
        assert time.monotonic() < deadline, f"never released: {list(calls.live)}"
        time.sleep(0.01)


@pytest.mark.timeout(120)
def test_a_full_ring_sends_through_the_pipe_and_never_blocks(make, monkeypatch):
    """Rings of 256 KiB, one-page pipes, everything queued before the first sync(): calls
    of 100 KiB fill the calls' ring (the parent sends the rest through the pipe, never
    waiting for room), results of 100 KiB fill the outcomes' ring (the worker waits for
    the parent to release), and 1 MiB each way never fits (always the pipe). A parent
    that waited for room here would deadlock with a worker waiting for it."""
    monkeypatch.setattr(_region, "RING_SIZE", 256 * KiB)
    monkeypatch.setattr(_region, "WARM", 64 * KiB)
    sent: Counter = Counter()
    received: Counter = Counter()
    via_region = _dispatch._via_region
    apply_frames = _collect.Collector._apply

    def spy_send(w, kind, ident, payload):
        frame = via_region(w, kind, ident, payload)
        if frame[0] == Kind.SHARED:
            sent["ring"] += 1
        elif len(payload) >= _region.THRESHOLD:
            sent["pipe, fits" if len(payload) <= 256 * KiB - PAGE else "pipe, too big"] += 1
        return frame

    def spy_apply(self, frames, now):  # every DONE: a read's, or one out of the ring (a view)
        for _channel, kind, _ident, payload in frames:
            if kind == Kind.DONE:
                where = "ring" if isinstance(payload, memoryview) else "pipe"
                received[f"{where} {len(payload) // KiB} KiB"] += 1
        return apply_frames(self, frames, now)

    monkeypatch.setattr(_dispatch, "_via_region", spy_send)
    monkeypatch.setattr(_collect.Collector, "_apply", spy_apply)
    ex = make(2, prefetch=8, pipe_size=PAGE)
    sizes = {i: (MiB if i % 10 == 0 else 100 * KiB) for i in range(60)}
    for i, size in sizes.items():
        ex.queue(i, tasks.reverse_bytes, distinct(i, size))
    rec = Recorder(ex)
    rec.finish(limit=100)
    assert not rec.duplicates and len(rec.terminal) == len(sizes)
    for i, size in sizes.items():
        assert rec.terminal[i].result == distinct(i, size)[::-1], i
    assert sent["ring"] and sent["pipe, fits"] and sent["pipe, too big"], sent
    assert received["ring 100 KiB"] == 54 and received["pipe 1024 KiB"] == 6, received


# -- nothing outlives the pool ----------------------------------------------------------

PARENT = textwrap.dedent("""
    import json, os, sys, time
    sys.path[:0] = {path!r}
    if {file!r}:
        del os.memfd_create  # the unlinked file, as on macOS
    import tasks
    from pipepool import LocalExecutor

    if __name__ == "__main__":
        ex = LocalExecutor(2, start_method={method!r}, loop_impl={impl!r})
        ex.start()
        ex.queue("survivor", tasks.fork_survivor, {survivor!r})
        queued = 0

        def top_up():  # payloads in flight both ways whenever the kill lands: 8 more
            # than are done, not a thousand 3 MiB arguments built up front (3 GiB)
            global queued
            while queued < ex.stats()["tasks_done"] + 8:
                ex.queue(queued, tasks.reverse_bytes, bytes([queued % 256]) * (3 << 20))
                queued += 1
            ex.get_event_buffer()  # the results, 3 MiB each, dropped as they come

        top_up()
        # Both workers up (the printed pids are those the test waits to see gone: one
        # still starting would be left out) and running payloads.
        while not (
            os.path.exists({survivor!r})
            and ex.stats()["tasks_done"] >= 4
            and len(ex.worker_pids()) == 2
        ):
            ex.sync(timeout=0.01)
            top_up()
        with open("/proc/self/maps") as f:
            inodes = sorted({{int(line.split()[4]) for line in f if "pipepool-" in line}})
        # A fork pool's zygote holds the marks' page too, and must die with us as well.
        zygote = [ex._zygote.process.pid] if ex._zygote is not None else []
        print(json.dumps([ex.worker_pids() + zygote, inodes]), flush=True)
        while True:
            ex.sync(timeout=0.01)
            top_up()
""")


def descendants(root: int) -> set[int]:
    """``root``'s processes: its children, theirs, and so on."""
    table = proc_table.processes()
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, (ppid, _) in table.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return tree - {root}


def holders(pids: set[int], inodes: set[int]) -> dict[int, list[str]]:
    """Those of ``pids`` still alive that map, or hold an fd of, one of ``inodes``."""
    found: dict[int, list[str]] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                maps = [line for line in f if line.split()[4:5] and int(line.split()[4]) in inodes]
            fds = []
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.stat(f"/proc/{pid}/fd/{fd}").st_ino in inodes:
                        fds.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
                except OSError:
                    pass
        except (PermissionError, FileNotFoundError, ProcessLookupError):
            continue
        if maps or fds:
            found[pid] = maps + fds
    return found


@pytest.mark.skipif(not proc_table.HAVE_PROC, reason="reads /proc/<pid>/maps and fd")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("backing", ["memfd", "file"])
def test_nothing_outlives_a_pool_whose_parent_is_killed(impl, start_method, backing, tmp_path):
    """SIGKILL the parent while 3 MiB payloads cross both rings: once its workers are
    gone, no process of its tree (workers, the forkserver, a task's forked child that
    outlives them all; taken before the kill) maps or holds the pool's shared memory
    (start marks and payload regions, by inode); nothing is left in the temporary
    directory or /dev/shm. (Only its tree: a freed inode may be another pool's soon.)"""
    # The parent's TMPDIR, short: the forkserver's AF_UNIX socket goes under it, and a
    # socket path over 107 bytes cannot be bound (pytest-xdist's tmp_path is longer).
    temp = tempfile.mkdtemp(prefix="pp-")
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
    survivor_file = str(tmp_path / "survivor")
    script = PARENT.format(
        path=[here, *sys.path],
        file=backing == "file",
        method=start_method,
        impl=impl,
        survivor=survivor_file,
    )
    env = {**os.environ, "TMPDIR": temp}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    survivor = None
    try:
        workers, inodes = json.loads(proc.stdout.readline())
        with open(survivor_file) as f:
            survivor = int(f.read())
        assert workers and len(inodes) >= 3  # the marks' page and two workers' regions
        tree = descendants(proc.pid) | {survivor}
        assert set(workers) <= tree
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10
        while any(proc_table.alive(p) for p in workers):
            assert time.monotonic() < deadline, "workers outlived their parent by 10 s"
            time.sleep(0.02)
        assert proc_table.alive(survivor)  # the one process that may still hold something
        assert holders(tree, set(inodes)) == {}
        # (multiprocessing's own pymp-* folder, for the forkserver's socket, stays.)
        left = [os.path.join(d, n) for d, dirs, files in os.walk(temp) for n in dirs + files]
        assert not [p for p in left if "pipepool" in p], left
        shm_after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
        assert not {n for n in shm_after - shm_before if "pipepool" in n}
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
        if survivor is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(survivor, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)
