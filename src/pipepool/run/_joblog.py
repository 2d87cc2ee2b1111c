"""The joblog: GNU parallel's format, written so that a killed runner never tears a row.

One tab-separated row per finished job under a header::

    Seq  Host  Starttime  JobRuntime  Send  Receive  Exitval  Signal  Command

Each row is one ``os.write`` of the whole line on an ``O_APPEND`` descriptor: the kernel
appends it in one piece or not at all, so SIGKILL between two rows leaves whole rows
only, and ``--resume`` can trust every line. A tail without its newline (a full disk, a
crash of the machine) is cut off when the log is opened for appending, so the next row
starts on a line of its own; the runner says so.

``--resume`` appends to the file it is given, so it first checks that the file is a
joblog (its first line is the header): a file of notes given by mistake is refused
before anything touches it (``check_joblog``).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from ._summary import Outcome

COLUMNS = (
    "Seq",
    "Host",
    "Starttime",
    "JobRuntime",
    "Send",
    "Receive",
    "Exitval",
    "Signal",
    "Command",
)
HEADER = "\t".join(COLUMNS) + "\n"
# The measuring room's columns follow GNU's nine (Measuring.columns: "CPUs" with --pin,
# "Noisy" where noise is measured): a reader of GNU's format that takes the first nine
# columns still reads every row.


HOST = ":"  # GNU parallel's name for the local machine


@dataclass(frozen=True, slots=True)
class JoblogRow:
    seq: int
    start: float
    runtime: float
    receive: int
    exitval: int
    signal: int
    command: str
    host: str = HOST  # GNU parallel's ":" for this machine; a Dask worker's address
    extra: tuple[str, ...] = ()  # EXTRA_COLUMNS' values, after the command

    @property
    def ok(self) -> bool:
        return self.exitval == 0 and self.signal == 0

    def format(self) -> str:
        # The same number formats as GNU parallel, so tools that read its joblog read ours.
        return (
            f"{self.seq}\t{self.host}\t{self.start:10.3f}\t{self.runtime:10.3f}\t0\t"
            f"{self.receive}\t{self.exitval}\t{self.signal}\t{_escape(self.command)}"
            + "".join(f"\t{_escape(value)}" for value in self.extra)
            + "\n"
        )


class JoblogError(Exception):
    """The joblog cannot be used: ``--resume`` was given a file that is not a joblog, or
    the file cannot be opened (a message for the user, naming the option)."""


class Joblog:
    """An open joblog. ``append=False`` starts it afresh, ``True`` continues it (resume);
    ``torn`` is then the length of the cut-off last line it repaired (0: none)."""

    def __init__(
        self, path: str, *, append: bool, fsync: bool = False, extra: tuple[str, ...] = ()
    ) -> None:
        # Read-write only to look for a torn tail; every write appends (O_APPEND).
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        self.path = path
        self.fsync = fsync
        self.torn = 0
        try:
            self._fd = os.open(path, flags, 0o644)
        except OSError as exc:  # checked before the run (_paths): gone since, or a race
            raise JoblogError(f"--joblog {path}: cannot write there: {exc.strerror}") from None
        try:
            regular = stat.S_ISREG(os.fstat(self._fd).st_mode)  # not /dev/null, a FIFO
            if regular and append:
                self.torn = _cut_torn_tail(self._fd)
            elif regular:
                os.ftruncate(self._fd, 0)
            if not regular or os.fstat(self._fd).st_size == 0:
                self._write_line(HEADER[:-1] + "".join(f"\t{c}" for c in extra) + "\n")
        except BaseException:
            os.close(self._fd)
            raise

    def write(self, row: JoblogRow) -> None:
        self._write_line(row.format())

    def _write_line(self, line: str) -> None:
        data = line.encode("utf-8", "surrogateescape")
        written = os.write(self._fd, data)
        if written != len(data):  # a regular file writes all or fails, short of a full disk
            raise OSError(f"joblog {self.path}: short write ({written} of {len(data)} bytes)")
        if self.fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Joblog:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def read_joblog(path: str) -> dict[int, JoblogRow]:
    """``{seq: newest row}`` from a joblog; a missing file is empty. The header, blank
    lines and a torn last line are skipped; a later row for a seq replaces an earlier one
    (``--resume-failed`` appends the new outcome of a job that failed before)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}
    rows: dict[int, JoblogRow] = {}
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: empty, or a torn row
    extra = 0  # pipepool's columns after the command, as the header names them
    if lines and lines[0].startswith(HEADER[:-1].encode()):
        extra = lines[0].count(b"\t") - (len(COLUMNS) - 1)
    for raw in lines:
        fields = raw.decode("utf-8", "surrogateescape").split("\t", 8)
        if len(fields) != 9 or not fields[0].strip().isdigit():
            continue  # the header, or a line that is not ours
        if extra and fields[8].count("\t") >= extra:
            fields[8] = fields[8].rsplit("\t", extra)[0]
        try:
            row = JoblogRow(
                int(fields[0]),
                float(fields[2]),
                float(fields[3]),
                int(fields[5]),
                int(fields[6]),
                int(fields[7]),
                fields[8],
            )
        except ValueError:
            continue
        rows[row.seq] = row
    return rows


def check_joblog(path: str) -> None:
    """Raise JoblogError unless ``path`` is missing, empty, not a regular file, or starts
    with the joblog header: what ``--resume`` may append to."""
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return  # /dev/null, a FIFO: nothing to read back, nothing to repair
            first = f.readline(len(HEADER) + 200)
    except FileNotFoundError:
        return
    if first and not (first == HEADER.encode() or first.startswith(HEADER[:-1].encode() + b"\t")):
        shown = first[:40].decode("utf-8", "replace").rstrip("\n")
        raise JoblogError(
            f"--resume: {path} is not a joblog (its first line is {shown!r}, not the "
            "header Seq, Host, Starttime, ...); left untouched: give the --joblog file "
            "of the earlier run, or run without --resume to start a new one"
        )


def select_jobs(jobs: list, joblog: str | None, resume: str | None) -> list:
    """All jobs, less those the joblog says are done (``--resume``, ``resume="all"``)
    or succeeded (``--resume-failed``, ``resume="failed"``). JoblogError if the file is
    not a joblog."""
    if resume is None or not joblog:
        return list(jobs)
    check_joblog(joblog)
    rows = read_joblog(joblog)
    if resume == "failed":
        return [j for j in jobs if not (j.seq in rows and rows[j.seq].ok)]
    return [j for j in jobs if j.seq not in rows]


def logged_outcomes(jobs: list, to_run: list, joblog: str) -> list[Outcome]:
    """The outcomes the joblog holds of the jobs ``--resume`` skips, for the per-job
    statistics of ``--repeat`` (wall time and exit only: the joblog has no CPU time)."""
    rows = read_joblog(joblog)
    running = {j.seq for j in to_run}
    found = []
    for job in jobs:
        row = rows.get(job.seq)
        if row is None or job.seq in running:
            continue
        found.append(
            Outcome(
                job.seq,
                job.command,
                "ok" if row.ok else "failed",
                row.exitval,
                row.signal,
                runtime=row.runtime,
                origin=job.origin,
                rep=job.rep,
                start=row.start,
                logged=True,
            )
        )
    return found


def _cut_torn_tail(fd: int) -> int:
    """Cut a last line without its newline; return its length (0: there was none)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return 0
    keep = size
    while keep > 0:
        chunk = os.pread(fd, min(keep, 65536), max(0, keep - 65536))
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            keep = keep - len(chunk) + newline + 1
            break
        keep -= len(chunk)
    os.ftruncate(fd, keep)
    return size - keep


def _escape(command: str) -> str:
    # A row is one line: a newline or tab inside a command would split it. Only those two
    # are escaped (backslashes stay as typed, as GNU parallel writes them): the command
    # column is for people; --resume matches jobs by Seq.
    return command.replace("\n", "\\n").replace("\t", "\\t")
