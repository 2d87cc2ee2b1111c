"""LocalExecutor's reap step: noticing that workers exited, and retiring them (dispatch
again what a dead worker never started, fail what it ran with the cause of its death,
count how it ended).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable

from .. import _oom
from .._task import QUEUED, Task, TaskT
from ..errors import InitializerError, WorkerLostError
from ..events import State
from ..worker import note_crash, read_report, signal_group
from ..worker.bootstrap import EXIT_UNGUARDED_MAIN, unguarded_main
from . import _death
from ._collect import Collector
from ._state import _Worker

EXIT_GRACE = 2.0  # s a worker may live on after its result pipe closed before it is killed
REAP_INTERVAL = 0.25  # s between exit checks of every worker: catches a worker whose
# result pipe a grandchild still holds open (no EOF), at a cost of one waitpid per worker


class Reaper(Collector[TaskT]):
    """The reap step, and retiring a worker that exited (also from ``terminate``)."""

    def _reap(self) -> None:
        now = time.monotonic()
        periodic = now >= self._next_reap
        if periodic:
            self._next_reap = now + REAP_INTERVAL
            self._note_oom_counts()
        if not periodic and not any(w.closing for w in self._workers.values()):
            return
        exited: list[tuple[_Worker[TaskT], int]] = []
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

    def _note_oom_counts(self) -> None:
        """The counts of OOM kills now, as the baseline of each worker running no task: a
        SIGKILL under its next task names the OOM killer only if a count rose after
        that task began (``_oom``; not since its start, which may be hours ago)."""
        if not self._oom_counters:
            return
        counts = _oom.snapshot(self._oom_counters)
        for w in self._workers.values():
            if w.current is None:
                w.oom_at = counts

    def _retire(self, w: _Worker[TaskT], exitcode: int | None, *, requeue: bool = True) -> None:
        """Forget an exited worker: dispatch again what it never started, fail what it ran
        (everything it held, with ``requeue=False``: ``terminate``), and count its end."""
        self._read_crash_report(w, exitcode)  # before its fds close
        self._remove_channel(w)  # frames it never fully received: it cannot have started them
        del self._workers[w.wid]
        self._read_final_mark(w)
        died_running = self._settle_tasks(w, exitcode, requeue)
        if died_running or w.killed:  # its task's processes end with it (``_tree``)
            signal_group(w.pid, signal.SIGKILL)
        self._count_exit(w, exitcode, died_running)
        with contextlib.suppress(ValueError):
            w.proc.close()

    def _read_crash_report(self, w: _Worker[TaskT], exitcode: int | None) -> None:
        """A fatal signal, not ours: where in its task did it die? (faulthandler's file)"""
        assert self._loop is not None
        if exitcode is not None and exitcode < 0 and not w.killed and w.wid in self._loop:
            w.crash_report = note_crash(w.pid, read_report(w.crash_fd))

    def _read_final_mark(self, w: _Worker[TaskT]) -> None:
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

    def _settle_tasks(self, w: _Worker[TaskT], exitcode: int | None, requeue: bool) -> bool:
        """Fail the tasks it started, queue the others again at the front, in their
        order (without ``requeue``, ``terminate``: cancel them, as queued ones are: one
        cancellation rule); True if it died running one."""
        lost_error = self._lost_error(w, exitcode)
        unstarted = []
        died_running = False
        for t in w.in_flight.values():
            if t.started:
                error = lost_error(t)
                self._finish(t, State.FAILED, exception=error, pid=w.pid)
                # Lost means the worker died under it; a timeout, kill() or terminate()
                # is a failure of its own kind (docs/design.md, "Invariants", 1).
                if isinstance(error, WorkerLostError):
                    self._stats["lost"] += 1
                died_running = died_running or t.started
            else:
                t.phase = QUEUED
                t.cancelling = t.cancelling or not requeue  # terminate: it never started
                unstarted.append(t)
        w.in_flight.clear()
        self._requeue_or_cancel(unstarted)  # or cancelled, if cancel() asked for them
        return died_running

    def _count_exit(self, w: _Worker[TaskT], exitcode: int | None, died_running: bool) -> None:
        """Count how it ended: a start-up failure; killed on purpose (``kill()``, a
        timeout, ``terminate()``: it has a kill reason); a crash (it died on its own, or
        was killed for misbehaving: a frame that cannot be trusted, a pipe closed while
        it lingered); or a recycle."""
        if w.init_error is not None:
            return  # its initializer failed: counted by _note_init_failure already
        if w.kill_reason is not None:  # terminate() may find it still starting: no failure
            self._stats["killed"] += 1
        elif not w.heard and not w.killed and exitcode != 0:
            self._note_startup_death(w, exitcode)
        elif w.killed or exitcode != 0 or died_running:  # os._exit(0) mid-task is no recycle
            self._stats["crashes"] += 1
        else:
            self._stats["recycles"] += 1

    def _lost_error(
        self, w: _Worker[TaskT], exitcode: int | None
    ) -> Callable[[Task], BaseException]:
        reason = w.kill_reason
        bad_frame = w.close_error

        def error_for(t: Task) -> BaseException:
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
            return self._death_error(w, exitcode, repr(t.key))

        return error_for

    def _death_error(
        self, w: _Worker[TaskT], exitcode: int | None, task: str | None
    ) -> WorkerLostError:
        """A worker that died on its own while running ``task`` (a key's repr), or during
        start-up (None): why, as the kernel and faulthandler tell it (``_death``)."""
        oom_rise = None
        if exitcode is not None and -exitcode == signal.SIGKILL and w.oom_at:
            oom_rise = _oom.rise(w.oom_at, self._oom_counters)
        cause, message = _death.describe(
            w.pid,
            exitcode,
            task,
            crash_report=w.crash_report,
            oom_rise=oom_rise,
            oom_counted=bool(self._oom_counters),
        )
        return WorkerLostError(message, pid=w.pid, exitcode=exitcode, cause=cause)

    def _note_startup_death(self, w: _Worker[TaskT], exitcode: int | None) -> None:
        """A worker died before saying anything: start-up failed. Treated like an
        initializer failure, so a pool that cannot start workers backs off instead of
        respawning in a busy loop; one that re-ran an unguarded main module breaks at
        once, with the one line that says so (``worker.bootstrap``)."""
        if exitcode == EXIT_UNGUARDED_MAIN:
            w.init_error = error = InitializerError(unguarded_main(self.start_method))
            # Not logged: every queued task fails with it, and a script prints it once.
            self._broken = self._broken or error
            return
        self._note_init_failure(w, self._death_error(w, exitcode, None))
