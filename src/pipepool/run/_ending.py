"""How attempts and runs end: an attempt's outcome (retried, or logged, printed and
counted), ``--halt``, Ctrl-C and SIGTERM, and ``--memfree``'s kills.

Ctrl-C: the first starts no new job and lets the running ones finish; the second (or
SIGTERM, or ``--halt now``) kills them: ``LocalExecutor.kill`` SIGKILLs their workers and
each worker's guardian SIGKILLs its job's process group. Either way the summary is
printed and nothing is left running. Jobs killed by the runner get no joblog row, so
``--resume`` runs them again.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from concurrent.futures import CancelledError
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

from ..errors import TaskKilledError
from ..events import Event, State
from ._job import JobResult, JobSpec, file_size
from ._joblog import HOST, JoblogRow
from ._output import land_output, write_record
from ._state import RunState
from ._summary import Outcome, job_outcome, lost_outcome

if TYPE_CHECKING:
    from ._executor import JobExecutor
    from ._template import Job

Handler = Callable[[int, FrameType | None], Any] | int | None  # what signal.signal takes


class Ending(RunState):
    def _finish(self, ex: JobExecutor, event: Event) -> None:
        """A job's attempt ended: retry it, or log it, print its output and count it."""
        seq = cast(int, event.key)  # each job is queued under its sequence number
        job, spec, cpus, queued_at = self._inflight.pop(seq)
        if self._running_since.pop(seq, None) is None:
            self.gate.running(time.monotonic())  # started and ended within one round
        self.gate.release(spec.slot)
        ended = self._outcome(event, job, spec, cpus, queued_at)
        if ended is None:
            return  # it never ran, or it runs again
        outcome, receive, host = ended
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
                    outcome.start,
                    outcome.runtime,
                    receive,
                    outcome.exitval,
                    outcome.signal,
                    job.command,
                    host,
                    extra=self.measuring.column_values(outcome),
                )
            )
        self._print(event, job, spec)
        if self.options.results is not None:
            write_record(self.options.results, outcome)
        self.summary.outcomes.append(outcome)
        self._runtime_sum += outcome.runtime
        if outcome.status == "failed":
            self._failed += 1
        self._check_halt(ex, outcome)

    def _outcome(
        self,
        event: Event,
        job: Job,
        spec: JobSpec,
        cpus: tuple[int, ...] | None,
        queued_at: float,
    ) -> tuple[Outcome, int, str] | None:
        """The attempt's outcome, the bytes it wrote to stdout and where it ran; None
        when there is none to report: cancelled while queued (it never ran), or killed
        by ``--memfree`` with a retry left (it is queued again, "to be run later")."""
        if event.state is State.SUCCESS:
            result: JobResult = event.result
            if result.output is not None:  # run on a Dask worker: its output came back
                land_output(spec, result.output)
            outcome = job_outcome(job, spec, result)
            outcome.measured = self.measuring.record(cpus, result.measured)
            outcome.origin, outcome.rep, outcome.start = job.origin, job.rep, result.start
            return outcome, result.stdout_size, result.host
        exc = event.exception
        if isinstance(exc, CancelledError):
            self.output.skip(job.seq)
            return None
        outcome = lost_outcome(job, spec, exc, time.time() - queued_at)
        if job.seq in self._memkilled and isinstance(exc, TaskKilledError):
            self._memkilled.discard(job.seq)
            if spec.attempt <= self.options.retries and not self._stopping:
                self._discard_output(spec)
                self._pending.append((job, spec.attempt + 1))
                return None
            outcome.status = "failed"
            outcome.error = "killed: free memory below half of --memfree"
        outcome.measured = self.measuring.record(cpus, None)
        outcome.origin, outcome.rep, outcome.start = job.origin, job.rep, queued_at
        host = getattr(exc, "address", None) or HOST  # a lost Dask worker's
        return outcome, file_size(spec.stdout_path), host

    def _print(self, event: Event, job: Job, spec: JobSpec) -> None:
        """Hand the attempt's output to the writer (nothing: the worker removed the
        empty files of a job that printed nothing)."""
        if event.state is State.SUCCESS and spec.drop_empty:
            result: JobResult = event.result
            if result.stdout_size == result.stderr_size == 0:
                self.output.skip(job.seq)
                return
        self.output.finished(
            job.seq,
            job.tag,
            spec.stdout_path,
            spec.stderr_path,
            remove=self.options.results is None,
        )

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

    def _abort(self, ex: JobExecutor) -> None:
        self._aborting = True
        for key in ex.running:
            ex.kill(key)

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
