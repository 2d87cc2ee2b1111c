"""The runner's state, declared once: what its steps share (``_runner``'s loop and
feeding, ``_ending``'s outcomes and stops), each attribute set and commented in one
place, and the small helpers every step uses."""

from __future__ import annotations

import contextlib
import os
import sys
from collections import deque
from typing import TYPE_CHECKING, BinaryIO, TextIO

if TYPE_CHECKING:
    from ._gate import Gate
    from ._job import JobSpec
    from ._joblog import Joblog
    from ._options import RunOptions
    from ._output import OutputWriter
    from ._progress import Progress
    from ._seam import Measuring, Placement
    from ._summary import Summary
    from ._template import Job


class RunState:
    # Made by ``Runner.run`` before the loop starts (from the jobs the joblog leaves):
    summary: Summary  # the outcomes so far, and why the run stopped
    progress: Progress  # the live bar on stderr
    output: OutputWriter  # each job's output, in order with -k
    joblog: Joblog | None  # --joblog
    tmpdir: str  # where the workers write each job's output (without --results)
    gate: Gate  # when the next job may start, and in which slot (made in __init__)
    placement: Placement | None  # --pin: each slot's CPUs, leased (made in __init__)

    def __init__(
        self,
        jobs: list[Job],
        options: RunOptions,
        measuring: Measuring,
        stdout: BinaryIO | None,
        stderr: TextIO | None,
    ) -> None:
        self.jobs = jobs
        self.options = options
        self.measuring = measuring  # the measuring room, through its declared seam
        self.stdout = stdout or sys.stdout.buffer
        self.stderr = stderr or sys.stderr
        self._interrupts = 0  # Ctrl-Cs seen (the loop decides what they mean)
        self._terminated = False  # SIGTERM seen
        self._stopping = False  # no new job starts (Ctrl-C, --halt, SIGTERM)
        self._aborting = False  # running jobs are killed too
        self._pending: deque[tuple[Job, int]] = deque()  # (job, attempt) not yet queued
        # seq -> the job, its attempt's spec, its slot's CPUs, when it was queued
        self._inflight: dict[int, tuple[Job, JobSpec, tuple[int, ...] | None, float]] = {}
        self._failed = 0  # jobs whose final outcome failed
        self._running_since: dict[int, float] = {}  # seq -> when its worker started it
        self._runtime_sum = 0.0  # of finished jobs, for the progress bar's ETA
        self._memkilled: set[int] = set()  # seqs killed by --memfree, to be run again
        self._noted_wait = False  # the gate's reason for waiting was told once

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
