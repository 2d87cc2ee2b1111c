"""What the ``pipepool`` subcommands share: the exit status of a command that could not
start, the parser that exits with it, the default of ``-j``, argument types (whole
numbers, durations: one rule and one message each), and the check that a file or
directory an option names can be written, made before anything runs.

A leaf three rooms import: ``cli/`` (the entry point and ``bench``), ``run/`` and the
measuring room ``measure/``; it imports nothing of pipepool but ``_cpus``. It sits at the
top level, not in ``cli/``, because ``cli/`` imports ``run/``: inside ``cli/`` it would
make ``run/`` import the room above it, a circle (docs/design.md, "Layout").
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import stat
from collections.abc import Callable, Sequence
from typing import NoReturn, Protocol, TypeVar

from ._cpus import available_cpus

EXIT_ERROR = 255  # the command could not start (as GNU parallel); 1-101 count failed jobs


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors exit with ``EXIT_ERROR`` and say what is
    wrong first, then one line of usage (argparse prints the whole usage first, which
    for ``pipepool run`` is a dozen lines that push the reason out of sight)."""

    def __init__(self, *args, short_usage: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.short_usage = short_usage
        self.commands: dict[str, argparse.ArgumentParser] = {}  # subcommand -> its parser

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n{self.one_line_usage()}\n")

    def one_line_usage(self) -> str:
        if self.short_usage is not None:
            return f"usage: {self.short_usage} (all options: {self.prog} --help)"
        usage = " ".join(self.format_usage().split())  # argparse wraps it: unwrap
        if len(usage) <= 100:
            return usage
        return f"usage: {self.prog} [OPTIONS] ... (all options: {self.prog} --help)"


def default_jobs() -> int:
    """Jobs at a time by default: the CPUs this process may use (``pipepool._cpus``)."""
    return available_cpus().workers


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number of at least 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def duration(text: str) -> float:
    """An argparse type: a duration of 0 or more (``--delay``)."""
    return _duration(text, above_zero=False)


def bound(text: str) -> float:
    """An argparse type: a duration above 0 (``--timeout``, ``--wait-quiet``)."""
    if text.strip().endswith("%"):  # GNU parallel's --timeout N% of the median runtime
        raise argparse.ArgumentTypeError(
            f"{text}: a share of the median runtime is not supported; give seconds"
        )
    return _duration(text, above_zero=True)


def _duration(text: str, *, above_zero: bool) -> float:
    try:
        return parse_duration(text, above_zero=above_zero)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_DURATION = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, *, above_zero: bool = False) -> float:
    """``--delay``, ``--timeout``, ``--wait-quiet``: seconds, or with ms, s, m, h, d
    suffixes that add up (1.5s, 1m30s, 250ms). One rule for every duration: at least 0
    (``above_zero``: more than 0, for a bound), and one message, the form the whole
    numbers' options give ("must be 0 or more, not -1")."""
    shown = text.strip()
    text = shown.removeprefix("-")  # a negative duration is refused for its sign below
    if text.endswith("auto"):
        raise ValueError(f"{shown!r}: --delay ...auto is not supported; give a fixed duration")
    try:
        value = float(text)
        if value != value:  # nan
            raise ValueError(text)
    except ValueError:
        parts = re.findall(r"(\d+(?:\.\d+)?|\.\d+)(ms|[smhd])", text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(
                f"{shown!r} is not a duration: expected seconds (30, 1.5) or a duration "
                "such as 1.5s, 1m30s, 250ms"
            ) from None
        value = sum(float(n) * _DURATION[u] for n, u in parts)
    if shown.startswith("-"):
        value = -value
    if above_zero and not value > 0:
        raise ValueError(f"must be above 0, not {shown}")
    if value < 0:
        raise ValueError(f"must be 0 or more, not {shown}")
    return value


# -- files and directories an option names -------------------------------------------------
#
# A path the command could not write at the end (no such directory, a directory where a
# file goes, a file where a directory goes, no permission) is refused up front, naming
# the option that gave it: found only after a run, it would cost the run's results. The
# check opens the file as the writer will, without truncating it, and removes again a
# file it made, so a command that cannot start leaves nothing behind.


class OutputPathError(Exception):
    """``option``'s ``path`` cannot be written (a message for the user)."""

    def __init__(self, option: str, path: str, exc: OSError) -> None:
        super().__init__(f"{option} {path}: cannot write there: {exc.strerror or exc}")
        self.option = option
        self.path = path


def check_file(option: str, path: str) -> None:
    """Raise OutputPathError unless ``option`` can write the file ``path``."""
    cloexec = getattr(os, "O_CLOEXEC", 0)
    try:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | cloexec, 0o644))
            except FileExistsError:  # made meanwhile: as good as found
                return
            os.unlink(path)
            return
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if stat.S_ISREG(mode):
            os.close(os.open(path, os.O_WRONLY | cloexec))  # no O_TRUNC: left as it is
        elif not os.access(path, os.W_OK):  # a FIFO, a device: opening one may block
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as exc:
        raise OutputPathError(option, path, exc) from None


def make_directory(option: str, path: str) -> None:
    """Make the directory ``path`` (and its parents) for ``option``; OutputPathError if
    it cannot be made or written in."""
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as exc:
        raise OutputPathError(option, path, exc) from None


# -- a summary's listings: pipepool run's and its measuring room's alike ---------------------


class _Numbered(Protocol):
    @property
    def seq(self) -> int: ...
    @property
    def command(self) -> str: ...


Listed = TypeVar("Listed", bound=_Numbered)
SHOWN = 20  # records listed by name in a text summary (all are in the JSON)


def listing(records: Sequence[Listed], what: Callable[[Listed], str]) -> list[str]:
    """One line per record (at most ``SHOWN``): its number, ``what`` of it, its command."""
    shown = records[:SHOWN]
    width = max(len(what(r)) for r in shown)
    lines = [f"  #{r.seq:<5} {what(r):<{width}}  {short(r.command)}" for r in shown]
    if len(records) > len(shown):
        lines.append(f"  ... and {len(records) - len(shown)} more (see --joblog or --json)")
    return lines


def short(command: str, limit: int = 60) -> str:
    """A command on one line of at most ``limit`` characters."""
    command = command.replace("\n", "\\n")
    return command if len(command) <= limit else command[: limit - 3] + "..."
