"""The worker process: read a frame, say "started", run it, send the outcome.

A worker holds exactly four pipe ends: the read end of its activity pipe, the write end
of its result pipe, the read end of its control pipe, and the read end of its pool's
lifeline. It blocks freely (only the parent must never block). Its invariants:

* "started" reaches the parent before the task runs, so a worker that dies mid-task is
  known to have started it (the task fails as lost, not re-run), and one that dies
  before is known not to have (the task is dispatched again).
* The outcome of a task and the "started" of the next one share one write when the next
  task is already buffered: half the wake-ups on the parent's side.
* Nothing the task does (raise, BaseException, sys.exit, return something unpicklable)
  breaks the loop; only the process dying does, and the parent sees that as EOF.
* The parent's death ends the worker even while a task runs: a thread blocks on the
  lifeline pipe, whose only writer is the parent, and exits the process at its EOF.
* Tasks sent ahead can be taken back while a long task runs. The same thread reads
  REVOKE from the control pipe and answers REVOKED with the sequence number of the last
  task this worker decided to start; every later task up to the REVOKE's number is then
  skipped unrun. Deciding to start and answering a REVOKE hold one lock, so for each
  task exactly one of the two happens, and the parent can hand the skipped ones to
  other workers at once instead of waiting for the long task to end.
"""

from __future__ import annotations

import contextlib
import copyreg
import io
import os
import pickle
import select
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from . import _impl, _signals
from .errors import FrameError, TaskPicklingError, TaskUnpicklingError
from .frames import PICKLE_PROTOCOL, Kind, encode_header, split_frames

EXIT_PARENT_DIED = 70  # the lifeline closed: the parent is gone
EXIT_INIT_FAILED = 71  # the initializer raised; the parent got an INIT_FAILED frame
EXIT_BAD_FRAME = 72  # the activity pipe carried a frame that cannot be trusted

_retiring = False  # set by retire_after_task(): leave the loop after this task's outcome


def retire_after_task() -> None:
    """Called from inside a task: this worker exits cleanly once the task's outcome is
    sent, as if it had reached ``max_tasks_per_child`` (the parent counts a recycle and
    starts a replacement; anything already sent to it and not started runs elsewhere).
    Integrations use it to recycle a worker whose memory grew past a limit."""
    global _retiring
    _retiring = True


class ChildFd:
    """An fd handed to a worker: the same number under fork, duplicated into the child
    under spawn and forkserver (``multiprocessing.reduction.DupFd`` does the passing)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self):
        from multiprocessing import reduction

        return (_rebuild_child_fd, (reduction.DupFd(self.fd),))


def _rebuild_child_fd(dup: Any) -> ChildFd:
    return ChildFd(dup.detach())


def _write_all(fd: int, buffers: list[bytes]) -> None:
    """Blocking gather write that survives partial writes (a signal can cut one short)."""
    views = [memoryview(b) for b in buffers if b]
    while views:
        written = os.writev(fd, views[:64])
        while written:
            if written >= len(views[0]):
                written -= len(views.pop(0))
            else:
                views[0] = views[0][written:]
                written = 0


class _Gate:
    """What the task loop and the watcher thread share: the result pipe's writes (whole
    frames only, never interleaved) and the start-or-skip decision of each task."""

    __slots__ = ("current", "lock", "result_fd", "revoked_upto")

    def __init__(self, result_fd: int) -> None:
        self.lock = threading.Lock()
        self.result_fd = result_fd
        self.current = 0  # sequence number of the last task decided to start
        self.revoked_upto = 0  # tasks numbered above current and up to this are skipped

    def write(self, buffers: list[bytes]) -> None:
        with self.lock:
            _write_all(self.result_fd, buffers)

    def start(self, seq: int, buffers: list[bytes]) -> bool:
        """Decide task ``seq``: False if it was revoked, else write ``buffers`` (its
        STARTED frame) and return True; either way atomically with ``revoke``."""
        with self.lock:
            if seq <= self.revoked_upto:
                return False
            self.current = seq
            _write_all(self.result_fd, buffers)
            return True

    def revoke(self, upto: int) -> None:
        """Skip every task not yet started up to ``upto``; say which ran last."""
        with self.lock:
            self.revoked_upto = max(self.revoked_upto, upto)
            _write_all(self.result_fd, [encode_header(Kind.REVOKED, self.current, 0)])


def _watch(lifeline_fd: int, control_fd: int, gate: _Gate) -> None:
    """Exit at the lifeline's EOF; answer REVOKE frames from the control pipe."""
    # A pipe's EOF, not prctl(PR_SET_PDEATHSIG): that is Linux-only and fires when the
    # parent *thread* that started us exits; the lifeline works the same on macOS.
    poller = select.poll()
    poller.register(lifeline_fd, select.POLLIN)
    poller.register(control_fd, select.POLLIN)
    control = bytearray()
    try:
        while True:
            for fd, _ in poller.poll():
                if fd == lifeline_fd:
                    if not os.read(lifeline_fd, 1):
                        os._exit(EXIT_PARENT_DIED)
                    continue
                data = os.read(fd, 4096)
                if not data:  # the parent stopped us: the activity pipe's EOF ends the loop
                    poller.unregister(fd)
                    continue
                control += data
                frames: list[tuple[int, int, bytes]] = []
                split_frames(control, frames, 0)
                for kind, ident, _payload in frames:
                    if kind != Kind.REVOKE:
                        os._exit(EXIT_BAD_FRAME)
                    gate.revoke(ident)
    except FrameError:
        os._exit(EXIT_BAD_FRAME)
    except OSError:
        pass
    os._exit(EXIT_PARENT_DIED)


def _failure_frame(kind: int, ident: int, exc: BaseException) -> list[bytes]:
    """Header and payload carrying ``pickle((traceback text, pickle(exception)))``."""
    # The traceback travels outside the exception's own pickle, so the parent still has
    # it when the exception itself cannot be unpickled there.
    tb = "".join(traceback.format_exception(exc))
    try:
        exc_bytes = _dumps_exception(exc)
    except BaseException as pickling_exc:  # whatever the failure, the answer is the substitute
        substitute = TaskPicklingError(
            f"the task raised {type(exc).__qualname__}: {_safe_repr(exc)}, "
            f"which could not be pickled ({type(pickling_exc).__name__}: {pickling_exc})",
            part="exception",
        )
        exc_bytes = pickle.dumps(substitute, PICKLE_PROTOCOL)
    payload = pickle.dumps((tb, exc_bytes), PICKLE_PROTOCOL)
    return [encode_header(kind, ident, len(payload)), payload]


def _dumps_exception(exc: BaseException) -> bytes:
    """Pickle an exception the standard way, whatever reducers the process registered.

    Importing Dask's distributed installs tblib's reducer for every exception class in
    ``copyreg``; a forked worker inherits it, and exceptions then lose attributes such
    as ``SystemExit.code`` on the way back. Reducers from tblib are left out here.
    """
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, PICKLE_PROTOCOL)
    if any(_is_tblib(reducer) for reducer in copyreg.dispatch_table.values()):
        pickler.dispatch_table = {
            cls: reducer
            for cls, reducer in copyreg.dispatch_table.items()
            if not _is_tblib(reducer)
        }
    pickler.dump(exc)
    return buffer.getvalue()


def _is_tblib(reducer: object) -> bool:
    reducer = getattr(reducer, "func", reducer)  # tblib may register functools.partials
    return (getattr(reducer, "__module__", None) or "").startswith("tblib")


def _safe_repr(obj: object) -> str:
    try:
        return repr(obj)[:500]
    except BaseException:
        return f"<{type(obj).__qualname__} with a failing repr>"


def _outcome(ident: int, payload: bytes) -> list[bytes]:
    """Unpickle and run one task; return the frame that reports how it ended."""
    try:
        fn, args, kwargs = pickle.loads(payload)
    except BaseException as exc:  # any unpickling failure is the task's, not ours
        error = TaskUnpicklingError(
            f"the worker could not unpickle the task ({type(exc).__name__}: {exc}); "
            "with spawn or forkserver the function must be importable by module name",
            part="task",
        )
        error.__cause__ = exc
        return _failure_frame(Kind.RAISED, ident, error)
    del payload
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # SystemExit and friends are outcomes too
        return _failure_frame(Kind.RAISED, ident, exc)
    finally:
        del fn, args, kwargs
    try:
        data = pickle.dumps(result, PICKLE_PROTOCOL)
        header = encode_header(Kind.DONE, ident, len(data))
    except BaseException as exc:
        error = TaskPicklingError(
            f"the task returned {type(result).__qualname__}, which could not be sent back "
            f"({type(exc).__name__}: {exc})",
            part="result",
        )
        return _failure_frame(Kind.RAISED, ident, error)
    return [header, data]


def serve(
    activity_fd: int,
    result_fd: int,
    max_tasks: int | None = None,
    impl: str | None = None,
    gate: _Gate | None = None,
) -> None:
    """Run tasks from ``activity_fd`` until EOF (or ``max_tasks``), outcomes to ``result_fd``.

    ``impl`` picks the frame reader ("python" or "cython"), the parent's loop by default;
    ``gate`` is shared with the watcher thread that answers REVOKE frames.
    """
    reader = _impl.load(impl)[1].FrameReader(activity_fd)
    gate = gate or _Gate(result_fd)
    pending: list[bytes] = []
    served = 0
    seq = 0  # tasks read so far: the numbering REVOKE and REVOKED use
    while (max_tasks is None or served < max_tasks) and not _retiring:
        if pending and not reader.buffered():
            gate.write(pending)  # nothing more to coalesce with: send it now
            pending.clear()
        try:
            frame = reader.read()
        except FrameError:
            gate.write(pending)
            os._exit(EXIT_BAD_FRAME)
        if frame is None:
            break
        kind, ident, payload = frame
        if kind != Kind.TASK:
            gate.write(pending)
            os._exit(EXIT_BAD_FRAME)
        seq += 1
        pending.append(encode_header(Kind.STARTED, ident, 0))
        # "started" must be out before the task can crash us
        if not gate.start(seq, pending):
            pending.pop()  # revoked: the parent has given it to another worker
            del frame, payload
            continue
        pending.clear()
        pending += _outcome(ident, payload)
        del frame, payload
        served += 1
    gate.write(pending)


def main(
    activity: ChildFd,
    result: ChildFd,
    lifeline: ChildFd,
    control: ChildFd,
    close_fds: Sequence[int],
    initializer: Callable[..., object] | None,
    initargs: tuple,
    max_tasks: int | None,
    impl: str | None = None,
) -> None:
    """Entry point of a worker process (the ``multiprocessing.Process`` target)."""
    # A parent thread may have had every signal blocked, or its handlers deferred, while
    # it started us; undo both, and leave Ctrl-C to the parent, which decides what
    # happens to running work.
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    _signals.reset_in_child()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked worker inherits the parent's Python SIGTERM handler: it would run the
    # parent's clean-up code here and survive terminate()'s SIGTERM until the SIGKILL.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Under fork we inherited the parent's ends of every other pipe: a worker holding
    # another worker's activity write end would hide the parent's death from it.
    for fd in close_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    gate = _Gate(result.fd)
    threading.Thread(
        target=_watch,
        args=(lifeline.fd, control.fd, gate),
        name="pipepool-watcher",
        daemon=True,
    ).start()
    if initializer is not None:
        try:
            initializer(*initargs)
        except BaseException as exc:
            gate.write(_failure_frame(Kind.INIT_FAILED, 0, exc))
            sys.stderr.flush()
            os._exit(EXIT_INIT_FAILED)
    serve(activity.fd, result.fd, max_tasks, impl, gate)
