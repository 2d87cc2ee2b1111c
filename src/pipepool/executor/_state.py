"""LocalExecutor's state, declared once: every attribute the round's steps read and write,
set and commented in ``LocalState.__init__`` (as CPython's ``_ExecutorManagerThread``
does), and ``_Worker``, the parent's record of one worker process.

The steps are classes built on ``LocalState``, each in the file that says what it does,
and each derived from the steps whose methods it calls::

    SchedulerCore ─ LocalState ─┬─ WorkerLifecycle ─ Collector ─┬─ Reaper ────┬─ LocalCore ─┐
      (pipepool._api,           │                               └─ Canceller ─┤             │
      on _bookkeeping)          ├─ Dispatcher ─────────────────────┘          │             │
                                └─ OutsideLoop ───────────────────────────────┘             │
          LocalExecutor = LocalCore[Task] + SchedulerAPI's queue, queue_call ◄──────────────┤
          RecordExecutor[TaskT] = LocalCore[TaskT] + hand_over, take_records ◄──────────────┘

so the hierarchy the type checker reads is the one that runs. Every class of it is
generic in the task record type it keeps (``pipepool._task.TaskT``), as ``_Worker`` is:
``Task`` for LocalExecutor, the face's own records for RecordExecutor, so a record is
typed the same from ``_queue`` through a worker's ``in_flight`` to where it ends. They
move tasks between ``_queue``, the workers' ``in_flight`` and ``_events`` (or the
records executor's settled list): one owner of that bookkeeping, which is what keeps
every task in exactly one place (docs/design.md, "Invariants", 3).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic

from .. import _oom, _spin
from .. import loop as _impl
from .._api import SchedulerCore
from .._task import TaskT
from ..errors import InitializerError
from ..worker import MarkTable, Region
from ..worker.zygote import Zygote, ZygoteChild
from ._depth import DepthPolicy

if TYPE_CHECKING:
    from ..loop import ClaimsAPI, PipeLoopAPI

# Every parent-side pipepool fd open in this process. A forked worker closes all of them
# but its own, so that no worker holds another's pipe ends: otherwise one worker's EOF or
# the parent's death would stay hidden while the other lives.
_PARENT_FDS: set[int] = set()
# Emptied in a forked child: the fds it names are the parent's pools', which a worker or
# the zygote closes at once (a user's forked child may close them too), and whose numbers
# a pool made in the child would then hand its own workers to close, by then another
# fd's (the task's log file) or its own zygote's socket.
os.register_at_fork(after_in_child=_PARENT_FDS.clear)


class _Worker(Generic[TaskT]):
    """One worker process as the parent sees it, from its start until it is retired."""

    __slots__ = (
        "asked",
        "claims",
        "close_error",
        "closed_at",
        "closing",
        "control_fd",
        "crash_fd",
        "crash_report",
        "current",
        "exit_fd",
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
        "region",
        "retiring",
        "revoking",
        "sent",
        "seq",
        "slot",
        "wid",
    )

    def __init__(
        self,
        wid: int,
        proc: multiprocessing.process.BaseProcess | ZygoteChild,
        fds: tuple[int, int],
        control_fd: int,
        crash_fd: int,
        slot: int,
        init_round: int,
    ) -> None:
        self.wid = wid  # its channel in the PipeLoop
        self.proc = proc
        self.pid: int | None = proc.pid
        self.fds = fds  # the parent's ends, owned by the loop from add() to remove()
        self.control_fd = control_fd  # write end of its control pipe (REVOKE), non-blocking
        self.crash_fd = crash_fd  # its crash report file (``worker.open_report_file``)
        self.exit_fd = -1  # its pidfd, owned by the loop (``_lifecycle.exit_fd``), or -1
        self.slot = slot  # its start-mark slot in the pool's MarkTable
        # Its ring of cancel claims there (the compiled loop's; None: cancel by CANCEL):
        self.claims: ClaimsAPI | None = None
        self.region: Region | None = None  # its shared payload rings, unmapped at removal
        self.mark = 0  # the last start mark read from it
        self.init_round = init_round  # initializer failures counted when it started
        self.in_flight: dict[int, TaskT] = {}  # tid -> task, in dispatch order
        self.sent = 0  # tasks sent and not taken back, for max_tasks_per_child
        self.seq = 0  # tasks ever sent: the numbering REVOKE and REVOKED use
        self.revoking = 0  # while a REVOKE is out: the last sequence number it covers
        self.retiring = False  # recycle(): sent nothing more, stopped once it holds nothing
        self.asked: set[int] = set()  # sequence numbers of the tasks a CANCEL names that
        # the worker has not answered: a start mark past one does not say it started
        self.current: TaskT | None = None  # the task its start mark names, until its outcome
        self.heard = False  # a frame or a start mark came: it got through start-up
        self.closing = False  # its result pipe closed (EOF or a bad frame)
        self.closed_at = 0.0  # when it closed: past EXIT_GRACE a lingering worker is killed
        self.close_error: BaseException | None = None  # the bad frame that closed it
        self.init_error: BaseException | None = None  # its initializer's (or start-up's)
        self.kill_reason: BaseException | None = None  # why we killed it, for its task
        self.killed = False  # SIGKILL sent (once)
        self.crash_report = ""  # faulthandler's summary, for its lost task's message
        self.oom_at: _oom.Snapshot = ()  # the counts of OOM kills before its current task


class LocalState(SchedulerCore[TaskT]):
    """The state of a LocalExecutor; the steps built on it say what each part is for."""

    def __init__(
        self,
        parallelism: int,
        *,
        start_method: str | None,
        prefetch: int | None,
        pipe_size: int | None,
        max_tasks_per_child: int | None,
        initializer: Callable[..., object] | None,
        initargs: Iterable[Any],
        loop_impl: str | None,
        preload: tuple[str, ...] = (),
    ) -> None:
        super().__init__(
            (
                "done",
                "failed",
                "lost",
                "crashes",
                "killed",
                "recycles",
                "started_workers",
                "revoked",
            )
        )
        # -- configuration, as given (checked by LocalExecutor: ``pipepool._checks``) ------
        self.parallelism = parallelism  # workers at most (ProcessPoolExecutor may lower it)
        self.pipe_size = pipe_size  # F_SETPIPE_SZ for activity and result pipes, or None
        self.max_tasks_per_child = max_tasks_per_child  # a worker exits after this many
        self.initializer = initializer  # run in each worker before its first task
        self.initargs = tuple(initargs)
        self._keep_warm = False  # parallelism workers even with no work (``keep_warm``)
        self.preload = preload  # modules imported where workers are made from (_zygote)
        # A multiprocessing context; Any because typeshed's BaseContext lacks Process.
        self._context: Any = multiprocessing.get_context(start_method)
        self.start_method: str = self._context.get_start_method()
        self.implementation, loop_module = _impl.load(loop_impl)  # "cython" or "python"
        self._loop_class = loop_module.PipeLoop
        self._claims_type = loop_module.Claims  # None: the pure loop has no CAS
        self.chunk_results = loop_module.chunk_results  # a chunked map's hand-out
        # -- what start() opens and _close() closes ---------------------------------------
        self._loop: PipeLoopAPI | None = None  # the PipeLoop: every parent-side pipe end
        self._marks: MarkTable | None = None  # the page of start marks, a slot per worker
        self._lifeline: tuple[int, int] | None = None  # read end for workers, write end kept
        self._zygote: Zygote | None = None  # under fork: forks workers once threads run here
        self._zygote_due = False  # under fork: put off at start(), until the first workers
        # -- workers ---------------------------------------------------------------------
        self._workers: dict[int, _Worker[TaskT]] = {}  # wid -> worker, until it is retired
        self._wids = itertools.count(1)  # worker ids: channel numbers in the loop
        self._next_reap = 0.0  # when every worker's exit is checked next (REAP_INTERVAL)
        # The counts of OOM kills a worker's SIGKILL is checked against (``_oom``; a test
        # sets files of its own here before any worker starts).
        self._oom_counters: tuple[_oom.Counter, ...] = _oom.counters()
        # -- the round's own ------------------------------------------------------------
        self._depth = DepthPolicy(prefetch)  # how deep to dispatch; which tasks are trapped
        self._starting: list[tuple[TaskT, int | None]] = []  # seen started, no RUNNING yet
        self._retiring: set[int] = set()  # wids recycle() retires, until each is stopped
        # Before a wait for a short task's outcome, poll a little (``_spin``), or None:
        self._spin = _spin.Spin() if _spin.ENABLED else None
        # -- the initializer's back-off ----------------------------------------------------
        self._init_failures = 0  # initializer (or start-up) failures in a row
        self._init_retry_at = 0.0  # no worker starts before this after a failure
        self._broken: InitializerError | None = None  # set after INIT_RETRIES: queued work fails

    # -- a question of the state, for the steps and the outside loop's deadline ------------

    def _open_workers(self, depth: int) -> list[_Worker[TaskT]]:
        """The workers that may take a task now: open, no REVOKE out, below the depth
        and below ``max_tasks_per_child``, and (at an adaptive depth above 1) not busy
        with a task that overruns."""
        limit = self.max_tasks_per_child
        open_workers = [
            w
            for w in self._workers.values()
            if not w.closing
            and not w.revoking
            and not w.retiring
            and len(w.in_flight) < depth
            and (limit is None or w.sent < limit)
        ]
        if self._depth.prefetch is None and depth > 1:
            # Feed no worker whose current task overruns what we expect of a task: what
            # we send it now would wait behind that task instead of running elsewhere.
            overrun = time.monotonic() - self._depth.overrun_after()
            open_workers = [
                w for w in open_workers if w.current is None or w.current.began > overrun
            ]
        return open_workers
