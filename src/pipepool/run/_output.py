"""Job output, grouped: each job's stdout then stderr, whole, never interleaved.

Workers write a job's output to files (the run's temporary directory, or ``--results``),
so nothing is lost when a job is killed and the parent never holds a job's pipe. When a
job is final, the runner copies its files to its own stdout and stderr in one go,
optionally prefixing each line with the job's tag, and optionally in input order
(``--keep-order`` holds a finished job back until every earlier one is out).

``--line-buffer``: the runner also calls ``poll`` every round, which prints the whole
lines each running job has written so far (lines of different jobs mix, never half a
line); with ``--keep-order`` only the job whose turn it is streams, the others wait.

Also where output goes before that: the run's temporary directory, a cluster job's
output landed where a local worker would have written it, ``--results``' job records,
and the runner's own streams.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO, TextIO, cast

if TYPE_CHECKING:
    from ._job import JobSpec
    from ._summary import Outcome

CHUNK = 1 << 16


class OutputWriter:
    def __init__(
        self,
        stdout: BinaryIO,
        stderr: BinaryIO,
        *,
        tag: bool,
        keep_order: bool,
        line_buffer: bool = False,
        order: list[int],
        before_write: Callable[[], None],
    ) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.tag = tag
        self.keep_order = keep_order
        self._order = order  # seqs in input order (only those this run will report)
        self._next = 0  # index into _order of the next job to print
        self._held: dict[int, tuple[str, str, str, bool, int]] = {}
        self._before_write = before_write  # erases the progress bar
        self._broken = False  # our stdout's reader went away (`| head`)
        self.line_buffer = line_buffer
        self._followed: dict[int, list] = {}  # seq -> [tag, out, err, out_pos, err_pos]
        # What went to stdout so far ends a line (or nothing did): a job's output may
        # lack its last newline, and ``--json`` must start a line of its own after it.
        self.ends_line = True

    def follow(self, seq: int, tag: str, out_path: str, err_path: str) -> None:
        """``--line-buffer``: ``seq`` was sent; print its lines as they come."""
        self._followed[seq] = [tag, out_path, err_path, 0, 0]

    def poll(self) -> None:
        """``--line-buffer``: print the whole lines written since the last poll."""
        if self.keep_order:
            head = self._order[self._next] if self._next < len(self._order) else None
            seqs = [head] if head in self._followed else []
        else:
            seqs = list(self._followed)
        for seq in seqs:
            state = self._followed[seq]
            for i, stream in ((3, self.stdout), (4, self.stderr)):
                state[i] = self._copy_lines(state[i - 2], state[i], stream, state[0])

    def finished(self, seq: int, tag: str, out_path: str, err_path: str, *, remove: bool) -> None:
        """A job is final: print its output now, or hold it until its turn."""
        if not self.keep_order:
            self._emit(tag, out_path, err_path, remove, seq)
            return
        self._held[seq] = (tag, out_path, err_path, remove, seq)
        self._release()

    def skip(self, seq: int) -> None:
        """``seq`` will print nothing (never started): do not wait for it."""
        self._followed.pop(seq, None)
        if self.keep_order:
            self._held.setdefault(seq, ("", "", "", False, seq))
            self._release()

    def flush_all(self) -> None:
        """At the end: print what is still held, in order, whatever is missing."""
        for seq in sorted(self._held):
            self._emit(*self._held.pop(seq))

    def _release(self) -> None:
        order, held = self._order, self._held
        while self._next < len(order) and order[self._next] in held:
            self._emit(*held.pop(order[self._next]))
            self._next += 1

    def _emit(self, tag: str, out_path: str, err_path: str, remove: bool, seq: int = 0) -> None:
        if not out_path:
            return
        wrote = False
        followed = self._followed.pop(seq, None) if seq else None
        for i, (path, stream) in enumerate(((out_path, self.stdout), (err_path, self.stderr))):
            try:
                size = os.stat(path).st_size
            except OSError:
                continue  # never created: the job was killed before it started
            if size:
                if not wrote:
                    self._before_write()
                    wrote = True
                with open(path, "rb") as f:
                    if followed:  # --line-buffer: what poll() printed already
                        f.seek(followed[3 + i])
                    self._copy(f, stream, tag)
            if remove:
                _unlink(path)

    def _copy_lines(self, path: str, pos: int, stream: BinaryIO, tag: str) -> int:
        """Print the whole lines of ``path`` after ``pos``; the new position."""
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                data = f.read()
        except OSError:
            return pos  # not created yet, or removed empty
        end = data.rfind(b"\n") + 1
        if end:
            self._before_write()
            self._copy(io.BytesIO(data[:end]), stream, tag)
        return pos + end

    def _copy(self, f: BinaryIO, stream: BinaryIO, tag: str) -> None:
        if self._broken and stream is self.stdout:
            return
        try:
            last = b""
            if self.tag:
                prefix = os.fsencode(tag) + b"\t"
                line = b"\n"
                for line in f:
                    stream.write(prefix + line)
                if not line.endswith(b"\n"):
                    stream.write(b"\n")  # the next job's tag starts a line of its own
                last = b"\n"
            else:
                while chunk := f.read(CHUNK):
                    stream.write(chunk)
                    last = chunk
            if last and stream is self.stdout:
                self.ends_line = last.endswith(b"\n")
            stream.flush()
        except BrokenPipeError:
            if stream is self.stdout:
                self._broken = True  # keep running the jobs; their output has no reader


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def land_output(spec: JobSpec, output: tuple[bytes, bytes]) -> None:
    """Write a cluster job's output where a local worker would have (the runner's
    temporary directory, or ``--results``), for the OutputWriter to pick up."""
    for path, data in zip((spec.stdout_path, spec.stderr_path), output, strict=True):
        if data or not spec.drop_empty:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)


def write_record(results: str, outcome: Outcome) -> None:
    """``--results DIR/<seq>/job.json``: the job's outcome and resource use."""
    path = os.path.join(results, str(outcome.seq), "job.json")
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(outcome.as_dict(), f)
            f.write("\n")


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


def isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def binary(stream: TextIO) -> BinaryIO:
    """The byte stream under a text stream (flushed first, so order is kept)."""
    stream.flush()
    return cast(BinaryIO, getattr(stream, "buffer", stream))
