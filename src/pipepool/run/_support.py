"""The runner's helpers that know nothing of its loop: which executor, where output goes,
what a lost attempt means, and the run's temporary directory."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from typing import TYPE_CHECKING, BinaryIO, TextIO, cast

from ..errors import TaskKilledError, TaskTimeoutError, WorkerLostError
from ..executor import LocalExecutor
from ._job import JobResult, JobSpec
from ._options import RunOptions
from ._summary import Outcome
from ._template import Job

if TYPE_CHECKING:
    from ..cluster import ClusterExecutor


def make_executor(options: RunOptions) -> LocalExecutor | ClusterExecutor:
    """A LocalExecutor, or with ``--cluster`` a ClusterExecutor: both drive the same loop
    (both are the ``_executor.JobExecutor`` the runner is typed against)."""
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


def land_output(spec: JobSpec, output: tuple[bytes, bytes]) -> None:
    """Write a cluster job's output where a local worker would have (the runner's
    temporary directory, or ``--results``), for the OutputWriter to pick up."""
    for path, data in zip((spec.stdout_path, spec.stderr_path), output, strict=True):
        if data or not spec.drop_empty:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)


def job_outcome(job: Job, spec: JobSpec, result: JobResult) -> Outcome:
    """The outcome of an attempt its worker reported: the job's own exit."""
    return Outcome(
        job.seq,
        job.command,
        "ok" if result.ok else "failed",
        result.exitval,
        result.signal,
        result.timed_out,
        result.runtime,
        spec.attempt,
        user=result.user,
        sys=result.sys,
        maxrss=result.maxrss,
        oom=result.oom,
    )


def lost_outcome(job: Job, spec: JobSpec, exc: BaseException | None, runtime: float) -> Outcome:
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
    if isinstance(exc, WorkerLostError):  # "its worker pid N was killed by ...": not the job
        reason = f"its {exc}"
    else:
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


def make_tmpdir() -> str:
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


def install_signal_handlers(on_interrupt, on_terminate) -> dict[int, object]:
    """SIGINT and SIGTERM to the runner's handlers; the previous ones, to restore."""
    previous: dict[int, object] = {}
    for signum, handler in ((signal.SIGINT, on_interrupt), (signal.SIGTERM, on_terminate)):
        with contextlib.suppress(ValueError):  # not the main thread: the caller's job
            previous[signum] = signal.signal(signum, handler)
    return previous


def restore_signal_handlers(previous: dict[int, object]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)  # type: ignore[arg-type]


def isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def binary(stream: TextIO) -> BinaryIO:
    """The byte stream under a text stream (flushed first, so order is kept)."""
    stream.flush()
    return cast(BinaryIO, getattr(stream, "buffer", stream))


def file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def write_record(results: str, outcome: Outcome) -> None:
    """``--results DIR/<seq>/job.json``: the job's outcome and resource use."""
    path = os.path.join(results, str(outcome.seq), "job.json")
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(outcome.as_dict(), f)
            f.write("\n")
