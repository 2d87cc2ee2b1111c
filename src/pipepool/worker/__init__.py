"""The worker process: read a frame, mark the task started, run it, send the outcome.

This room holds what runs in a worker, and the half of each contract its parent keeps:
the parent imports them under public names, and nothing here imports the executor.
``main`` below is the process's entry point; ``_serve`` its task loop and watcher thread.

What other rooms use, and nothing else of it (its underscore modules are its own):

* from here, what a worker loads anyway: ``main``, ``WorkerStart``, ``WorkerShare`` and
  ``ChildFd`` (what the parent hands a worker), ``MarkTable`` (the parent's page of start
  marks, ``_marks``), ``Region`` (a worker's shared payload rings, ``_region``), the
  crash report file (``open_report_file``, ``read_report``, ``note_crash``: ``_fault``),
  the process group (``signal_group``: ``_tree``), ``retire_after_task`` and the exit
  codes;
* two public modules a worker never loads, only its parent (and the zygote):
  ``zygote`` (the process that forks a pool's workers; ``preload_here``; what runs in
  that process, and the messages both sides send, are in ``_zygote_loop``) and
  ``bootstrap`` (a pool started while a worker imports an unguarded main module:
  ``WORKER_NAME``, ``refuse_while_bootstrapping``, ``EXIT_UNGUARDED_MAIN``,
  ``unguarded_main``). Re-exported here, they would slow every worker's start-up
  (``tests/project/test_layout.py``).

A worker holds exactly four pipe ends: the read end of its activity pipe, the write end
of its result pipe, the read end of its control pipe, and the read end of its pool's
lifeline; plus its slot in the pool's page of start marks (``_marks``) and its own
region of shared memory for big payloads (``_region``). It blocks freely (only the
parent must never block). Its invariants (docs/design.md):

* The start mark is stored before the task runs, so a worker that dies mid-task is known
  to have started it (the task fails as lost, not re-run), and one that dies before is
  known not to have (the task is dispatched again). No frame says "started".
* A task's outcome is in the result pipe before the next task's mark is stored, so a
  later crash never loses a finished result, and at most one task (the one running)
  is ever lost with a worker.
* Nothing the task does (raise, BaseException, sys.exit, return something unpicklable)
  breaks the loop; only the process dying does, and the parent sees that as EOF.
* The parent's death ends the worker even while a task runs: a thread blocks on the
  lifeline pipe, whose only writer is the parent, and exits the process at its EOF.
* A task may start processes and pools through ``multiprocessing``, as in the stdlib's
  workers; they are in the worker's process group, or (a nested pipepool pool's
  workers) see the worker as their lifeline, and a worker leaving its task loop ends
  the ones its tasks left running (``_tree``: ``may_have_children``, ``end_children``).
* Tasks sent ahead can be taken back while a long task runs. The same thread reads
  REVOKE from the control pipe and answers REVOKED with the sequence number of the last
  task this worker decided to start; every later task up to the REVOKE's number is then
  skipped unrun. Deciding to start (and storing the mark) and answering a REVOKE hold
  one lock, so for each task exactly one of the two happens, and the parent can hand
  the skipped ones to other workers at once instead of waiting for the long task to end.
  A CANCEL names one task: the thread answers CANCELLED (it will skip that one task) or
  TOO_LATE (it had started it), under the same lock; the tasks around it stay.
* With the compiled loop, the decision to start a task is also a compare-and-swap on the
  task's word of the worker's claim ring (``_marks``), which the parent may swap first to
  cancel the task without asking: the worker then skips it silently. Every skip of its
  own is written there too (docs/design.md, "Cancel claims").
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .. import _signals
from .. import loop as _impl
from ..frames import Kind, encode_header
from . import _fault, _tree
from ._fault import note_crash as note_crash  # re-exported: the parent's half of each contract
from ._fault import open_report_file as open_report_file
from ._fault import read_report as read_report
from ._marks import MarkTable as MarkTable
from ._marks import StartMark
from ._region import Region as Region
from ._serve import EXIT_BAD_FRAME as EXIT_BAD_FRAME  # re-exported: the worker's exit codes
from ._serve import EXIT_INIT_FAILED, _failure_frame, _Gate, _watch, serve
from ._serve import EXIT_PARENT_DIED as EXIT_PARENT_DIED
from ._serve import retire_after_task as retire_after_task
from ._tree import signal_group as signal_group


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


class WorkerStart(NamedTuple):
    """What the parent hands a new worker, by name: its ends of the pipes, its slots in
    what the pool shares, and its settings. Pickled by reference under spawn and
    forkserver (its fds by ``ChildFd``), so both sides import it from here."""

    activity: ChildFd  # read end of its activity pipe: TASK and BATCH frames
    result: ChildFd  # write end of its result pipe: outcomes and every answer
    # (REVOKED, CANCELLED, TOO_LATE, REFUSED, INIT_FAILED)
    control: ChildFd  # read end of its control pipe: REVOKE and CANCEL only
    lifeline: ChildFd  # read end of the pool's lifeline: its EOF means the parent died
    marks: ChildFd  # the pool's page of start marks (``_marks``)
    mark_slot: int  # this worker's slot in it
    claims_at: int  # where the page's claim rings begin (0: none, the pure loop's pools)
    crash: ChildFd  # the file a fatal signal's Python stack goes to (``_fault``)
    region: ChildFd | None  # its shared payload rings (``_region``); None: pipes only
    close_fds: Sequence[int]  # under fork: the parent's other pipepool fds, closed at once
    initializer: Callable[..., object] | None  # run before the first task
    initargs: tuple
    max_tasks: int | None  # exit after this many tasks (max_tasks_per_child)
    impl: str  # the parent's loop ("cython" or "python"): its FrameReader reads frames
    announce: bool  # send UP once started up: the pool keeps idle workers (keep_warm), and
    # a worker that dies idle is not one whose start-up failed


class WorkerShare(NamedTuple):
    """What every worker of a pool is handed alike: a pool's zygote keeps it and makes
    each worker's ``WorkerStart`` from it and the fds of that worker's own (``start``)."""

    lifeline: ChildFd
    marks: ChildFd
    claims_at: int
    initializer: Callable[..., object] | None
    initargs: tuple
    max_tasks: int | None
    impl: str
    announce: bool  # (``WorkerStart.announce``: fixed at the pool's start, as keep_warm is)

    def start(
        self,
        fds: Sequence[int],
        slot: int,
        region_fd: int | None,
        close_fds: Sequence[int],
    ) -> WorkerStart:
        """Worker ``slot``'s start record: ``fds`` are its activity, result and control
        pipe ends and its crash report file; ``region_fd`` its payload region, if any."""
        activity, result, control, crash = fds
        return WorkerStart(
            activity=ChildFd(activity),
            result=ChildFd(result),
            control=ChildFd(control),
            lifeline=self.lifeline,
            marks=self.marks,
            mark_slot=slot,
            claims_at=self.claims_at,
            crash=ChildFd(crash),
            region=ChildFd(region_fd) if region_fd is not None else None,
            close_fds=close_fds,
            initializer=self.initializer,
            initargs=self.initargs,
            max_tasks=self.max_tasks,
            impl=self.impl,
            announce=self.announce,
        )


def main(start: WorkerStart) -> None:
    """Entry point of a worker process (the ``multiprocessing.Process`` target)."""
    # First of all: a process group of our own, which every process a task starts joins,
    # so that killing the worker kills them too (``_tree``).
    _tree.lead_own_group()
    _tree.may_have_children()
    _fault.enable(start.crash.fd)  # before the initializer: a crash there is reported too
    # A parent thread may have had every signal blocked, or its handlers deferred, while
    # it started us; undo both, and leave Ctrl-C to the parent, which decides what
    # happens to running work.
    _signals.unblock_all_in_this_thread()
    _signals.reset_in_child()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked worker inherits the parent's Python SIGTERM handler: it would run the
    # parent's clean-up code here and survive terminate()'s SIGTERM until the SIGKILL.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Under fork we inherited the parent's ends of every other pipe: a worker holding
    # another worker's activity write end would hide the parent's death from it.
    for fd in start.close_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    claims = _impl.load(start.impl)[1].Claims  # None: the pure loop's pools make no rings
    mark = StartMark(start.marks.fd, start.mark_slot, start.claims_at, claims)
    os.close(start.marks.fd)  # the mapping stays; the fd is not needed any more
    region = None
    if start.region is not None:
        region = Region(start.region.fd, worker=True)
        os.close(start.region.fd)
    gate = _Gate(start.result.fd, mark, region)
    # The watcher thread, started without waiting for it to run (threading.Thread.start
    # waits: 0.2 ms of a start-up on a busy machine, before the first task is read).
    _thread.start_new_thread(_watch, (start.lifeline.fd, start.control.fd, gate))
    if start.initializer is not None:
        try:
            start.initializer(*start.initargs)
        except BaseException as exc:
            gate.write(_failure_frame(Kind.INIT_FAILED, 0, exc))
            sys.stderr.flush()
            os._exit(EXIT_INIT_FAILED)
    if start.announce:
        # The pool may have stopped us meanwhile (closed our pipes): then the read below
        # finds the end of the task pipe, and we exit as stopped.
        with contextlib.suppress(BrokenPipeError):
            gate.write([encode_header(Kind.UP, 0, 0)])
    serve(start.activity.fd, start.result.fd, start.max_tasks, start.impl, gate)
    # A normal exit: what its tasks left running through multiprocessing goes now, or
    # multiprocessing's exit would wait for it (``_tree``).
    _tree.end_children()
