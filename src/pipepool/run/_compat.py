"""GNU parallel's option syntax where pipepool run shares it, and the options it refuses.

An option GNU parallel users type that pipepool cannot honour is refused before anything
runs, with a message that names it and says what to use instead: never ignored, never
"unrecognized arguments". ``docs/run.md`` lists the same table for people.
"""

from __future__ import annotations

import argparse
import os
import re

from ..measure import NUMBER_OPTIONS

_REMOTE = "pipepool runs jobs on this machine or on a Dask cluster: use --cluster ADDRESS"
_PIPE = (
    "pipepool runs one job per argument, not per block of stdin: split the input first "
    "(split -n l/N FILE chunk.) and run one job per chunk (::: chunk.*)"
)

# option -> what to use instead. Options taking a value are listed as they are spelled;
# "--opt=value" is matched too.
REJECTED: dict[str, str] = {
    "--pipe": _PIPE,
    "--spreadstdin": _PIPE,
    "--pipepart": _PIPE,
    "--pipe-part": _PIPE,
    "--block": _PIPE,
    "--block-size": _PIPE,
    "--blocksize": _PIPE,
    "--recstart": _PIPE,
    "--recend": _PIPE,
    "--regexp": _PIPE,
    "--round-robin": _PIPE,
    "--roundrobin": _PIPE,
    "--cat": _PIPE,
    "--fifo": _PIPE,
    "--tee": _PIPE,
    "--sshlogin": _REMOTE,
    "-S": _REMOTE,
    "--slf": _REMOTE,
    "--sshloginfile": _REMOTE,
    "--transferfile": _REMOTE,
    "--transfer": _REMOTE,
    "--return": _REMOTE,
    "--cleanup": _REMOTE,
    "--trc": _REMOTE,
    "--basefile": _REMOTE,
    "--bf": _REMOTE,
    "--onall": _REMOTE,
    "--nonall": _REMOTE,
    "--workdir": _REMOTE + " (and cd in the command for a working directory)",
    "--wd": _REMOTE + " (and cd in the command for a working directory)",
    "--env": "jobs inherit pipepool's environment: export the variable before running",
    "--semaphore": "use flock(1) to serialize commands",
    "--sem": "use flock(1) to serialize commands",
    "--fg": "use flock(1) to serialize commands",
    "--bg": "use flock(1) to serialize commands",
    "-m": "use -N N to put N arguments in each job",
    "-X": "use -N N to put N arguments in each job",
    "--xargs": "use -N N to put N arguments in each job",
    "--header": "drop the header yourself (tail -n +2 FILE) and use {1} {2}",
    "--csv": "use --colsep , (quoted fields are not parsed)",
    "--tmux": "use --results DIR and follow the files (tail -f DIR/*/stdout)",
    "--tmuxpane": "use --results DIR and follow the files (tail -f DIR/*/stdout)",
    "--interactive": "jobs get no terminal; run the command directly",
    "-p": "jobs get no terminal; run the command directly",
    "--tty": "jobs get no terminal; run the command directly",
    "--files": "use --results DIR (DIR/<seq>/stdout)",
    "--compress": "output is kept uncompressed in $TMPDIR",
    "--plus": "use the replacement strings pipepool knows (see pipepool run --help)",
    "--rpl": "use the replacement strings pipepool knows (see pipepool run --help)",
    "-I": "use {} (pipepool's replacement string cannot be renamed)",
    "-i": "use {} (pipepool's replacement string cannot be renamed)",
    "--replace": "use {} (pipepool's replacement string cannot be renamed)",
    "--retry-failed": "use --joblog FILE --resume-failed with the same input",
    "--memsuspend": "use --memfree SIZE (start no job below SIZE free)",
    "--term-seq": "a timed-out job gets SIGTERM, then SIGKILL 0.5 s later",
    "--nice": "run pipepool itself under nice: nice -n N pipepool run ...",
    "--sqlmaster": "use --joblog FILE or --results DIR",
    "--sqlworker": "use --joblog FILE or --results DIR",
    "--sqlandworker": "use --joblog FILE or --results DIR",
    "--verbose": "use --dry-run to see the commands, --joblog to log them",
    "-v": "use --dry-run to see the commands, --joblog to log them",
    "-t": "use --dry-run to see the commands, --joblog to log them",
    "--limit": "use --load MAX or --memfree SIZE",
    "--shellquote": "use -q, or quote the values yourself",
    "--shell-quote": "use -q, or quote the values yourself",
    "--noswap": "use --memfree SIZE (start no job below SIZE free)",
    "--arg-sep": "::: is the only argument separator; quote a literal ::: in the command",
    "--argsep": "::: is the only argument separator; quote a literal ::: in the command",
    "--arg-file-sep": ":::: is the only file separator",
    "--argfilesep": ":::: is the only file separator",
    "-E": "cut the input first (sed '/^stop$/q')",
    "--eof": "cut the input first (sed '/^stop$/q')",
    "--use-cpus-instead-of-cores": "give -j a number",
    "--ctagstring": "use --tagstring (without colour)",
    "--slotreplace": "use {%}",
    "--seqreplace": "use {#}",
}


def add_rejected(parser: argparse.ArgumentParser) -> None:
    """Register every refused option on ``parser`` (as one argument: argparse's cost is
    per argument): seeing one stops parsing with its message (argparse then exits 255
    through the parser's ``error``)."""
    # nargs="?": "--sshlogin=host" must reach the refusal too (nargs=0 makes argparse
    # stop at "ignored explicit argument" first, without the reason).
    parser.add_argument(
        *REJECTED, action=_Refuse, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )


class _Refuse(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        name = option_string or self.option_strings[0]
        parser.error(f"{name} (GNU parallel) is not supported by pipepool run: {REJECTED[name]}")


_NUMBER_OPTIONS = (
    *("-j", "-P", "--jobs", "--max-procs", "--load", "--halt"),
    # and every other option that takes a number: ``--retries -1`` is then refused for
    # its value ("must be 0 or more"), not as "expected one argument"; the measuring
    # room names its own (``--repeat``, ``--wait-quiet`` ...)
    *("--retries", "--timeout", "--delay", "--memfree"),
    *("-N", "-n", "--max-args", "--max-replace-args"),
    *NUMBER_OPTIONS,
)


def join_negative_values(head: list[str]) -> list[str]:
    """``-j -1`` as ``-j=-1``: with ``-0`` among its options argparse takes ``-1`` for
    an option, while GNU parallel reads it as "one less than the cores" (and
    ``--halt -1`` as ``soon,success=1``)."""
    out: list[str] = []
    words = iter(head)
    for word in words:
        if word in _NUMBER_OPTIONS:
            value = next(words, None)
            # a negative number, or a negative duration (-1m30s): refused for its value
            if value is not None and re.fullmatch(r"-\.?\d[\d.a-z]*%?", value):
                out.append(f"{word}={value}")
                continue
            out.append(word)
            if value is not None:
                out.append(value)
            continue
        out.append(word)
    return out


def parse_jobs(text: str, cores: int) -> int:
    """``-j``/``--load`` in GNU parallel's syntax: N, +N and -N (cores plus or minus N),
    N% (of the cores). ValueError with a usable message."""
    match = re.fullmatch(r"([+-]?)(\d+(?:\.\d+)?)(%?)", text.strip())
    if not match:
        raise ValueError(f"{text!r}: expected N, +N, -N or N%")
    sign, number, percent = match.groups()
    value = float(number)
    if percent:
        return max(int(cores * value / 100), 1)
    if sign == "+":
        return cores + int(value)
    if sign == "-":
        return max(cores - int(value), 1)
    if value < 1:
        raise ValueError(
            f"{text!r}: -j 0 (GNU parallel: as many as possible) is not supported; give a number"
        )
    return int(value)


def parse_load(text: str, cores: int) -> float:
    """``--load``: the syntax of -j, but 0 means 0.01 (GNU parallel) and N may be a
    fraction."""
    try:
        value = float(text)
    except ValueError:
        return float(parse_jobs(text, cores))
    if value < 0:
        raise ValueError(f"{text!r}: must be 0 or more")
    return value or 0.01


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_size(text: str) -> int:
    """``--memfree`` sizes: bytes, or with K M G T P (any case; powers of 1024, as
    GNU parallel's UNIT PREFIX for memory)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgtpKMGTP]?)[bB]?", text.strip())
    if not match:
        raise ValueError(f"{text!r}: expected a size such as 500M or 2G")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_delimiter(text: str) -> bytes:
    """``-d``: a character, or a C escape (``\\n``, ``\\t``, ``\\0``, ``\\x1f``, ``\\037``)."""
    try:
        value = text.encode("latin-1").decode("unicode_escape")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{text!r}: {exc.reason}") from None
    if not value:
        raise ValueError("the delimiter is empty")
    return os.fsencode(value)
