"""Turn a command template and the input rows into jobs, GNU parallel's way.

* No command: each row *is* a job (its values joined by spaces: ``pipepool run < jobs``).
* A command: each row fills its replacement strings. ``{}`` the whole row, ``{.}``
  without extension, ``{/}`` basename, ``{//}`` dirname, ``{/.}`` basename without
  extension, ``{#}`` the job's sequence number, ``{%}`` its job slot (1..-j, bound
  when the job starts), ``{N}`` and ``{N.}`` ``{N/}`` ``{N//}`` ``{N/.}`` the row's
  N-th value (empty when the row is shorter, as with ``-N``). A command without any
  gets `` {}`` appended.

In shell mode values are shell-quoted where they are substituted, so ``::: 'a b'``
stays one word. ``-q`` quotes the command's words too (each one stays one word for the
shell); ``--no-shell`` execs the words without a shell.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ._inputs import InputError

SHELL = "/bin/sh"
_REPLACEMENT = re.compile(r"\{(#|%|\d*)(\.|/|//|/\.)?\}")
_SLOT = "{%}"


@dataclass(frozen=True, slots=True)
class Job:
    """One job: ``argv`` is what runs, ``command`` how it is shown and logged, ``tag``
    what ``--tag``/``--tagstring`` prefixes to its output lines. ``origin`` is its
    number within one repetition (``--repeat``), ``rep`` which repetition (from 1).
    A job whose command or tag uses ``{%}`` keeps what it needs to bind its slot."""

    seq: int
    argv: tuple[str, ...]
    command: str
    tag: str
    origin: int = 0
    rep: int = 1
    late: tuple | None = None  # (Template, row) when {%} waits for a slot

    def bind_slot(self, slot: int) -> Job:
        """This job as it runs in job slot ``slot``."""
        if self.late is None:
            return self
        template, row = self.late
        argv, command, tag = template.render(row, self.seq, slot)
        return replace(self, argv=argv, command=command, tag=tag, late=None)


@dataclass(frozen=True, slots=True)
class Template:
    """A command template with its options, ready to render rows."""

    words: tuple[str, ...]
    shell: bool = True
    quote: bool = False
    tagstring: str | None = None
    append: bool = True  # no replacement string: append {} (not with -N 0)

    @property
    def uses_slot(self) -> bool:
        return any(_SLOT in w for w in self.words) or _SLOT in (self.tagstring or "")

    def render(
        self, row: tuple[str, ...], seq: int, slot: int = 0
    ) -> tuple[tuple[str, ...], str, str]:
        """``(argv, command, tag)`` of the job with ``row``, number ``seq``, in ``slot``."""
        words = list(self.words)
        if not words:  # the row is the command
            line = " ".join(row)
            argv = (SHELL, "-c", line) if self.shell else tuple(split_words(line))
            return argv, line, self._tag(row, seq, slot, line)
        if self.shell and not self.quote:
            text = " ".join(words)
            if self.append and not _REPLACEMENT.search(text):
                text += " {}"
            line = substitute(text, row, seq, slot, quote=True)
            return (SHELL, "-c", line), line, self._tag(row, seq, slot, " ".join(row))
        if self.append and not any(_REPLACEMENT.search(w) for w in words):
            words.append("{}")
        out: list[str] = []
        for word in words:
            if word == "{}":  # a bare {} is one word per value, as in the shell
                out += row
            else:
                out.append(substitute(word, row, seq, slot, quote=False))
        if self.shell:  # -q: every word stays one word for the shell
            line = " ".join(shlex.quote(w) for w in out)
            return (SHELL, "-c", line), line, self._tag(row, seq, slot, " ".join(row))
        return tuple(out), shlex.join(out), self._tag(row, seq, slot, " ".join(row))

    def _tag(self, row: tuple[str, ...], seq: int, slot: int, default: str) -> str:
        if self.tagstring is None:
            return default
        return substitute(self.tagstring, row, seq, slot, quote=False)


def build_jobs(
    template: Template, rows: Sequence[tuple[str, ...]], *, repeat: int = 1
) -> list[Job]:
    """The jobs, numbered from 1. ``repeat``: every row ``repeat`` times, the
    repetitions one after the other (rows 1..n, then 1..n again), each its own job."""
    late = template.uses_slot
    jobs: list[Job] = []
    seq = 0
    for rep in range(1, repeat + 1):
        for origin, row in enumerate(rows, 1):
            seq += 1
            argv, command, tag = template.render(row, seq, 0)
            jobs.append(
                Job(seq, argv, command, tag, origin, rep, (template, row) if late else None)
            )
    return jobs


def split_words(line: str) -> list[str]:
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise InputError(f"cannot split {line!r} into words: {exc}") from exc
    if not words:
        raise InputError(f"empty command: {line!r}")
    return words


def substitute(text: str, row: tuple[str, ...], seq: int, slot: int, *, quote: bool) -> str:
    def one(arg: str) -> str:
        return shlex.quote(arg) if quote else arg

    def repl(match: re.Match[str]) -> str:
        which, form = match.group(1), match.group(2) or ""
        if which == "#":
            return str(seq)
        if which == "%":
            return str(slot) if slot else match.group(0)  # bound when the job starts
        if which:
            index = int(which)
            if index < 1:
                raise InputError(f"{match.group(0)}: input sources are numbered from 1")
            if index > len(row):  # GNU parallel: a missing value is empty (-N, short rows)
                return "''" if quote else ""
            return one(_transform(row[index - 1], form))
        return " ".join(one(_transform(arg, form)) for arg in row)

    return _REPLACEMENT.sub(repl, text)


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
