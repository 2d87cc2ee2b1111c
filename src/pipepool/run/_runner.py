"""The runner: drive a LocalExecutor from the main thread through a batch of jobs.

One loop, as named steps::

    react to signals ─► feed the executor ─► sync (wait for a result or a tick)
          ▲                                              │
          └── redraw progress ◄── finish jobs (joblog, output, retry, halt) ◄──┘

Jobs run in pool workers through ``_job.run_job`` (timeouts and process-tree cleanup
happen there, so a timed-out job does not cost a worker). The runner feeds the executor
only a few jobs ahead of the free workers: stopping early then means cancelling a
handful of queued tasks, not a million. With ``--halt`` it feeds none ahead: each job
starts only after the runner saw every outcome before it (``_check_halt``).

With ``{%}``, ``--pin``, ``--delay``, ``--load`` or ``--memfree`` the ``Gate`` decides
instead: a job is sent only when a slot is free and the gate is open (``_gate``).

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
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError
from types import FrameType
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO, cast

from ..errors import TaskKilledError
from ..events import Event, State
from ..executor import LocalExecutor
from ._gate import Gate
from ._job import (
    KILL_GRACE,
    JobResult,
    JobSpec,
    file_size,
    prepare_worker,
    run_job,
    run_job_on_cluster,
)
from ._joblog import (
    HOST,
    Joblog,
    JoblogRow,
    extra_columns,
    extra_values,
    logged_outcomes,
    select_jobs,
)
from ._options import RunOptions
from ._output import OutputWriter, binary, isatty, land_output, make_tmpdir, write_record
from ._progress import Progress
from ._summary import Outcome, Summary, job_outcome, lost_outcome
from ._template import Job

if TYPE_CHECKING:
    from ..cluster import ClusterExecutor
    from ._executor import JobExecutor

TICK = 0.1  # s the loop waits when nothing happens: bounds how late a Ctrl-C is noticed
# and a progress redraw is due; a finished job wakes it at once
FEED_AHEAD = 1  # jobs queued per worker beyond the running one, so that a worker that
# reports a result gets its next job in the same round; more only delays cancelling
BACKSTOP_SLACK = 5.0  # s past --timeout (and its kill grace) after which the executor
# kills the worker itself: only if the worker-side timeout could not end the job
Handler = Callable[[int, FrameType | None], Any] | int | None  # what signal.signal takes


def make_executor(options: RunOptions) -> LocalExecutor | ClusterExecutor:
    """A LocalExecutor, or with ``--cluster`` a ClusterExecutor: both drive the same loop
    (both are the ``_executor.JobExecutor`` the runner is typed against)."""
    if options.cluster is None:
        return LocalExecutor(options.jobs, prefetch=1, initializer=prepare_worker)
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
        self._memkilled: set[int] = set()  # seqs killed by --memfree, to be run again
        self._noted_wait = False
        self._noise_on = options.cpus_per_job is not None or options.repeat > 1
        o = options
        self.gate = Gate(
            o.jobs or 1,
            slots=o.slots,
            cpus_per_job=o.cpus_per_job,
            delay=o.delay,
            load=o.load,
            memfree=o.memfree,
            reserve=o.pin_reserve,
            lease=o.lease,
            on_wait=self._early_note,
            proc_stat=o.proc_stat,
            meminfo=o.meminfo,
        )  # first: a -j the cores cannot pin fails before anything starts

    # -- the run ------------------------------------------------------------------------

    def run(self) -> Summary:
        options = self.options
        ex = make_executor(options)  # first: without Dask, --cluster fails before any file
        to_run = select_jobs(self.jobs, options.joblog, options.resume)
        summary = self.summary = Summary(
            total=len(self.jobs),
            jobs=options.jobs,
            skipped=len(self.jobs) - len(to_run),
            repeat=options.repeat,
            halt=options.halt,
            compare=options.compare,
        )
        if options.repeat > 1 and options.resume and options.joblog:
            summary.earlier = logged_outcomes(self.jobs, to_run, options.joblog)
        self._pending.extend((job, 1) for job in to_run)
        progress_on = options.progress
        if progress_on is None:
            progress_on = isatty(self.stderr)
        self.progress = Progress(len(to_run), self.stderr, enabled=progress_on)
        self.output = OutputWriter(
            self.stdout,
            binary(self.stderr),
            tag=options.tag and not options.ungroup,
            line_buffer=options.line_buffer,
            keep_order=options.keep_order,
            order=[j.seq for j in to_run],
            before_write=self._before_output,
        )
        self.joblog = (
            Joblog(
                options.joblog,
                append=options.resume is not None,
                fsync=options.joblog_fsync,
                extra=extra_columns(pinned=self.gate.plan is not None, noise=self._noise_on),
            )
            if options.joblog
            else None
        )
        if self.joblog is not None and self.joblog.torn:
            self._note(
                f"--resume: the last line of {options.joblog} was cut short (a row torn by "
                f"a crash, {self.joblog.torn} bytes without a newline); removed it, so its "
                "job runs again"
            )
        self.tmpdir = make_tmpdir()
        started = time.monotonic()
        previous = self._install_signal_handlers()
        clean = False
        affinity = None
        if self.gate.plan is not None and self.gate.plan.reserved:  # --pin-reserve: the
            affinity = os.sched_getaffinity(0)  # runner and its workers (each pins itself
            os.sched_setaffinity(0, self.gate.plan.reserved)  # to its slot per job)
        try:
            ex.start()
            if not options.jobs:  # --cluster ADDRESS without -j: one job per worker thread
                options.jobs = summary.jobs = max(1, ex.parallelism)
                if not isinstance(ex, LocalExecutor):  # always so: a local run has a -j
                    ex.max_in_flight = options.jobs
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
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
                if affinity is not None:
                    os.sched_setaffinity(0, affinity)
                self.gate.close()  # the CPU leases (--pin)
                self.progress.clear()
                if self.joblog is not None:
                    self.joblog.close()
                shutil.rmtree(self.tmpdir, ignore_errors=True)
        summary.elapsed = time.monotonic() - started
        if options.summary:
            self.stderr.write(summary.text())
            self.stderr.flush()
        return summary

    def _loop(self, ex: JobExecutor) -> None:
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
            timeout = 0.0 if idle else TICK
            if self.gate.exclusive and self._pending and not self._stopping:
                until = self.gate.wait_for(time.monotonic())
                if until is not None:
                    timeout = min(timeout, until)
            ex.sync(timeout=timeout)
            for event in ex.get_event_buffer().values():
                if event.state.terminal:
                    self._finish(ex, event)
                else:
                    self._running_since[cast(int, event.key)] = now = time.monotonic()
                    self.gate.running(now)
            if self.options.line_buffer:
                self.output.poll()
            if self.options.memfree is not None:
                self._relieve_memory(ex)
            self._draw(ex)

    # -- steps -------------------------------------------------------------------------

    def _feed(self, ex: JobExecutor) -> bool:
        """Queue jobs until every worker has FEED_AHEAD waiting; True if any was queued."""
        gate = self.gate
        # With --halt, no job waits in the executor for a worker: the executor would start
        # it the moment a job ends, before the runner saw that job's outcome and could
        # decide to halt (GNU parallel checks the condition before it starts the next).
        ahead = 0 if gate.exclusive or self.options.halt.when != "never" else FEED_AHEAD
        limit = self.options.jobs * (1 + ahead)
        fed = False
        while self._pending and not self._stopping and len(self._inflight) < limit:
            if gate.exclusive:
                now = time.monotonic()
                if not gate.has_slot():
                    break
                if not gate.ready(now):
                    self._note_wait()
                    break
                gate.started(now)
            job, attempt = self._pending.popleft()
            slot, cpus = gate.take()
            job = job.bind_slot(slot)
            spec = JobSpec(
                job.seq,
                attempt,
                job.argv,
                *self._output_paths(job.seq, attempt),
                timeout=self.options.timeout,
                drop_empty=self.options.results is None,
                slot=slot,
                cpus=cpus,
                inherit_output=self.options.ungroup,
                noise=self._noise_on,
                noise_threshold=self.options.noise_threshold,
                wait_quiet=self.options.wait_quiet,
                quiet_allowance=0 if cpus is not None else self.options.jobs - 1,
                quiet_stat=self.options.proc_stat,
            )
            if self.options.line_buffer:
                self.output.follow(job.seq, job.tag, spec.stdout_path, spec.stderr_path)
            backstop = None
            if self.options.timeout is not None:
                backstop = self.options.timeout + KILL_GRACE + BACKSTOP_SLACK
                backstop += self.options.wait_quiet or 0.0  # the worker waits first
            ex.queue_call(
                job.seq,
                run_job if self.options.cluster is None else run_job_on_cluster,
                (spec,),
                timeout=backstop,
            )
            self._inflight[job.seq] = (job, spec, time.time())
            fed = True
        return fed

    def _finish(self, ex: JobExecutor, event: Event) -> None:
        """A job's attempt ended: retry it, or log it, print its output and count it."""
        seq = cast(int, event.key)  # each job is queued under its sequence number
        job, spec, queued_at = self._inflight.pop(seq)
        if self._running_since.pop(seq, None) is None:
            self.gate.running(time.monotonic())  # started and ended within one round
        self.gate.release(spec.slot)
        host = HOST
        if event.state is State.SUCCESS:
            result: JobResult = event.result
            host = result.host
            if result.output is not None:  # run on a Dask worker: its output came back
                land_output(spec, result.output)
            outcome = job_outcome(job, spec, result)
            outcome.noise = result.noise
            outcome.quiet = result.quiet
            start, receive = result.start, result.stdout_size
        else:
            exc = event.exception
            if isinstance(exc, CancelledError):  # cancelled while queued: it never ran
                self.output.skip(job.seq)
                return
            start, receive = queued_at, file_size(spec.stdout_path)
            host = getattr(exc, "address", None) or HOST  # a lost Dask worker's
            outcome = lost_outcome(job, spec, exc, time.time() - queued_at)
            if job.seq in self._memkilled and isinstance(exc, TaskKilledError):
                self._memkilled.discard(job.seq)
                if spec.attempt <= self.options.retries and not self._stopping:
                    self._discard_output(spec)
                    self._pending.append((job, spec.attempt + 1))  # "to be run later"
                    return
                outcome.status = "failed"
                outcome.error = "killed: free memory below half of --memfree"
        outcome.origin, outcome.rep, outcome.start = job.origin, job.rep, start
        outcome.cpus = spec.cpus
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
                    extra=self._extra_columns(outcome),
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
        if self.options.results is not None:
            write_record(self.options.results, outcome)
        self.summary.outcomes.append(outcome)
        self._runtime_sum += outcome.runtime
        if outcome.status == "failed":
            self._failed += 1
        self._check_halt(ex, outcome)

    def _check_halt(self, ex: JobExecutor, outcome: Outcome) -> None:
        """After each finished job, before any other starts: is ``--halt`` met?"""
        halt = self.options.halt
        if self._aborting or (self._stopping and halt.when == "soon"):
            return
        failed = self._failed
        succeeded = len(self.summary.outcomes) - failed
        total = self.progress.total
        if halt.reached(failed=failed, succeeded=succeeded, total=total):
            if self.summary.halt_status is None:  # decided by the job that met it
                self.summary.halt_status = halt.status_when_reached(
                    failed=failed, total=total, exitval=outcome.exitval, signal=outcome.signal
                )
            self._stop(ex, f"--halt {halt}")
            if halt.when == "now":
                self._abort(ex)

    def _react_to_signals(self, ex: JobExecutor) -> None:
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

    def _stop(self, ex: JobExecutor, reason: str, *, force_reason: bool = False) -> None:
        """Start no new job: cancel the few queued in the executor, keep the rest."""
        if not self.summary.stopped or force_reason:
            self.summary.stopped = reason
        self._stopping = True
        for key in ex.queued:
            ex.cancel(key)  # a CancelledError event each; _finish drops them
        for job, _attempt in self._pending:
            self.output.skip(job.seq)
        self._pending.clear()

    def _relieve_memory(self, ex: JobExecutor) -> None:
        """``--memfree``: below half of SIZE free, kill the youngest running job (it goes
        back on the queue); one at a time, the next only once that one is gone."""
        if self._memkilled or self._aborting or not self._running_since:
            return
        if not self.gate.memory_low():
            return
        youngest = max(self._running_since, key=self._running_since.__getitem__)
        self._memkilled.add(youngest)
        self._note(f"--memfree: free memory below half; killing job {youngest} to run it later")
        ex.kill(youngest)

    def _note_wait(self) -> None:
        if not self._noted_wait and self.gate.waiting:
            self._noted_wait = True  # once: the reason is the same until jobs finish
            self._note(f"waiting to start jobs: {self.gate.waiting}")

    def _abort(self, ex: JobExecutor) -> None:
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

    def _draw(self, ex: JobExecutor) -> None:
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

    def _extra_columns(self, outcome: Outcome) -> tuple[str, ...]:
        """The joblog's columns after GNU parallel's nine (``EXTRA_COLUMNS``)."""
        return extra_values(outcome, pinned=self.gate.plan is not None, noise=self._noise_on)

    def stdout_ends_line(self) -> bool:
        """Whether the jobs' output on stdout ended a line (or there was none), so that
        ``--json`` knows if its line needs a newline first. With ``--ungroup`` the jobs
        wrote to the descriptor themselves, unseen: a line is assumed open once any ran."""
        if self.options.ungroup:
            return not self.summary.outcomes
        return self.output.ends_line

    def _before_output(self) -> None:
        self.progress.clear()

    def _early_note(self, message: str) -> None:
        self.stderr.write(f"pipepool: {message}\n")  # before the run: no progress line
        self.stderr.flush()

    def _note(self, message: str) -> None:
        self.progress.clear()
        self.stderr.write(f"pipepool: {message}\n")
        self.stderr.flush()

    def _install_signal_handlers(self) -> dict[int, Handler]:
        def on_interrupt(signum: int, frame: object) -> None:
            self._interrupts += 1  # the loop decides what it means, between its steps

        def on_terminate(signum: int, frame: object) -> None:
            self._terminated = True

        previous: dict[int, Handler] = {}  # to restore
        for signum, handler in ((signal.SIGINT, on_interrupt), (signal.SIGTERM, on_terminate)):
            with contextlib.suppress(ValueError):  # not the main thread: the caller's job
                previous[signum] = signal.signal(signum, handler)
        return previous
