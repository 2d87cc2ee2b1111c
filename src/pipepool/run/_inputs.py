"""Turn the command line into the list of jobs, the way GNU parallel users expect.

* No command: each input line *is* a job (``pipepool run < jobs.txt``).
* A command and input lines, or a command and ``::: a b c`` (several ``:::`` groups
  combine as a cartesian product, the first varying slowest; ``:::: FILE`` reads a
  group from a file): each input fills the command's replacement strings.

Replacement strings: ``{}`` the argument(s), ``{.}`` without extension, ``{/}``
basename, ``{//}`` dirname, ``{/.}`` basename without extension, ``{#}`` the job's
sequence number, ``{N}`` and ``{N.}`` ``{N/}`` ``{N//}`` ``{N/.}`` the N-th group's
argument. A command without any gets `` {}`` appended. In shell mode arguments are
shell-quoted where they are substituted, so ``::: 'a b'`` stays one word.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SHELL = "/bin/sh"
_REPLACEMENT = re.compile(r"\{(#|\d*)(\.|/|//|/\.)?\}")


@dataclass(frozen=True, slots=True)
class Job:
    """One job: ``argv`` is what runs, ``command`` how it is shown and logged, ``tag``
    what ``--tag`` prefixes to its output lines."""

    seq: int
    argv: tuple[str, ...]
    command: str
    tag: str


class InputError(ValueError):
    """The job list cannot be built (a message for the user, no traceback)."""


def split_groups(argv: Sequence[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Split ``argv`` at ``:::``/``::::`` into the part before and the ``(sep, words)``
    groups after it."""
    head: list[str] = []
    groups: list[tuple[str, list[str]]] = []
    for word in argv:
        if word in (":::", "::::"):
            groups.append((word, []))
        elif groups:
            groups[-1][1].append(word)
        else:
            head.append(word)
    return head, groups


def read_lines(stream: Iterable[bytes | str]) -> list[str]:
    """Non-blank lines, without their newline (bytes decoded as the filesystem does)."""
    lines = []
    for raw in stream:
        line = os.fsdecode(raw) if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        if line.strip():
            lines.append(line)
    return lines


def resolve_groups(groups: list[tuple[str, list[str]]]) -> list[list[str]]:
    """``::: words`` as they are, ``:::: FILES`` as the lines of those files."""
    resolved = []
    for sep, words in groups:
        if sep == ":::":
            resolved.append(words)
            continue
        lines: list[str] = []
        for name in words:
            try:
                with open(name, "rb") as f:
                    lines += read_lines(f)
            except OSError as exc:
                raise InputError(f"cannot read {name}: {exc.strerror}") from exc
        resolved.append(lines)
    return resolved


def build_jobs(
    template: Sequence[str],
    arg_rows: Iterable[Sequence[str]] | None,
    lines: Sequence[str] | None,
    *,
    shell: bool = True,
) -> list[Job]:
    """The jobs, numbered from 1.

    ``template``: the command words (may be empty). ``arg_rows``: one tuple of arguments
    per job (from ``:::`` groups or input lines). ``lines``: whole commands, used when
    there is no template.
    """
    jobs: list[Job] = []
    if not template:
        if arg_rows is not None:
            # `pipepool run ::: 'cmd1' 'cmd2'`: each argument is a whole command
            lines = [" ".join(row) for row in arg_rows]
        for seq, line in enumerate(lines or (), 1):
            argv = (SHELL, "-c", line) if shell else tuple(_split(line))
            jobs.append(Job(seq, argv, line, line))
        return jobs
    if shell:
        text = " ".join(template)
        if not _REPLACEMENT.search(text):
            text += " {}"
    else:
        words = list(template)
        if not any(_REPLACEMENT.search(w) for w in words):
            words.append("{}")
    for seq, row in enumerate(arg_rows or (), 1):
        row = tuple(row)
        tag = " ".join(row)
        if shell:
            line = _substitute(text, row, seq, quote=True)
            argv = (SHELL, "-c", line)
        else:
            argv = tuple(_substitute(w, row, seq, quote=False) for w in words)
            line = shlex.join(argv)
        jobs.append(Job(seq, argv, line, tag))
    return jobs


def arg_rows_from_groups(groups: list[list[str]]) -> list[tuple[str, ...]]:
    return list(itertools.product(*groups)) if groups else []


def _split(line: str) -> list[str]:
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise InputError(f"cannot split {line!r} into words: {exc}") from exc
    if not words:
        raise InputError(f"empty command: {line!r}")
    return words


def _substitute(text: str, row: tuple[str, ...], seq: int, *, quote: bool) -> str:
    def one(arg: str) -> str:
        return shlex.quote(arg) if quote else arg

    def replace(match: re.Match[str]) -> str:
        which, form = match.group(1), match.group(2) or ""
        if which == "#":
            return str(seq)
        if which:
            index = int(which)
            if not 1 <= index <= len(row):
                raise InputError(
                    f"{match.group(0)} needs {index} input sources, there are {len(row)}"
                )
            return one(_transform(row[index - 1], form))
        return " ".join(one(_transform(arg, form)) for arg in row)

    return _REPLACEMENT.sub(replace, text)


def _transform(arg: str, form: str) -> str:
    if form == ".":
        return _strip_ext(arg)
    if form == "/":
        return os.path.basename(arg)
    if form == "//":
        return os.path.dirname(arg) or "."
    if form == "/.":
        return _strip_ext(os.path.basename(arg))
    return arg


def _strip_ext(arg: str) -> str:
    head, tail = os.path.split(arg)
    stem, dot, _ext = tail.rpartition(".")
    return os.path.join(head, stem) if dot and stem else arg
