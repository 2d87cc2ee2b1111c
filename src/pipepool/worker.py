"""The worker process: read a frame, say "started", run it, send the outcome.

A worker holds exactly three pipe ends: the read end of its activity pipe, the write end
of its result pipe, and the read end of its pool's lifeline. It blocks freely (only the
parent must never block). Its invariants:

* "started" reaches the parent before the task runs, so a worker that dies mid-task is
  known to have started it (the task fails as lost, not re-run), and one that dies
  before is known not to have (the task is dispatched again).
* The outcome of a task and the "started" of the next one share one write when the next
  task is already buffered: half the wake-ups on the parent's side.
* Nothing the task does (raise, BaseException, sys.exit, return something unpicklable)
  breaks the loop; only the process dying does, and the parent sees that as EOF.
* The parent's death ends the worker even while a task runs: a thread blocks on the
  lifeline pipe, whose only writer is the parent, and exits the process at its EOF.
"""

from __future__ import annotations

import contextlib
import copyreg
import io
import os
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from . import _impl, _signals
from .errors import FrameError, TaskPicklingError, TaskUnpicklingError
from .frames import PICKLE_PROTOCOL, Kind, encode_header

EXIT_PARENT_DIED = 70  # the lifeline closed: the parent is gone
EXIT_INIT_FAILED = 71  # the initializer raised; the parent got an INIT_FAILED frame
EXIT_BAD_FRAME = 72  # the activity pipe carried a frame that cannot be trusted


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


def _watch_lifeline(fd: int) -> None:
    # A pipe's EOF, not prctl(PR_SET_PDEATHSIG): that is Linux-only and fires when the
    # parent *thread* that started us exits; the lifeline works the same on macOS.
    try:
        while os.read(fd, 1):
            pass
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
        pickler.dispatch_table = {cls: reducer for cls, reducer in copyreg.dispatch_table.items()
                                  if not _is_tblib(reducer)}
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
    activity_fd: int, result_fd: int, max_tasks: int | None = None, impl: str | None = None
) -> None:
    """Run tasks from ``activity_fd`` until EOF (or ``max_tasks``), outcomes to ``result_fd``.

    ``impl`` picks the frame reader ("python" or "cython"), the parent's loop by default.
    """
    reader = _impl.load(impl)[1].FrameReader(activity_fd)
    pending: list[bytes] = []
    served = 0
    while max_tasks is None or served < max_tasks:
        if pending and not reader.buffered():
            _write_all(result_fd, pending)  # nothing more to coalesce with: send it now
            pending.clear()
        try:
            frame = reader.read()
        except FrameError:
            _write_all(result_fd, pending)
            os._exit(EXIT_BAD_FRAME)
        if frame is None:
            break
        kind, ident, payload = frame
        if kind != Kind.TASK:
            _write_all(result_fd, pending)
            os._exit(EXIT_BAD_FRAME)
        pending.append(encode_header(Kind.STARTED, ident, 0))
        _write_all(result_fd, pending)  # "started" must be out before the task can crash us
        pending.clear()
        pending += _outcome(ident, payload)
        del frame, payload
        served += 1
    _write_all(result_fd, pending)


def main(
    activity: ChildFd,
    result: ChildFd,
    lifeline: ChildFd,
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
    threading.Thread(
        target=_watch_lifeline, args=(lifeline.fd,), name="pipepool-lifeline", daemon=True
    ).start()
    if initializer is not None:
        try:
            initializer(*initargs)
        except BaseException as exc:
            _write_all(result.fd, _failure_frame(Kind.INIT_FAILED, 0, exc))
            sys.stderr.flush()
            os._exit(EXIT_INIT_FAILED)
    serve(activity.fd, result.fd, max_tasks, impl)
