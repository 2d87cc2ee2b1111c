"""What ``pipepool run`` was asked to do, as the runner reads it (what to measure is the
measuring room's record, ``pipepool.measure.MeasureOptions``)."""

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
    delay: float = 0.0
    load: float | None = None
    memfree: int | None = None  # bytes
    line_buffer: bool = False
    ungroup: bool = False
    proc_stat: str | None = None  # where --load and --memfree look instead of the host's
    meminfo: str | None = None  # /proc/stat and /proc/meminfo (tests: files they control)
