"""Input sources: what the arguments of each job are, the way GNU parallel reads them.

* ``::: a b c`` is a source of words, ``:::: FILE`` (and ``-a FILE``) a source of the
  file's items; several sources combine as a cartesian product, the first varying
  slowest. ``:::+``/``::::+`` link a source to the previous one instead (the shortest
  decides the length); ``--link`` links them all (shorter ones wrap around).
* Items end with a newline, or with ``-0``/``-d DELIM`` with that delimiter.
* ``--colsep REGEX`` splits every item into columns (trimmed of surrounding blanks), so
  a source yields several of ``{1}``, ``{2}``, ...; ``-N N`` puts N items per job.

A *row* is the tuple of values one job gets: ``{1}``..``{n}`` index it, ``{}`` is all
of it. Turning rows and a template into commands is ``_template``'s job.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SOURCE_SEPARATORS = (":::", "::::", ":::+", "::::+")


class InputError(ValueError):
    """The job list cannot be built (a message for the user, no traceback)."""


@dataclass(frozen=True, slots=True)
class Source:
    """One input source: ``sep`` is how it was given (``:::``, ``::::+``...)."""

    sep: str
    words: list[str]

    @property
    def linked(self) -> bool:  # :::+ and ::::+ link to the previous source
        return self.sep.endswith("+")

    @property
    def from_files(self) -> bool:
        return self.sep.startswith("::::")


def split_groups(argv: Sequence[str]) -> tuple[list[str], list[Source]]:
    """Split ``argv`` at ``:::``/``::::``/``:::+``/``::::+`` into the part before and
    the sources after it."""
    head: list[str] = []
    groups: list[Source] = []
    for word in argv:
        if word in SOURCE_SEPARATORS:
            groups.append(Source(word, []))
        elif groups:
            groups[-1].words.append(word)
        else:
            head.append(word)
    return head, groups


def read_items(data: bytes, delimiter: bytes | None = None) -> list[str]:
    """Split input into items. Newline-ended lines by default (blank ones skipped, a
    trailing ``\\r`` dropped); with a delimiter (``-0``: NUL) every item as it is, only
    an empty last one (after the final delimiter) dropped."""
    if delimiter is not None:
        items = data.split(delimiter)
        if items and items[-1] == b"":
            items.pop()
        return [os.fsdecode(item) for item in items]
    lines = []
    for raw in data.split(b"\n"):
        line = os.fsdecode(raw).rstrip("\r")
        if line.strip():
            lines.append(line)
    return lines


def read_lines(stream: Iterable[bytes | str]) -> list[str]:
    """Non-blank lines, without their newline (bytes decoded as the filesystem does)."""
    lines = []
    for raw in stream:
        line = os.fsdecode(raw) if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        if line.strip():
            lines.append(line)
    return lines


def read_source_file(name: str, delimiter: bytes | None) -> list[str]:
    """The items of FILE (``-`` is stdin)."""
    try:
        if name == "-":
            return read_items(sys.stdin.buffer.read() if sys.stdin else b"", delimiter)
        with open(name, "rb") as f:
            return read_items(f.read(), delimiter)
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror}") from exc


def rows_from_sources(
    sources: list[Source],
    *,
    delimiter: bytes | None = None,
    colsep: str | None = None,
    link: bool = False,
) -> list[tuple[str, ...]]:
    """Every job's row, in GNU parallel's order."""
    split = _column_splitter(colsep)
    values: list[list[tuple[str, ...]]] = []
    for source in sources:
        items = source.words
        if source.from_files:
            items = [i for name in source.words for i in read_source_file(name, delimiter)]
        values.append([split(item) for item in items])
    if not values:
        return []
    if link:  # --link: one row per item of the longest source; shorter ones wrap
        longest = max(len(v) for v in values)
        if any(not v for v in values):
            return []
        return [_flat(v[i % len(v)] for v in values) for i in range(longest)]
    blocks: list[list[tuple[str, ...]]] = []
    for source, vals in zip(sources, values, strict=True):
        if source.linked and blocks:  # :::+ : zip with the previous, the shortest wins
            blocks[-1] = [a + b for a, b in zip(blocks[-1], vals, strict=False)]
        else:
            blocks.append(vals)
    return [_flat(combo) for combo in itertools.product(*blocks)]


def group_rows(rows: list[tuple[str, ...]], per_job: int | None) -> list[tuple[str, ...]]:
    """``-N N``: N rows per job, flattened (the last job may get fewer); ``-N 0``: one
    row per job, none of it inserted."""
    if per_job is None:
        return rows
    if per_job == 0:
        return [() for _ in rows]
    return [_flat(rows[i : i + per_job]) for i in range(0, len(rows), per_job)]


def _column_splitter(colsep: str | None):
    if colsep is None:
        return lambda item: (item,)
    try:
        pattern = re.compile(colsep)
    except re.error as exc:
        raise InputError(f"--colsep {colsep!r} is not a regular expression: {exc}") from None
    # --colsep implies GNU parallel's --trim rl: blanks around each column go
    return lambda item: tuple(col.strip(" \t") for col in pattern.split(item))


def _flat(parts: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(value for part in parts for value in part)
