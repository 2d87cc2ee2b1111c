"""What the ``pipepool`` subcommands share: the exit status of a command that could not
start, the parser that exits with it, the default of ``-j``, and argument types.

A leaf: ``cli`` (the entry point) and the subcommands (``run/``, ``bench``) import it,
and it imports nothing of pipepool, so no arrow points back up to the entry point.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

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
