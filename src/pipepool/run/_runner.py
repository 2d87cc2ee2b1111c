"""The runner: drive a LocalExecutor from the main thread through a batch of jobs.

One loop, as named steps::

    react to signals ─► feed the executor ─► sync (wait for a result or a tick)
          ▲                                              │
          └── redraw progress ◄── finish jobs (joblog, output, retry, halt) ◄──┘

Jobs run in pool workers through ``_job.run_job`` (timeouts and process-tree cleanup
happen there, so a timed-out job does not cost a worker). The runner feeds the executor
only a few jobs ahead of the free workers: stopping early then means cancelling a
handful of queued tasks, not a million.

Ctrl-C: the first starts no new job and lets the running ones finish; the second (or
SIGTERM, or ``--halt now``) kills them: ``LocalExecutor.kill`` SIGKILLs their workers and
each worker's guardian SIGKILLs its job's process group. Either way the summary is
printed and nothing is left running. Jobs killed by the runner get no joblog row, so
``--resume`` runs them again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import BinaryIO, TextIO, cast

from ..errors import TaskKilledError, TaskTimeoutError, WorkerLostError
from ..events import Event, State
from ..executor import LocalExecutor
from ._halt import Halt
from ._inputs import Job
from ._job import KILL_GRACE, JobResult, JobSpec, run_job, run_job_on_cluster
from ._joblog import HOST, Joblog, JoblogRow, read_joblog
from ._output import OutputWriter
from ._progress import Progress
from ._summary import Outcome, Summary

TICK = 0.1  # s the loop waits when nothing happens: bounds how late a Ctrl-C is noticed
# and a progress redraw is due; a finished job wakes it at once
FEED_AHEAD = 1  # jobs queued per worker beyond the running one, so that a worker that
# reports a result gets its next job in the same round; more only delays cancelling
BACKSTOP_SLACK = 5.0  # s past --timeout (and its kill grace) after which the executor
# kills the worker itself: only if the worker-side timeout could not end the job


@dataclass(slots=True)
class RunOptions:
    jobs: int
    timeout: float | None = None
    retries: int = 0
    halt: Halt = field(default_factory=Halt)
    keep_order: bool = False
    tag: bool = False
    results: str | None = None
    joblog: str | None = None
    resume: str | None = None  # None, "all" (--resume) or "failed" (--resume-failed)
    joblog_fsync: bool = False
    progress: bool | None = None  # None: on when stderr is a terminal
    summary: bool = True
    json: bool = False
    cluster: str | None = None  # --cluster: a Dask scheduler's address, or "local"


class Runner:
    def __init__(
        self,
        jobs: list[Job],
        options: RunOptions,
        *,
        stdout: BinaryIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.jobs = jobs
        self.options = options
        self.stdout = stdout or sys.stdout.buffer
        self.stderr = stderr or sys.stderr
        self._interrupts = 0
        self._terminated = False
        self._stopping = False
        self._aborting = False
        self._pending: deque[tuple[Job, int]] = deque()  # (job, attempt) not yet queued
        self._inflight: dict[int, tuple[Job, JobSpec, float]] = {}  # seq -> job, spec, t
        self._failed = 0
        self._running_since: dict[int, float] = {}  # seq -> when its worker started it
        self._runtime_sum = 0.0  # of finished jobs, for the progress bar's ETA

    # -- the run ------------------------------------------------------------------------

    def run(self) -> Summary:
        options = self.options
        ex = _make_executor(options)  # first: without Dask, --cluster fails before any file
        to_run = self._select_jobs()
        summary = self.summary = Summary(
            total=len(self.jobs), jobs=options.jobs, skipped=len(self.jobs) - len(to_run)
        )
        self._pending.extend((job, 1) for job in to_run)
        progress_on = options.progress
        if progress_on is None:
            progress_on = _isatty(self.stderr)
        self.progress = Progress(len(to_run), self.stderr, enabled=progress_on)
        self.output = OutputWriter(
            self.stdout,
            _binary(self.stderr),
            tag=options.tag,
            keep_order=options.keep_order,
            order=[j.seq for j in to_run],
            before_write=self._before_output,
        )
        self.joblog = (
            Joblog(options.joblog, append=options.resume is not None, fsync=options.joblog_fsync)
            if options.joblog
            else None
        )
        self.tmpdir = _make_tmpdir()
        started = time.monotonic()
        previous = self._install_signal_handlers()
        clean = False
        try:
            ex.start()
            if not options.jobs:  # --cluster ADDRESS without -j: one job per worker thread
                options.jobs = summary.jobs = ex.max_in_flight = max(1, ex.parallelism)
            self._loop(ex)
            clean = True
            self.output.flush_all()  # --keep-order: what waited for a job that never ran
            self.progress.finish(
                len(summary.outcomes),
                self._failed,
                note=f"stopped: {summary.stopped}" if summary.stopped else "",
            )
        finally:
            try:
                if clean:
                    ex.end()
                else:
                    ex.terminate()
            finally:
                _restore_signal_handlers(previous)
                self.progress.clear()
                if self.joblog is not None:
                    self.joblog.close()
                shutil.rmtree(self.tmpdir, ignore_errors=True)
        summary.elapsed = time.monotonic() - started
        if options.summary:
            self.stderr.write(summary.text())
            self.stderr.flush()
        return summary

    def _loop(self, ex: LocalExecutor) -> None:
        while True:
            self._react_to_signals(ex)
            fed = self._feed(ex)
            if not self._inflight and (self._stopping or not self._pending):
                return
            # The executor dispatches in its steps, which follow the wait: when a worker
            # is idle and a job was just queued for it, run the steps now, without waiting.
            # Otherwise the jobs queued ahead were dispatched in the round that collected
            # the results, and the loop can wait for the next one.
            idle = fed and len(self._inflight) - len(ex.queued) < self.options.jobs
            ex.sync(timeout=0.0 if idle else TICK)
            for event in ex.get_event_buffer().values():
                if event.state.terminal:
                    self._finish(ex, event)
                else:
                    self._running_since[cast(int, event.key)] = time.monotonic()
            self._draw(ex)

    # -- steps -------------------------------------------------------------------------

    def _select_jobs(self) -> list[Job]:
        """All jobs, less those the joblog says are done (``--resume``) or succeeded
        (``--resume-failed``)."""
        if self.options.resume is None or not self.options.joblog:
            return list(self.jobs)
        rows = read_joblog(self.options.joblog)
        if self.options.resume == "failed":
            return [j for j in self.jobs if not (j.seq in rows and rows[j.seq].ok)]
        return [j for j in self.jobs if j.seq not in rows]

    def _feed(self, ex: LocalExecutor) -> bool:
        """Queue jobs until every worker has FEED_AHEAD waiting; True if any was queued."""
        limit = self.options.jobs * (1 + FEED_AHEAD)
        fed = False
        while self._pending and not self._stopping and len(self._inflight) < limit:
            job, attempt = self._pending.popleft()
            spec = JobSpec(
                job.seq,
                attempt,
                job.argv,
                *self._output_paths(job.seq, attempt),
                timeout=self.options.timeout,
                drop_empty=self.options.results is None,
            )
            backstop = None
            if self.options.timeout is not None:
                backstop = self.options.timeout + KILL_GRACE + BACKSTOP_SLACK
            ex.queue_call(
                job.seq,
                run_job if self.options.cluster is None else run_job_on_cluster,
                (spec,),
                timeout=backstop,
            )
            self._inflight[job.seq] = (job, spec, time.time())
            fed = True
        return fed

    def _finish(self, ex: LocalExecutor, event: Event) -> None:
        """A job's attempt ended: retry it, or log it, print its output and count it."""
        seq = cast(int, event.key)  # each job is queued under its sequence number
        job, spec, queued_at = self._inflight.pop(seq)
        self._running_since.pop(seq, None)
        host = HOST
        if event.state is State.SUCCESS:
            result: JobResult = event.result
            host = result.host
            if result.output is not None:  # run on a Dask worker: its output came back
                _land_output(spec, result.output)
            outcome = Outcome(
                job.seq,
                job.command,
                "ok" if result.ok else "failed",
                result.exitval,
                result.signal,
                result.timed_out,
                result.runtime,
                spec.attempt,
            )
            start, receive = result.start, result.stdout_size
        else:
            exc = event.exception
            if isinstance(exc, CancelledError):  # cancelled while queued: it never ran
                self.output.skip(job.seq)
                return
            start, receive = queued_at, _file_size(spec.stdout_path)
            host = getattr(exc, "address", None) or HOST  # a lost Dask worker's
            outcome = _lost_outcome(job, spec, exc, time.time() - queued_at)
        if (
            outcome.status == "failed"
            and spec.attempt <= self.options.retries
            and not self._stopping
        ):
            self._discard_output(spec)
            self._pending.appendleft((job, spec.attempt + 1))
            return
        if outcome.status != "aborted" and self.joblog is not None:
            self.joblog.write(
                JoblogRow(
                    job.seq,
                    start,
                    outcome.runtime,
                    receive,
                    outcome.exitval,
                    outcome.signal,
                    job.command,
                    host,
                )
            )
        if (
            event.state is State.SUCCESS
            and spec.drop_empty
            and result.stdout_size == result.stderr_size == 0
        ):
            self.output.skip(job.seq)  # no output, and the worker removed the empty files
        else:
            self.output.finished(
                job.seq,
                job.tag,
                spec.stdout_path,
                spec.stderr_path,
                remove=self.options.results is None,
            )
        self.summary.outcomes.append(outcome)
        self._runtime_sum += outcome.runtime
        if outcome.status == "failed":
            self._failed += 1
        self._check_halt(ex)

    def _check_halt(self, ex: LocalExecutor) -> None:
        halt = self.options.halt
        if self._aborting or (self._stopping and halt.when == "soon"):
            return
        failed = self._failed
        succeeded = len(self.summary.outcomes) - failed
        if halt.reached(failed=failed, succeeded=succeeded, total=self.progress.total):
            self._stop(ex, f"--halt {halt}")
            if halt.when == "now":
                self._abort(ex)

    def _react_to_signals(self, ex: LocalExecutor) -> None:
        if self._terminated and not self._aborting:
            self._stop(ex, "terminated", force_reason=True)
            self._abort(ex)
        elif self._interrupts and not self._stopping:
            self._stop(ex, "interrupted")
            running = len(ex.running)
            if running:
                self._note(
                    f"Ctrl-C: starting no new job; waiting for {running} running "
                    "(Ctrl-C again kills them)"
                )
        elif self._interrupts >= 2 and not self._aborting:
            self._stop(ex, "interrupted")
            self._note(f"Ctrl-C again: killing {len(ex.running)} running jobs")
            self._abort(ex)
        if self._aborting:
            for key in ex.running:  # again each round: a job sent but not yet started
                ex.kill(key)

    def _stop(self, ex: LocalExecutor, reason: str, *, force_reason: bool = False) -> None:
        """Start no new job: cancel the few queued in the executor, keep the rest."""
        if not self.summary.stopped or force_reason:
            self.summary.stopped = reason
        self._stopping = True
        for key in ex.queued:
            ex.cancel(key)  # a CancelledError event each; _finish drops them
        for job, _attempt in self._pending:
            self.output.skip(job.seq)
        self._pending.clear()

    def _abort(self, ex: LocalExecutor) -> None:
        self._aborting = True
        for key in ex.running:
            ex.kill(key)

    # -- helpers -----------------------------------------------------------------------

    def _output_paths(self, seq: int, attempt: int) -> tuple[str, str]:
        if self.options.results is not None:
            base = os.path.join(self.options.results, str(seq))
            return os.path.join(base, "stdout"), os.path.join(base, "stderr")
        base = os.path.join(self.tmpdir, f"{seq}.{attempt}")
        return base + ".out", base + ".err"

    def _discard_output(self, spec: JobSpec) -> None:
        if self.options.results is None:  # --results files are overwritten by the retry
            for path in (spec.stdout_path, spec.stderr_path):
                with contextlib.suppress(OSError):
                    os.unlink(path)

    def _draw(self, ex: LocalExecutor) -> None:
        if not self.progress.due():
            return
        done = len(self.summary.outcomes)
        now = time.monotonic()
        ages = [now - t for t in self._running_since.values()]
        # A job handed to a worker whose "started" is still on its way counts as running
        # (age 0): a loop round follows each result, just before the worker's next
        # "started" arrives, and would otherwise always show one worker idle.
        dispatched = len(self._inflight) - len(ex.queued)
        ages += [0.0] * max(dispatched - len(ages), 0)
        self.progress.update(
            done,
            self._failed,
            ages,
            mean_runtime=self._runtime_sum / done if done else 0.0,
            note="stopping" if self._stopping else "",
        )

    def _before_output(self) -> None:
        self.progress.clear()

    def _note(self, message: str) -> None:
        self.progress.clear()
        self.stderr.write(f"pipepool: {message}\n")
        self.stderr.flush()

    def _install_signal_handlers(self) -> dict[int, object]:
        def on_interrupt(signum: int, frame: object) -> None:
            self._interrupts += 1  # the loop decides what it means, between its steps

        def on_terminate(signum: int, frame: object) -> None:
            self._terminated = True

        previous: dict[int, object] = {}
        for signum, handler in ((signal.SIGINT, on_interrupt), (signal.SIGTERM, on_terminate)):
            with contextlib.suppress(ValueError):  # not the main thread: the caller's job
                previous[signum] = signal.signal(signum, handler)
        return previous


def _make_executor(options: RunOptions):
    """A LocalExecutor, or with ``--cluster`` a ClusterExecutor: both drive the same loop."""
    if options.cluster is None:
        return LocalExecutor(options.jobs, prefetch=1)
    import logging

    from ..cluster import ClusterExecutor

    # As many jobs handed to Dask as run at once (LocalExecutor's prefetch=1): the ones
    # fed ahead stay queued here, where stopping early can still cancel them.
    if options.cluster == "local":
        return ClusterExecutor(
            None,
            n_workers=options.jobs,
            threads_per_worker=1,
            max_in_flight=options.jobs,
            silence_logs=logging.CRITICAL,
        )
    return ClusterExecutor(options.cluster, max_in_flight=options.jobs or None)


def _land_output(spec: JobSpec, output: tuple[bytes, bytes]) -> None:
    """Write a cluster job's output where a local worker would have (the runner's
    temporary directory, or ``--results``), for the OutputWriter to pick up."""
    for path, data in zip((spec.stdout_path, spec.stderr_path), output, strict=True):
        if data or not spec.drop_empty:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)


def _lost_outcome(job: Job, spec: JobSpec, exc: BaseException | None, runtime: float) -> Outcome:
    """The outcome of an attempt whose worker did not report back."""
    if isinstance(exc, TaskKilledError):
        return Outcome(
            job.seq, job.command, "aborted", -1, signal.SIGKILL, False, runtime, spec.attempt
        )
    if isinstance(exc, TaskTimeoutError):
        return Outcome(
            job.seq, job.command, "failed", -1, signal.SIGKILL, True, runtime, spec.attempt
        )
    sig = 0
    if isinstance(exc, WorkerLostError) and exc.exitcode is not None and exc.exitcode < 0:
        sig = -exc.exitcode
    reason = f"{type(exc).__name__}: {exc}" if exc is not None else "lost"
    return Outcome(
        job.seq,
        job.command,
        "failed",
        -1,
        sig,
        False,
        runtime,
        spec.attempt,
        error=reason.splitlines()[0][:200],
    )


TMP_PREFIX = "pipepool-run-"


def _make_tmpdir() -> str:
    """The run's directory for job output, named after this process, so that a later
    run can remove what a SIGKILLed one left behind (its pid no longer exists)."""
    base = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            if not name.startswith(TMP_PREFIX):
                continue
            pid = name[len(TMP_PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=base)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process (and likely someone else's directory)
    return True


def _restore_signal_handlers(previous: dict[int, object]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)  # type: ignore[arg-type]


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def _binary(stream: TextIO) -> BinaryIO:
    """The byte stream under a text stream (flushed first, so order is kept)."""
    stream.flush()
    return cast(BinaryIO, getattr(stream, "buffer", stream))


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
