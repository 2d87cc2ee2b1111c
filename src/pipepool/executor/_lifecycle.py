"""LocalExecutor's worker lifecycle: opening the pool, starting workers, killing them,
the initializer's back-off, and stopping and closing the pool. (Noticing that a worker
exited and retiring it is ``_reap.py``.)
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import time
from typing import Any

from .. import _oom, _signals
from .._task import TaskT
from ..errors import InitializerError, WorkerLostError
from ..events import State
from ..worker import ChildFd, MarkTable, Region, WorkerShare, open_report_file, signal_group
from ..worker import main as worker_main
from ..worker.bootstrap import WORKER_NAME, refuse_while_bootstrapping
from ..worker.zygote import Zygote, ZygoteChild, preload_here, settle, threaded
from ._state import _PARENT_FDS, LocalState, _Worker

log = logging.getLogger("pipepool")

STOP_GRACE = 10.0  # s end() waits for idle workers to exit before terminating them
INIT_RETRIES = 3  # consecutive initializer failures before queued work fails
INIT_BACKOFF = 0.1  # s before the first restart after an initializer failure; doubles
WORKER_MODULE = worker_main.__module__  # what a fork server preloads (pipepool.worker)


class WorkerLifecycle(LocalState[TaskT]):
    """The steps that open the pool, start and kill workers, and stop the pool."""

    def _open(self) -> None:
        """Create the loop, the page of start marks and the lifeline (``start()``), and
        the zygote where one is due now; a ``PreloadError`` leaves nothing open."""
        # In a spawn or forkserver worker importing an unguarded main module: stop here,
        # before any process starts (``worker.bootstrap``).
        refuse_while_bootstrapping()
        try:
            self._open_all()
        except BaseException:
            self._close()  # whatever was opened; the executor is ended
            raise

    def _open_all(self) -> None:
        if self.start_method == "fork":
            preload_here(self.preload)  # workers are copies of this process
        if self.start_method == "forkserver":
            # Start the server now, with signals unblocked: it would inherit a blocked
            # mask if it were started lazily from inside a bookkeeping step.
            from multiprocessing import forkserver

            _preload_the_worker(forkserver)
            forkserver.ensure_running()
        self._loop = self._loop_class()
        _PARENT_FDS.update(self._loop.wake_fds())  # a fork worker or zygote closes them
        self._marks = MarkTable(self.parallelism, self._claims_type)
        _PARENT_FDS.add(self._marks.fd)
        lifeline_r, lifeline_w = os.pipe()
        _PARENT_FDS.update((lifeline_r, lifeline_w))
        self._lifeline = (lifeline_r, lifeline_w)
        if self.start_method != "fork":
            if self.preload:  # made from it, every worker has them imported
                self._make_zygote()
            return
        _share_the_resource_tracker()
        # Forked once the first workers are started and their first tasks sent
        # (``_fork_due_zygote``): not on the path to the first result.
        self._zygote_due = True

    def _fork_due_zygote(self) -> None:
        """The zygote a fork pool put off at ``start()``, forked now: after the round
        (or ``prestart()``) that started its first workers and sent them their first
        tasks, or before a worker starts while threads run here, whichever comes first."""
        if self._zygote_due:
            self._zygote_due = False
            self._make_zygote()

    def _make_zygote(self) -> None:
        """The pool's zygote (``worker.zygote``). Under fork: forked while this process
        has one thread (``_fork_due_zygote``), or at ``start()`` if it had more then; it
        keeps what every worker shares (the lifeline's read end, the page of start
        marks) and closes this process's other pipepool fds (the first workers' ends
        included). Under spawn and forkserver (with ``preload``): made with that start
        method at ``start()``, which waits for its imports (``PreloadError``). A worker
        it forks gets its own fds with the request."""
        assert self._lifeline is not None and self._marks is not None
        keep = (self._lifeline[0], self._marks.fd)
        try:
            self._zygote = Zygote.make(
                self._context, worker_main, self._share(), keep, _PARENT_FDS, self.preload
            )
        except OSError as exc:  # out of processes or fds: every worker starts from here
            log.warning("pipepool: no zygote (%s); workers start from this process", exc)
            return
        _PARENT_FDS.add(self._zygote.fd)

    def _share(self) -> WorkerShare:
        """What every worker of this pool is handed alike (``WorkerShare``)."""
        assert self._lifeline is not None and self._marks is not None
        return WorkerShare(
            lifeline=ChildFd(self._lifeline[0]),
            marks=ChildFd(self._marks.fd),
            claims_at=self._marks.claims_at,
            initializer=self.initializer,
            initargs=self.initargs,
            max_tasks=self.max_tasks_per_child,
            impl=self.implementation,
            announce=self._keep_warm,
        )

    def _start_workers(self) -> None:
        if self._broken is not None:
            self._fail_queued_broken()
            return
        alive = 0
        # Kept warm (``_outside``): every worker is wanted, as if work were outstanding.
        outstanding = self.parallelism if self._keep_warm else len(self._queue)
        for w in self._workers.values():  # one pass: this runs every round
            outstanding += len(w.in_flight)
            if not w.closing:
                alive += 1
        wanted = min(self.parallelism, outstanding) - alive
        if wanted <= 0 or time.monotonic() < self._init_retry_at:
            return
        if self._init_failures:
            # The initializer failed lately: probe with one worker at a time, not a
            # burst of them that would all fail together.
            if alive:
                return
            wanted = 1
        self._start_batch(wanted)

    def _start_batch(self, count: int) -> None:
        """Start ``count`` workers, with the OOM kill counts read once before the first
        fork: read between forks, each read paid the copy-on-write faults the last fork
        left (0.3 ms a worker, a third of a fork)."""
        if count <= 0:
            return
        oom_at = _oom.snapshot(self._oom_counters)
        for _ in range(count):
            self._start_worker(oom_at)

    def _start_worker(self, oom_at: _oom.Snapshot) -> None:
        """Start one worker; ``oom_at``: the OOM kill counts before it (``_start_batch``)."""
        assert self._lifeline is not None and self._marks is not None
        slot = self._marks.claim()
        if slot is None:  # every slot held by a worker not yet reaped: start it next round
            return
        activity_r, activity_w = os.pipe()
        result_r, result_w = os.pipe()
        control_r, control_w = os.pipe()
        os.set_blocking(control_w, False)
        crash_fd = open_report_file()  # shared with the worker, kept here
        region = _new_region()
        mine = (activity_r, result_w, control_r) + ((region.fd,) if region else ())
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
        try:
            proc = self._launch(
                wid, (activity_r, result_w, control_r, crash_fd), slot, region, close_fds
            )
        except BaseException:
            for fd in (activity_w, result_r, control_w, crash_fd):
                _PARENT_FDS.discard(fd)
                os.close(fd)
            self._marks.release(slot)
            if region:
                region.close()
            raise
        finally:
            for fd in mine:  # the child has its copies now (or never will)
                _PARENT_FDS.discard(fd)
                os.close(fd)
        w: _Worker[TaskT] = _Worker(
            wid, proc, (activity_w, result_r), control_w, crash_fd, slot, self._init_failures
        )
        w.region = region  # mapped here until the worker is removed; its fd is closed
        w.claims = self._marks.ring(slot)
        w.oom_at = oom_at
        w.exit_fd = exit_fd(w.pid)
        if w.exit_fd >= 0:
            _PARENT_FDS.add(w.exit_fd)
        assert self._loop is not None
        self._loop.add(wid, activity_w, result_r, w.exit_fd)  # it owns exit_fd from here
        self._workers[wid] = w
        self._stats["started_workers"] += 1

    def _launch(
        self,
        wid: int,
        fds: tuple[int, int, int, int],
        slot: int,
        region: Region | None,
        close_fds: list[int],
    ) -> multiprocessing.process.BaseProcess | ZygoteChild:
        """Start worker ``wid`` with its ``fds`` (activity, result, control, crash) and
        ``region``: forked by the zygote while threads run here (a fork would copy one of
        them, and whatever locks the others held), else by the start method, from here."""
        zygote = self._zygote
        if self.start_method != "fork":
            through = True  # made to preload: it forks every worker
        elif zygote is None and self._stats["started_workers"] == 0:
            # The pool's first worker, from here even while threads run (a C library's:
            # numpy's BLAS starts one at import): the zygote would be forked from this
            # same process now, so forking the worker through it adds a fork to the
            # first result and avoids no copy of another thread's locks. A thread a pool
            # here just joined is waited for first, as before the zygote's fork.
            settle()
            through = False
        else:
            through = (zygote is not None or self._zygote_due) and threaded()
            if through and zygote is None:  # put off, and threads came first: fork it now
                self._fork_due_zygote()
                zygote = self._zygote
        if through and zygote is not None and not zygote.dead:
            try:
                sent = fds + ((region.fd,) if region else ())
                return zygote.start(sent, wid, slot, region is not None)
            except OSError as exc:
                if not zygote.dead:
                    raise
                log.warning("pipepool: the zygote is gone (%s); starting workers from here", exc)
        start = self._share().start(fds, slot, region.fd if region else None, close_fds)
        proc = self._context.Process(
            target=worker_main, args=(start,), name=f"{WORKER_NAME}-{wid}", daemon=True
        )
        proc.start()
        return proc

    def _kill_worker(self, w: _Worker[TaskT], reason: BaseException | None) -> None:
        if reason is not None and w.kill_reason is None:
            w.kill_reason = reason
        if not w.killed:
            w.killed = True
            _signal_process(w.proc, "kill")

    def _remove_channel(self, w: _Worker[TaskT]) -> list[tuple[int, int, bytes]]:
        """Close a worker's parent ends (once) and drop them from the fork registry."""
        assert self._loop is not None
        if w.wid not in self._loop:
            return []
        _PARENT_FDS.difference_update((*w.fds, w.control_fd, w.crash_fd, w.exit_fd))
        os.close(w.control_fd)
        os.close(w.crash_fd)
        if w.region is not None:  # read to the end: nothing refers to it any more
            w.region.close()
            w.region = None
        return self._loop.remove(w.wid)

    def _note_init_failure(self, w: _Worker[TaskT], error: BaseException) -> None:
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
        zygote = self._zygote
        if zygote is not None and not any(
            isinstance(w.proc, ZygoteChild) for w in self._workers.values()
        ):
            # Out of the registry first: shut() closes the socket, and its number (fd
            # -1 from then on) would stay listed, for the next fork to close by number.
            _PARENT_FDS.discard(zygote.fd)
            zygote.shut()  # no exit of its to report: it exits beside the workers
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
            _PARENT_FDS.difference_update(self._loop.wake_fds())  # listed until closed
            self._loop.close()
        if self._zygote is not None:  # after the workers: it reports their exits
            _PARENT_FDS.discard(self._zygote.fd)
            self._zygote.close()
            self._zygote = None
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


def _preload_the_worker(forkserver: Any) -> None:
    """Have a fork server that is not running yet import the worker's code when it
    starts: each worker it forks then has it already (~4 ms of CPU saved per worker,
    a sixth of a forkserver start). Added to the modules already asked for (the
    default is the main module); a server already running is left as it is."""
    server = getattr(forkserver, "_forkserver", None)
    modules = getattr(server, "_preload_modules", None)
    if getattr(server, "_forkserver_pid", 0) is not None or not isinstance(modules, list):
        return  # running, or a multiprocessing whose fork server we do not know
    if WORKER_MODULE not in modules:
        forkserver.set_forkserver_preload([*modules, WORKER_MODULE])


def _share_the_resource_tracker() -> None:
    """Under fork: start multiprocessing's resource tracker here, before the workers, as
    spawn and forkserver pools do. A task's spawn or forkserver pool (its semaphores) or
    its shared memory is registered with the tracker; without one here, the worker would
    start its own, in its process group, and a kill or timeout of the task would kill it
    before it unlinked them (named semaphores and segments left in /dev/shm until the
    next boot). Shared, it outlives the worker and unlinks them (at the latest when this
    process exits)."""
    from multiprocessing import resource_tracker

    try:
        resource_tracker.ensure_running()
    except OSError as exc:  # out of processes: a task that needs one starts its own
        log.debug("pipepool: no resource tracker (%s)", exc)


def _new_region() -> Region | None:
    """A new worker's shared payload region, or None where one cannot be made (out of
    fds or address space): that worker's payloads all go through its pipes."""
    try:
        region = Region.create()
    except (OSError, ValueError) as exc:
        log.debug("pipepool: no shared payload region (%s); payloads use the pipes", exc)
        return None
    _PARENT_FDS.add(region.fd)  # a worker forked before it is closed must not keep it
    return region


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


def _signal_process(proc: multiprocessing.process.BaseProcess | ZygoteChild, how: str) -> None:
    """``proc.terminate()`` or ``proc.kill()``, and the same signal to the process group
    the worker leads: whatever its task started goes with it (``_tree``)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # already gone or closed
        signal_group(proc.pid, signal.SIGTERM if how == "terminate" else signal.SIGKILL)
        getattr(proc, how)()


def exit_fd(pid: int | None) -> int:
    """A pidfd of worker ``pid``, readable once it exits, for the loop to watch beside its
    pipes (``PipeLoop.add``): an exit wakes the parent even when a child of the worker
    holds its result pipe open (no EOF comes then). -1 where there is none (no pidfd
    before Linux 5.3, none on macOS; or the worker is gone already): the periodic reap
    (``REAP_INTERVAL``) catches such an exit instead, waking the parent to look."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None or pid is None:
        return -1
    try:
        return int(pidfd_open(pid))
    except OSError:
        return -1
