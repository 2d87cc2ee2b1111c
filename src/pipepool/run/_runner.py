"""The runner: drive a LocalExecutor from the main thread through a batch of jobs.

One loop, as named steps::

    react to signals ─► feed the executor ─► sync (wait for a result or a tick)
          ▲                                              │
          └── redraw progress ◄── finish jobs (joblog, output, retry, halt) ◄──┘

Jobs run in pool workers through ``_job.run_job`` (timeouts and process-tree cleanup
happen there, so a timed-out job does not cost a worker). The runner feeds the executor
only a few jobs ahead of the free workers: stopping early then means cancelling a
handful of queued tasks, not a million. With ``--halt`` it feeds none ahead: each job
starts only after the runner saw every outcome before it (``_ending``).

With ``{%}``, ``--pin``, ``--delay``, ``--load`` or ``--memfree`` the ``Gate`` decides
instead: a job is sent only when a slot is free and the gate is open (``_gate``). What
is measured of each job (its slot's CPUs, its noise, its wait for quiet) is the
measuring room's: the runner asks it through ``_seam.Measuring``.

The state the steps share is declared in ``_state``; finishing attempts and stopping
the run are ``_ending``'s steps, the loop and the feeding this module's.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from typing import TYPE_CHECKING, BinaryIO, TextIO, cast

from ..executor import LocalExecutor
from ._ending import Ending
from ._gate import Gate
from ._job import KILL_GRACE, JobSpec, prepare_worker, run_job, run_job_on_cluster
from ._joblog import Joblog, logged_outcomes, select_jobs
from ._options import RunOptions
from ._output import OutputWriter, binary, isatty, make_tmpdir
from ._progress import Progress
from ._summary import Summary
from ._template import Job

if TYPE_CHECKING:
    from ..cluster import ClusterExecutor
    from ._executor import JobExecutor
    from ._seam import Measuring

TICK = 0.1  # s the loop waits when nothing happens: bounds how late a Ctrl-C is noticed
# and a progress redraw is due; a finished job wakes it at once
FEED_AHEAD = 1  # jobs queued per worker beyond the running one, so that a worker that
# reports a result gets its next job in the same round; more only delays cancelling
BACKSTOP_SLACK = 5.0  # s past --timeout (and its kill grace) after which the executor
# kills the worker itself: only if the worker-side timeout could not end the job


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


class Runner(Ending):
    """Runs ``jobs`` as ``options`` say, measured as ``measuring`` says (default: the
    measuring room asked nothing); ``run`` returns the summary."""

    def __init__(
        self,
        jobs: list[Job],
        options: RunOptions,
        *,
        measuring: Measuring | None = None,
        stdout: BinaryIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        if measuring is None:  # nothing asked of the measuring room: it measures nothing
            from ..measure import Measurement

            measuring = Measurement()
        super().__init__(jobs, options, measuring, stdout, stderr)
        # First: a -j the cores cannot pin fails before anything starts (and, pinned,
        # the CPUs are leased until the run ends).
        self.placement = measuring.plan(options.jobs or 1, self._early_note)
        o = options
        try:
            self.gate = Gate(
                o.jobs or 1,
                slots=o.slots,
                cpus=self.placement.slots if self.placement is not None else None,
                delay=o.delay,
                load=o.load,
                memfree=o.memfree,
                proc_stat=o.proc_stat,
                meminfo=o.meminfo,
            )
        except BaseException:
            measuring.close()
            raise

    # -- the run ------------------------------------------------------------------------

    def run(self) -> Summary:
        try:
            ex = make_executor(self.options)  # first: without Dask, --cluster fails here
            self._prepare()
        except BaseException:
            self.measuring.close()
            raise
        started = time.monotonic()
        previous = self._install_signal_handlers()
        affinity = None
        if self.placement is not None and self.placement.reserved:  # --pin-reserve: the
            affinity = os.sched_getaffinity(0)  # runner and its workers (each pins itself
            os.sched_setaffinity(0, self.placement.reserved)  # to its slot per job)
        try:
            self._drive(ex)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if affinity is not None:
                os.sched_setaffinity(0, affinity)
            self.measuring.close()  # the CPU leases (--pin)
            self.progress.clear()
            if self.joblog is not None:
                self.joblog.close()
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        self.summary.elapsed = time.monotonic() - started
        if self.options.summary:
            self.stderr.write(self.summary.text())
            self.stderr.flush()
        return self.summary

    def _prepare(self) -> None:
        """The run's summary, progress bar, output, joblog and temporary directory."""
        options = self.options
        to_run = select_jobs(self.jobs, options.joblog, options.resume)
        summary = self.summary = Summary(
            total=len(self.jobs),
            measuring=self.measuring,
            jobs=options.jobs,
            skipped=len(self.jobs) - len(to_run),
            halt=options.halt,
        )
        if self.measuring.keeps_history and options.resume and options.joblog:
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
        self.joblog = None
        if options.joblog:
            self.joblog = Joblog(
                options.joblog,
                append=options.resume is not None,
                fsync=options.joblog_fsync,
                extra=self.measuring.columns,
            )
        if self.joblog is not None and self.joblog.torn:
            self._note(
                f"--resume: the last line of {options.joblog} was cut short (a row torn by "
                f"a crash, {self.joblog.torn} bytes without a newline); removed it, so its "
                "job runs again"
            )
        self.tmpdir = make_tmpdir()

    def _drive(self, ex: LocalExecutor | ClusterExecutor) -> None:
        """Start the executor, run the loop to its end, and end the executor (terminate
        it if the loop did not end cleanly)."""
        clean = False
        try:
            ex.start()
            if not self.options.jobs:  # --cluster ADDRESS without -j: one job per thread
                self.options.jobs = self.summary.jobs = max(1, ex.parallelism)
                if not isinstance(ex, LocalExecutor):  # always so: a local run has a -j
                    ex.max_in_flight = self.options.jobs
            self._loop(ex)
            clean = True
            self.output.flush_all()  # --keep-order: what waited for a job that never ran
            stopped = self.summary.stopped
            self.progress.finish(
                len(self.summary.outcomes),
                self._failed,
                note=f"stopped: {stopped}" if stopped else "",
            )
        finally:
            if clean:
                ex.end()
            else:
                ex.terminate()

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
            self._send(ex, job, attempt)
            fed = True
        return fed

    def _send(self, ex: JobExecutor, job: Job, attempt: int) -> None:
        """Queue one attempt of ``job`` in the next slot, with its measuring probe."""
        options = self.options
        slot, cpus = self.gate.take()
        job = job.bind_slot(slot)
        probe = self.measuring.probe(cpus, options.jobs)
        spec = JobSpec(
            job.seq,
            attempt,
            job.argv,
            *self._output_paths(job.seq, attempt),
            timeout=options.timeout,
            drop_empty=options.results is None,
            slot=slot,
            inherit_output=options.ungroup,
            probe=probe,
        )
        if options.line_buffer:
            self.output.follow(job.seq, job.tag, spec.stdout_path, spec.stderr_path)
        backstop = None
        if options.timeout is not None:
            backstop = options.timeout + KILL_GRACE + BACKSTOP_SLACK
            backstop += probe.wait if probe is not None else 0.0  # the worker waits first
        ex.queue_call(
            job.seq,
            run_job if options.cluster is None else run_job_on_cluster,
            (spec,),
            timeout=backstop,
        )
        self._inflight[job.seq] = (job, spec, cpus, time.time())

    def _note_wait(self) -> None:
        if not self._noted_wait and self.gate.waiting:
            self._noted_wait = True  # once: the reason is the same until jobs finish
            self._note(f"waiting to start jobs: {self.gate.waiting}")

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
