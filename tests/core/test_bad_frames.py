"""Corrupted or oversized frames from a worker (issue 8, hardening): the parent fails
what the frame would have ended, and trusts nothing it says.

Issue 8's hardening table is split by subject (tests/worker/test_faults.py has
the index of its rows); ``pool``, ``pool_on_one_loop`` are conftest's, and
``exactly_one_each``, ``failures``, ``full_size_of`` helpers.py's.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

import pytest

import tasks
from helpers import Recorder, exactly_one_each, failures
from pipepool import TaskPicklingError, TaskTimeoutError, WorkerLostError
from pipepool.errors import FrameError
from pipepool.frames import HEADER, MAGIC, Kind
from pipepool.worker import _region

PAGE = 4096
MiB = 1 << 20


# -- 9. Corrupted or oversized frames from a worker ----------------------------------------

LIMIT = 1 * MiB  # the parent's frame limit in the "oversized" case


@dataclass(frozen=True)
class BadFrame:
    call: tuple  # (fn, *args) of the task that misbehaves
    error: type
    says: str  # in the message or its cause's
    worker_killed: bool = True
    timeout: float | None = None
    parent_limit: int | None = None  # lower the parent's frame limit (white-box)
    exitcode: int = -signal.SIGKILL


def header(kind: int, length: int, ident: int = 0, magic: int = MAGIC, flags: int = 0) -> bytes:
    return HEADER.pack(magic, kind, flags, length, ident)


def shared_ref(kind: int, length: int, offset: int) -> bytes:
    return header(Kind.SHARED, _region.REF.size) + _region.REF.pack(kind, length, offset)


BAD_FRAMES = {
    "bad-magic": BadFrame(
        (tasks.write_to_result_pipe, b"\x00" * 16), WorkerLostError, "bad frame magic"
    ),
    "bad-flags": BadFrame(
        (tasks.write_to_result_pipe, header(Kind.DONE, 0, flags=1)),
        WorkerLostError,
        "bad frame flags",
    ),
    "unknown-kind": BadFrame(
        (tasks.write_to_result_pipe, header(99, 0)), WorkerLostError, "unexpected frame kind 99"
    ),
    # A bad frame with a well-formed result right behind it, in one write: the result
    # must not count, the stream is not trusted past the bad frame.
    "unknown-kind-then-result": BadFrame(
        (tasks.write_to_result_pipe, header(99, 0), "return", "forged"),
        WorkerLostError,
        "unexpected frame kind 99",
    ),
    # REVOKED answers a REVOKE; unasked, it would make the parent hand out tasks this
    # worker still runs.
    "unasked-revoked": BadFrame(
        (tasks.write_to_result_pipe, header(Kind.REVOKED, 0)),
        WorkerLostError,
        "unexpected frame kind 7",
    ),
    "task-kind-from-worker": BadFrame(
        (tasks.write_to_result_pipe, header(Kind.TASK, 0)),
        WorkerLostError,
        "unexpected frame kind 1",
    ),
    "truncated-then-exit": BadFrame(
        (tasks.write_to_result_pipe, header(Kind.DONE, MiB) + b"x" * 100, "exit"),
        WorkerLostError,
        "EOF in the middle of a frame",
        exitcode=0,
    ),
    # A reference to the shared ring (worker/_region.py) that cannot be trusted: outside
    # the ring, misaligned, nested, or not a reference at all.
    "shared-outside-the-ring": BadFrame(
        (tasks.write_to_result_pipe, shared_ref(Kind.DONE, 100, 1 << 40)),
        WorkerLostError,
        "not a page-aligned extent",
    ),
    "shared-misaligned": BadFrame(
        (tasks.write_to_result_pipe, shared_ref(Kind.DONE, 100, 8)),
        WorkerLostError,
        "not a page-aligned extent",
    ),
    "shared-in-shared": BadFrame(
        (tasks.write_to_result_pipe, shared_ref(Kind.SHARED, 100, 0)),
        WorkerLostError,
        "names another SHARED frame",
    ),
    "shared-short": BadFrame(
        (tasks.write_to_result_pipe, header(Kind.SHARED, 3) + b"abc"),
        WorkerLostError,
        "a SHARED frame of 3 bytes",
    ),
    # Past the parent's limit: refused on the header alone, while the worker lives on.
    "oversized": BadFrame(
        (tasks.write_to_result_pipe, header(Kind.DONE, LIMIT + 1), "sleep"),
        WorkerLostError,
        "exceeds the limit",
        parent_limit=LIMIT,
    ),
    # A length within limits that never arrives while the worker lives: the parent
    # cannot tell it from a slow big result; the task's timeout is what bounds it.
    "lying-length": BadFrame(
        (tasks.write_to_result_pipe, header(Kind.DONE, 0xFFFF_FFFF), "return"),
        TaskTimeoutError,
        "timed out",
        timeout=1.0,
    ),
    # A result the header cannot describe is refused by the worker itself.
    "result-past-header-limit": BadFrame(
        (tasks.return_above_frame_limit, 1000, 5000),
        TaskPicklingError,
        "which cannot be sent back to the parent: its pickle is too big for a frame",
        worker_killed=False,
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(BAD_FRAMES))
def test_bad_frame(pool, case):
    """The worker is killed (or, for a result it refuses to send, lives on), its task
    fails with an error naming the worker, the task and what was wrong, and the pool
    goes on with the next tasks."""
    bad = BAD_FRAMES[case]
    ex = pool(1, "fork", pipe_size=PAGE)
    if bad.parent_limit is not None:
        ex._loop.max_payload = bad.parent_limit
    fn, *args = bad.call
    ex.queue_call("bad", fn, tuple(args), timeout=bad.timeout)
    for i in range(5):
        ex.queue(i, tasks.pid_of_worker)
    rec = Recorder(ex)
    rec.finish(limit=50)
    exactly_one_each(rec, ["bad", *range(5)])
    assert set(failures(rec)) == {"bad"}
    event = rec.terminal["bad"]
    error = event.exception
    assert type(error) is bad.error, repr(error)
    text = f"{error} {error.__cause__}"
    assert bad.says in text, text
    after = {rec.terminal[i].result for i in range(5)}
    stats = ex.stats()
    if bad.worker_killed:
        assert len(after) == 1 and event.pid not in after  # a replacement took over
        assert stats["workers_started"] == 2
        # A timeout is a kill on purpose; a frame it cannot trust, the worker's fault.
        ended = "workers_killed" if bad.error is TaskTimeoutError else "worker_crashes"
        assert stats[ended] == 1 and stats["worker_crashes"] + stats["workers_killed"] == 1
        if bad.error is WorkerLostError:
            assert error.pid == event.pid and error.exitcode == bad.exitcode
            assert "cannot be trusted" in str(error) and "'bad'" in str(error)
            assert isinstance(error.__cause__, FrameError)
    else:
        assert after == {event.pid} and stats["workers_started"] == 1


def test_argument_past_header_limit(pool, monkeypatch):
    """The parent's side of the same rule: a call whose pickle the header cannot describe
    fails before any byte is sent (the limit is lowered: 4 GiB does not fit in a test)."""
    from pipepool.executor import _dispatch

    monkeypatch.setattr(_dispatch, "MAX_PAYLOAD", 1000)
    ex = pool(1, "fork")
    ex.queue("bad", tasks.echo, b"a" * 5000)
    ex.queue("fine", tasks.echo, b"a" * 10)
    rec = Recorder(ex)
    rec.finish()
    exactly_one_each(rec, ["bad", "fine"])
    error = rec.terminal["bad"].exception
    assert isinstance(error, TaskPicklingError) and error.part == "arguments"
    assert "above the frame limit of 1000" in str(error)
    assert rec.terminal["fine"].result == b"a" * 10
