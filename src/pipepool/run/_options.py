"""What ``pipepool run`` was asked to do, as the runner reads it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._halt import Halt


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
    slots: bool = False  # track job slots ({%} in the command or the tag string)
    cpus_per_job: int | None = None  # --pin (1) or --cpus-per-job K
    pin_reserve: bool = False  # --pin-reserve: a core left for pipepool itself
    noise_threshold: float = 0.5  # --noise-threshold: contention above it is noisy
    wait_quiet: float | None = None  # --wait-quiet MAX: s a job may wait for quiet CPUs
    lease: str = "wait"  # --lease: wait for CPUs other runs hold, "fail", or "ignore"
    delay: float = 0.0
    load: float | None = None
    memfree: int | None = None  # bytes
    line_buffer: bool = False
    ungroup: bool = False
    repeat: int = 1
    compare: bool = False  # --compare: the two jobs' ratio with its interval
    proc_stat: str | None = None  # where --load, --wait-quiet, --memfree look instead of the
    meminfo: str | None = None  # host's /proc/stat and /proc/meminfo (tests: files they control)
