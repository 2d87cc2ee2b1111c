"""LocalExecutor's worker lifecycle: starting workers, killing them, noticing that they
exited, and retiring them (dispatch again what a dead worker never started, fail what it
ran), with the initializer's back-off and the shutdown of the pool.

``WorkerLifecycle`` is a mixin of ``LocalExecutor`` and nothing else, holding no state
of its own: retiring a worker moves its tasks between the executor's queue, its workers'
``in_flight`` and its events, the bookkeeping that must have one owner for each task to
be in exactly one place. A separate object would need the executor handed back to it
for every step; these methods are the executor's, kept in the file that says what they
are about.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _oom, _signals
from .._api import SchedulerAPI
from .._task import QUEUED as _QUEUED
from ..errors import InitializerError, WorkerLostError
from ..events import State
from ..worker import ChildFd, _fault, _tree
from ..worker import main as worker_main
from ..worker._bootstrap import EXIT_UNGUARDED_MAIN, WORKER_NAME, unguarded_main
from ..worker._marks import MarkTable
from . import _death

if TYPE_CHECKING:
    from .._task import Task as _Task

log = logging.getLogger("pipepool")

EXIT_GRACE = 2.0  # s a worker may live on after its result pipe closed before it is killed
STOP_GRACE = 10.0  # s end() waits for idle workers to exit before terminating them
TERM_GRACE = 1.0  # s between SIGTERM and SIGKILL in terminate()
REAP_INTERVAL = 0.25  # s between exit checks of every worker: catches a worker whose
# result pipe a grandchild still holds open (no EOF), at a cost of one waitpid per worker
INIT_RETRIES = 3  # consecutive initializer failures before queued work fails
INIT_BACKOFF = 0.1  # s before the first restart after an initializer failure; doubles

# Every parent-side pipepool fd open in this process. A forked worker closes all of them
# but its own, so that no worker holds another's pipe ends: otherwise one worker's EOF or
# the parent's death would stay hidden while the other lives.
_PARENT_FDS: set[int] = set()


class _Worker:
    __slots__ = (
        "close_error",
        "closed_at",
        "closing",
        "control_fd",
        "crash_fd",
        "crash_report",
        "current",
        "fds",
        "heard",
        "in_flight",
        "init_error",
        "init_round",
        "kill_reason",
        "killed",
        "mark",
        "oom_at",
        "pid",
        "proc",
        "revoking",
        "sent",
        "seq",
        "slot",
        "wid",
    )

    def __init__(
        self,
        wid: int,
        proc: multiprocessing.process.BaseProcess,
        fds: tuple[int, int],
        control_fd: int,
        slot: int,
        init_round: int,
    ) -> None:
        self.wid = wid
        self.proc = proc
        self.pid: int | None = proc.pid
        self.fds = fds  # the parent's ends, owned by the loop from add() to remove()
        self.control_fd = control_fd  # write end of its control pipe (REVOKE), non-blocking
        self.slot = slot  # its start-mark slot in the pool's MarkTable
        self.mark = 0  # the last start mark read from it
        self.init_round = init_round  # initializer failures counted when it started
        self.in_flight: dict[int, _Task] = {}  # tid -> task, in dispatch order
        self.sent = 0  # tasks sent and not taken back, for max_tasks_per_child
        self.seq = 0  # tasks ever sent: the numbering REVOKE and REVOKED use
        self.revoking = 0  # while a REVOKE is out: the last sequence number it covers
        self.closing = False  # its result pipe closed (EOF or a bad frame)
        self.closed_at = 0.0
        self.close_error: BaseException | None = None
        self.init_error: BaseException | None = None
        self.kill_reason: BaseException | None = None  # why we killed it, for its task
        self.killed = False
        self.heard = False  # any frame received: it got through start-up
        self.current: _Task | None = None  # the task its start mark names, until its outcome
        self.crash_fd = -1  # its faulthandler's file (``_fault``), read after its death
        self.crash_report = ""
        self.oom_at: _oom.Snapshot = ()  # the counts of OOM kills before its current task


# For the type checker only: the executor's own methods these steps call (``_finish``,
# ``_publish``) and its shared state; at run time a plain mixin.
_Executor = SchedulerAPI if TYPE_CHECKING else object


class WorkerLifecycle(_Executor):  # type: ignore[misc,valid-type]
    """Mixin of ``LocalExecutor``: the steps that start, kill, reap and retire workers."""

    # The executor's state these steps read and write (set in LocalExecutor.__init__).
    parallelism: int
    pipe_size: int | None
    max_tasks_per_child: int | None
    initializer: Callable[..., object] | None
    initargs: tuple
    implementation: str
    start_method: str
    _context: Any
    _loop: Any
    _marks: MarkTable | None
    _lifeline: tuple[int, int] | None
    _queue: deque[_Task]
    _workers: dict[int, _Worker]
    _wids: Any
    _stats: dict[str, int]
    _init_failures: int
    _init_retry_at: float
    _broken: InitializerError | None
    _next_reap: float
    _state: str
    _oom_counters: tuple[_oom.Counter, ...]

    if TYPE_CHECKING:  # the executor's, used here

        def _collect(self) -> None: ...

        def _mark_started(self, w: _Worker, mark: int, now: float, *, publish: bool) -> None: ...

    def _reap(self) -> None:
        now = time.monotonic()
        periodic = now >= self._next_reap
        if periodic:
            self._next_reap = now + REAP_INTERVAL
            self._note_oom_counts()
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

    def _start_workers(self) -> None:
        if self._broken is not None:
            self._fail_queued_broken()
            return
        alive = sum(1 for w in self._workers.values() if not w.closing)
        outstanding = len(self._queue) + sum(len(w.in_flight) for w in self._workers.values())
        wanted = min(self.parallelism, outstanding) - alive
        if wanted <= 0 or time.monotonic() < self._init_retry_at:
            return
        if self._init_failures:
            # The initializer failed lately: probe with one worker at a time, not a
            # burst of them that would all fail together.
            if alive:
                return
            wanted = 1
        for _ in range(wanted):
            self._start_worker()

    def _start_worker(self) -> None:
        assert self._lifeline is not None and self._marks is not None
        slot = self._marks.claim()
        if slot is None:  # every slot held by a worker not yet reaped: start it next round
            return
        activity_r, activity_w = os.pipe()
        result_r, result_w = os.pipe()
        control_r, control_w = os.pipe()
        os.set_blocking(control_w, False)
        crash_fd = _fault.open_report_file()  # shared with the worker, kept here
        mine = (activity_r, result_w, control_r)
        _PARENT_FDS.update(
            (activity_r, activity_w, result_r, result_w, control_r, control_w, crash_fd)
        )
        if self.pipe_size:
            _set_pipe_size(activity_w, self.pipe_size)
            _set_pipe_size(result_w, self.pipe_size)
        lifeline_r = self._lifeline[0]
        close_fds = (
            sorted(_PARENT_FDS.difference((*mine, lifeline_r, self._marks.fd, crash_fd)))
            if self.start_method == "fork"
            else []
        )
        wid = next(self._wids)
        # typeshed declares Process on each concrete context, not on BaseContext
        proc = self._context.Process(  # type: ignore[attr-defined]
            target=worker_main,
            args=(
                ChildFd(activity_r),
                ChildFd(result_w),
                ChildFd(lifeline_r),
                ChildFd(control_r),
                ChildFd(self._marks.fd),
                slot,
                close_fds,
                self.initializer,
                self.initargs,
                self.max_tasks_per_child,
                self.implementation,
                ChildFd(crash_fd),
            ),
            name=f"{WORKER_NAME}-{wid}",
            daemon=True,
        )
        try:
            proc.start()
        except BaseException:
            for fd in (activity_w, result_r, control_w, crash_fd):
                _PARENT_FDS.discard(fd)
                os.close(fd)
            self._marks.release(slot)
            raise
        finally:
            for fd in mine:  # the child has its copies now (or never will)
                _PARENT_FDS.discard(fd)
                os.close(fd)
        w = _Worker(wid, proc, (activity_w, result_r), control_w, slot, self._init_failures)
        w.crash_fd = crash_fd
        w.oom_at = _oom.snapshot(self._oom_counters)
        self._loop.add(wid, activity_w, result_r)
        self._workers[wid] = w
        self._stats["started_workers"] += 1

    def _kill_worker(self, w: _Worker, reason: BaseException | None) -> None:
        if reason is not None and w.kill_reason is None:
            w.kill_reason = reason
        if not w.killed:
            w.killed = True
            _signal_process(w.proc, "kill")

    def _retire(self, w: _Worker, exitcode: int | None, *, requeue: bool = True) -> None:
        """Forget an exited worker: dispatch again what it never started, fail what it ran."""
        if exitcode is not None and exitcode < 0 and not w.killed and w.wid in self._loop:
            # A fatal signal: where in its task? (Read before its fds close below.)
            w.crash_report = _fault.note_crash(w.pid, _fault.read_report(w.crash_fd))
        self._remove_channel(w)  # frames it never fully received: it cannot have started them
        del self._workers[w.wid]
        # It is dead and its pipe drained: its final start mark says which of the tasks
        # it holds began. Each earlier one's outcome was in the pipe before the next
        # mark was stored, so at most one began without an outcome: the one it ran.
        assert self._marks is not None
        final_mark = self._marks.read(w.slot)
        self._mark_started(w, final_mark, time.monotonic(), publish=False)
        self._marks.release(w.slot)
        w.heard = w.heard or final_mark > 0  # it began a task: it got through start-up
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
                t.phase = _QUEUED
                unstarted.append(t)
        w.in_flight.clear()
        self._queue.extendleft(reversed(unstarted))  # back to the front, in their order
        if died_running or w.killed:  # its task's processes end with it (``_tree``)
            _tree.signal_group(w.pid, signal.SIGKILL)
        if w.init_error is None and not w.heard and not w.killed and exitcode != 0:
            self._note_startup_death(w, exitcode)
        if w.init_error is not None:
            pass  # counted by _note_init_failure, not a crash of a serving worker
        elif w.killed or exitcode != 0 or died_running:  # os._exit(0) mid-task is no recycle
            self._stats["crashes"] += 1
        else:
            self._stats["recycles"] += 1
        with contextlib.suppress(ValueError):
            w.proc.close()

    def _remove_channel(self, w: _Worker) -> list[tuple[int, int, bytes]]:
        """Close a worker's parent ends (once) and drop them from the fork registry."""
        if w.wid not in self._loop:
            return []
        _PARENT_FDS.difference_update((*w.fds, w.control_fd, w.crash_fd))
        os.close(w.control_fd)
        os.close(w.crash_fd)
        return self._loop.remove(w.wid)

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
            return self._death_error(w, exitcode, repr(t.key))

        return error_for

    def _death_error(self, w: _Worker, exitcode: int | None, task: str | None) -> WorkerLostError:
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

    def _note_startup_death(self, w: _Worker, exitcode: int | None) -> None:
        """A worker died before saying anything: start-up failed. Treated like an
        initializer failure, so a pool that cannot start workers backs off instead of
        respawning in a busy loop; one that re-ran an unguarded main module breaks at
        once, with the one line that says so (``worker._bootstrap``)."""
        if exitcode == EXIT_UNGUARDED_MAIN:
            w.init_error = error = InitializerError(unguarded_main(self.start_method))
            # Not logged: every queued task fails with it, and a script prints it once.
            self._broken = self._broken or error
            return
        self._note_init_failure(w, self._death_error(w, exitcode, None))

    def _note_init_failure(self, w: _Worker, error: BaseException) -> None:
        w.init_error = error
        if w.init_round != self._init_failures:
            return  # started before the last failure was counted: same probe round
        self._init_failures += 1
        if self._init_failures >= INIT_RETRIES:
            if isinstance(error, WorkerLostError):  # it died: no initializer to blame
                what = f"workers failed to start {self._init_failures} times in a row"
            else:
                what = f"the initializer {self.initializer!r} failed in "
                what += f"{self._init_failures} workers in a row"
            broken = InitializerError(f"{what}: {type(error).__name__}: {error}")
            broken.__cause__ = error
            self._broken = broken
            log.error("pipepool: %s", broken)
        else:
            self._init_retry_at = time.monotonic() + INIT_BACKOFF * 2 ** (self._init_failures - 1)

    def _fail_queued_broken(self) -> None:
        while self._queue:
            t = self._queue[0]
            self._finish(t, State.FAILED, exception=self._broken)
            self._queue.popleft()

    def _stop_workers(self) -> None:
        deferred = None
        try:
            deferred = _signals.defer()
            for w in self._workers.values():
                # Closing its activity pipe is the stop signal: the worker reads EOF and
                # exits. It holds no task, so nothing can be lost.
                self._remove_channel(w)
        finally:
            _signals.undefer(deferred)
        deadline = time.monotonic() + STOP_GRACE
        for w in self._workers.values():
            w.proc.join(max(0.0, deadline - time.monotonic()))
            if w.proc.exitcode is None:
                _signal_process(w.proc, "kill")
                w.proc.join()
            w.proc.close()
        self._workers.clear()
        self._close()

    def _close(self) -> None:
        if self._loop is not None:
            for w in self._workers.values():
                self._remove_channel(w)
            self._loop.close()
        if self._lifeline is not None:
            for fd in self._lifeline:
                _PARENT_FDS.discard(fd)
                os.close(fd)
            self._lifeline = None
        if self._marks is not None:
            _PARENT_FDS.discard(self._marks.fd)
            self._marks.close()
            self._marks = None
        self._state = "ended"


def _set_pipe_size(fd: int, size: int) -> None:
    """Ask for a pipe capacity where the OS lets us (Linux F_SETPIPE_SZ); else keep it."""
    import fcntl

    setter = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setter is None:
        return  # macOS and others: the capacity is the kernel's choice
    try:
        fcntl.fcntl(fd, setter, size)
    except OSError as exc:
        log.debug("pipepool: F_SETPIPE_SZ(%d) refused: %s", size, exc)


def _signal_process(proc: multiprocessing.process.BaseProcess, how: str) -> None:
    """``proc.terminate()`` or ``proc.kill()``, and the same signal to the process group
    the worker leads: whatever its task started goes with it (``_tree``)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # already gone or closed
        _tree.signal_group(proc.pid, signal.SIGTERM if how == "terminate" else signal.SIGKILL)
        getattr(proc, how)()
