"""LocalExecutor's reap step: noticing that workers exited, and retiring them (dispatch
again what a dead worker never started, fail what it ran, count how it ended).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable

from .._task import QUEUED
from .._task import Task as _Task
from ..errors import WorkerLostError, describe_exit
from ..events import State
from ..worker import _fault, _tree
from ._collect import Collector
from ._state import _Worker

EXIT_GRACE = 2.0  # s a worker may live on after its result pipe closed before it is killed
REAP_INTERVAL = 0.25  # s between exit checks of every worker: catches a worker whose
# result pipe a grandchild still holds open (no EOF), at a cost of one waitpid per worker


class Reaper(Collector):
    """The reap step, and retiring a worker that exited (also from ``terminate``)."""

    def _reap(self) -> None:
        now = time.monotonic()
        periodic = now >= self._next_reap
        if periodic:
            self._next_reap = now + REAP_INTERVAL
        if not periodic and not any(w.closing for w in self._workers.values()):
            return
        exited: list[tuple[_Worker, int]] = []
        for w in self._workers.values():
            if not (w.closing or periodic):
                continue
            code = w.proc.exitcode
            if code is None:
                if w.closing and not w.killed and now - w.closed_at > EXIT_GRACE:
                    self._kill_worker(w, None)  # closed its pipe but lingers
                continue
            exited.append((w, code))
        if any(not w.closing for w, _ in exited):
            # It exited without its pipe closing (a grandchild holds the write end):
            # what it wrote before exiting is in the pipe now; read it before retiring.
            self._collect()
        for w, code in exited:
            self._retire(w, code)

    def _retire(self, w: _Worker, exitcode: int | None, *, requeue: bool = True) -> None:
        """Forget an exited worker: dispatch again what it never started, fail what it ran
        (everything it held, with ``requeue=False``: ``terminate``), and count its end."""
        self._read_crash_report(w, exitcode)  # before its fds close
        self._remove_channel(w)  # frames it never fully received: it cannot have started them
        del self._workers[w.wid]
        self._read_final_mark(w)
        died_running = self._settle_tasks(w, exitcode, requeue)
        if died_running or w.killed:  # its task's processes end with it (``_tree``)
            _tree.signal_group(w.pid, signal.SIGKILL)
        self._count_exit(w, exitcode, died_running)
        with contextlib.suppress(ValueError):
            w.proc.close()

    def _read_crash_report(self, w: _Worker, exitcode: int | None) -> None:
        """A fatal signal, not ours: where in its task did it die? (faulthandler's file)"""
        if exitcode is not None and exitcode < 0 and not w.killed and w.wid in self._loop:
            w.crash_report = _fault.note_crash(w.pid, _fault.read_report(w.crash_fd))

    def _read_final_mark(self, w: _Worker) -> None:
        """Which of its tasks began, by its final start mark; give its slot back.

        It is dead and its pipe drained: each task's outcome was in the pipe before the
        next mark was stored, so at most one task up to the mark began without an
        outcome: the one it was running.
        """
        assert self._marks is not None
        final_mark = self._marks.read(w.slot)
        self._mark_started(w, final_mark, time.monotonic(), publish=False)
        self._marks.release(w.slot)
        w.heard = w.heard or final_mark > 0  # it began a task: it got through start-up

    def _settle_tasks(self, w: _Worker, exitcode: int | None, requeue: bool) -> bool:
        """Fail the tasks it started (all of them unless ``requeue``), queue the others
        again at the front, in their order; True if it died running one."""
        lost_error = self._lost_error(w, exitcode)
        unstarted = []
        died_running = False
        for t in w.in_flight.values():
            if t.started or not requeue:
                error = lost_error(t)
                self._finish(t, State.FAILED, exception=error, pid=w.pid)
                # Lost means the worker died under it; a timeout, kill() or terminate()
                # is a failure of its own kind (docs/design.md, "Invariants", 1).
                if isinstance(error, WorkerLostError):
                    self._stats["lost"] += 1
                died_running = died_running or t.started
            else:
                t.phase = QUEUED
                unstarted.append(t)
        w.in_flight.clear()
        self._requeue_or_cancel(unstarted)  # or cancelled, if cancel() asked for them
        return died_running

    def _count_exit(self, w: _Worker, exitcode: int | None, died_running: bool) -> None:
        """Count how it ended: a start-up failure, a crash or a recycle."""
        if w.init_error is not None:
            return  # its initializer failed: counted by _note_init_failure already
        if not w.heard and not w.killed and exitcode != 0:
            # Died before saying anything: start-up failed (a spawn child that cannot
            # import __main__, say). Treated like an initializer failure, so a pool that
            # cannot start workers backs off instead of respawning in a busy loop.
            self._note_init_failure(
                w,
                WorkerLostError(
                    f"worker pid {w.pid} {describe_exit(exitcode)} during start-up, before "
                    "running any task (with spawn or forkserver, is the main module guarded "
                    f"by if __name__ == '__main__'?){w.crash_report}",
                    pid=w.pid,
                    exitcode=exitcode,
                ),
            )
        elif w.killed or exitcode != 0 or died_running:  # os._exit(0) mid-task is no recycle
            self._stats["crashes"] += 1
        else:
            self._stats["recycles"] += 1

    def _lost_error(self, w: _Worker, exitcode: int | None) -> Callable[[_Task], BaseException]:
        reason = w.kill_reason
        bad_frame = w.close_error

        def error_for(t: _Task) -> BaseException:
            if reason is not None:
                return reason
            if bad_frame is not None:
                err = WorkerLostError(
                    f"worker pid {w.pid} sent a frame that cannot be trusted ({bad_frame}) "
                    f"and was killed while running task {t.key!r}",
                    pid=w.pid,
                    exitcode=exitcode,
                )
                err.__cause__ = bad_frame
                return err
            return WorkerLostError(
                f"worker pid {w.pid} {describe_exit(exitcode)} while running task {t.key!r}; "
                "the task may have crashed the interpreter (segfault, os._exit) or been "
                f"killed from outside (OOM killer, kill -9){w.crash_report}",
                pid=w.pid,
                exitcode=exitcode,
            )

        return error_for
