"""Write the man pages pipepool.1 and pipepool-run.1 from the command's own parsers.

Usage: ``python scripts/manpages.py [OUTDIR]`` (default ``build/man``); setup.py runs it
at every build and installs the pages under ``share/man/man1``. The pages are
built from ``pipepool.cli.build_parser()`` at run time (descriptions, usage, every
option with its help, the epilog), plus the GNU parallel options ``pipepool run``
refuses (``pipepool.run._compat.REJECTED``, each with what to use instead), so a new
option shows up without anyone editing a page. A small generator rather than
argparse-manpage: that package renders one parser per page and has no place for the
refused options, which are hidden from ``--help`` but belong in the manual.
``tests/project/test_manpages.py`` checks that each page names every option.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

SECTION = "1"
MANUAL = "pipepool manual"


def _roff(text: str) -> str:
    """Escape text for roff: backslashes, and a leading dot or quote on a line."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    lines = []
    for line in text.splitlines():
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def _help(action: argparse.Action) -> str:
    """An action's help with argparse's %-expansion done (``%%`` -> ``%``)."""
    text = action.help or ""
    params = dict(vars(action), prog="")
    for name in list(params):
        if params[name] is argparse.SUPPRESS:
            params[name] = None
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    try:
        return text % params
    except (KeyError, TypeError, ValueError):
        return text


def _option_head(action: argparse.Action) -> str:
    """``-j N, -P N, --jobs N``: each spelling, bold, with its metavar in italics."""
    if not action.option_strings:
        return "\\fI" + _roff(action.metavar or action.dest) + "\\fR"
    takes_value = action.nargs != 0
    metavar = action.metavar or action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    parts = []
    for opt in action.option_strings:
        part = "\\fB" + _roff(opt) + "\\fR"
        if takes_value:
            part += " \\fI" + _roff(str(metavar)) + "\\fR"
        parts.append(part)
    return ", ".join(parts)


def _visible(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if a.help is not argparse.SUPPRESS and not isinstance(a, argparse._SubParsersAction)
    ]


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of ``parser`` by name (aliases left out)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {name: p for name, p in action.choices.items() if p.prog.endswith(name)}
    return {}


def _usage(parser: argparse.ArgumentParser) -> str:
    os.environ["COLUMNS"] = "78"  # argparse wraps usage to the terminal; a page is ~80
    usage = parser.format_usage().strip()
    return usage.removeprefix("usage: ")


def page(
    name: str,
    parser: argparse.ArgumentParser,
    summary: str,
    *,
    extra: list[tuple[str, str]] = (),  # type: ignore[assignment]
    date: str,
    version: str,
) -> str:
    """One man page (roff) for ``parser``: NAME, SYNOPSIS, DESCRIPTION, OPTIONS, extras."""
    out = [
        f'.TH "{name.upper()}" "{SECTION}" "{date}" "pipepool {version}" "{MANUAL}"',
        ".SH NAME",
        f"{_roff(name)} \\- {_roff(summary)}",
        ".SH SYNOPSIS",
        ".nf",
        _roff(_usage(parser)),
        ".fi",
    ]
    if parser.description:
        out += [".SH DESCRIPTION", _roff(" ".join(parser.description.split()))]
    subs = subparsers(parser)
    if subs:
        out.append(".SH COMMANDS")
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    out += [".TP", f"\\fB{_roff(choice.dest)}\\fR", _roff(choice.help or "")]
    positionals = [a for a in _visible(parser) if not a.option_strings]
    if positionals and not subs:
        out.append(".SH ARGUMENTS")
        for action in positionals:
            out += [".TP", _option_head(action), _roff(_help(action))]
    out.append(".SH OPTIONS")
    for action in _visible(parser):
        if action.option_strings:
            out += [".TP", _option_head(action), _roff(_help(action))]
    for section, body in extra:
        out += [f".SH {section}", body]
    if parser.epilog:
        out += [".SH NOTES", ".nf", _roff(parser.epilog.rstrip()), ".fi"]
    return "\n".join(out) + "\n"


def _refused() -> str:
    from pipepool.run._compat import REJECTED

    lines = [
        "GNU parallel options that pipepool run cannot honour stop it before anything "
        "runs, with a message that says what to use instead:"
    ]
    for option, instead in REJECTED.items():
        lines += [".TP", f"\\fB{_roff(option)}\\fR", _roff(instead)]
    return "\n".join(lines)


def _accepted_silently(parser: argparse.ArgumentParser) -> str:
    from pipepool.run._compat import REJECTED

    quiet = [
        opt
        for a in parser._actions
        if a.help is argparse.SUPPRESS
        for opt in a.option_strings
        if opt not in REJECTED
    ]
    return _roff(
        ", ".join(quiet) + ": accepted and ignored (pipepool run prints no citation notice)."
    )


RUN_GUIDE = Path(__file__).resolve().parent.parent / "docs" / "run.md"
DIFFERENT = "### Supported, but different"  # the guide's table the run page carries


def differences(guide: Path = RUN_GUIDE) -> list[tuple[str, str, str]]:
    """The rows (option, GNU parallel, pipepool run) of the run guide's table of options
    supported but different: one source for the guide and the page."""
    text = guide.read_text(encoding="utf-8")
    section = text.split(DIFFERENT, 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and line.startswith("|") and set(cells[0]) - set("- "):
            rows.append((cells[0], cells[1], cells[2]))
    return rows[1:]  # the header row left out


def _differences() -> str:
    lines = ["Options pipepool run supports, but where it differs from GNU parallel:"]
    for option, gnu, ours in differences():
        lines += [
            ".TP",
            "\\fB" + _roff(option.replace("`", "")) + "\\fR",
            _roff(f"GNU parallel: {gnu.replace('`', '')}; pipepool run: {ours.replace('`', '')}"),
        ]
    return "\n".join(lines)


def build(outdir: Path) -> list[Path]:
    """Write both pages into ``outdir``; returns their paths."""
    import pipepool
    from pipepool.cli import build_parser

    parser = build_parser()
    run = subparsers(parser)["run"]
    date = datetime.date.today().isoformat()
    if "SOURCE_DATE_EPOCH" in os.environ:  # reproducible builds
        stamp = int(os.environ["SOURCE_DATE_EPOCH"])
        date = datetime.datetime.fromtimestamp(stamp, datetime.UTC).date().isoformat()
    see_also = ".BR pipepool (1),\n.BR pipepool\\-run (1),\n.BR parallel (1)"
    pages = {
        "pipepool": page(
            "pipepool",
            parser,
            "a process pool whose parent never blocks on a pipe",
            extra=[
                (
                    "BENCH OPTIONS",
                    "\n".join(
                        ".TP\n" + _option_head(a) + "\n" + _roff(_help(a))
                        for a in _visible(subparsers(parser)["bench"])
                        if a.option_strings
                    ),
                ),
                ("SEE ALSO", see_also),
            ],
            date=date,
            version=pipepool.__version__,
        ),
        "pipepool-run": page(
            "pipepool-run",
            run,
            "run a batch of commands in parallel, the way GNU parallel does",
            extra=[
                ("DIFFERENCES FROM GNU PARALLEL", _differences()),
                ("REFUSED GNU PARALLEL OPTIONS", _refused()),
                ("IGNORED OPTIONS", _accepted_silently(run)),
                ("SEE ALSO", see_also),
            ],
            date=date,
            version=pipepool.__version__,
        ),
    }
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in pages.items():
        path = outdir / f"{name}.{SECTION}"
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write the man pages pipepool.1 and pipepool-run.1 from the command's "
        "own parsers (setup.py installs them under share/man/man1)."
    )
    parser.add_argument(
        "outdir",
        nargs="?",
        type=Path,
        default=Path("build/man"),
        help="the directory to write them into (default: build/man)",
    )
    args = parser.parse_args(argv)
    for path in build(args.outdir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
