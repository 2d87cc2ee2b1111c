"""The ``pipepool`` command line: ``pipepool run`` (a batch of commands in parallel, the
way GNU parallel runs them) and ``pipepool bench`` (race pipepool against the standard
library's pools)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

EXIT_ERROR = 255  # the run could not start (as GNU parallel); 1-101 count failed jobs


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pipepool", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    from .run._cli import add_run_parser

    add_run_parser(sub)
    bench = sub.add_parser("bench", help="race pipepool against the standard library's pools")
    bench.add_argument("--tasks", type=int, default=20000, help="no-op tasks per round")
    bench.add_argument("-j", "--jobs", type=int, default=None, help="workers (default: cores)")
    bench.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    bench.add_argument(
        "--full",
        nargs=argparse.REMAINDER,
        metavar="SUITE_ARGS",
        help="run the full suite of benchmarks/ instead (only where this pipepool "
        "runs from a source checkout, whose suite it runs; never from the current "
        "directory); the arguments after --full go to it: --quick, "
        "--only MEASURE ..., --out DIR (see --full --help)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from .run._inputs import split_groups

    head, groups = split_groups(argv)  # argparse cannot parse ":::"; it sees the head only
    if head[:1] == ["run"]:
        from .run._compat import join_negative_values

        head = join_negative_values(head)
    parser = build_parser()
    args = parser.parse_args(head)
    if args.command == "bench":
        if groups:
            parser.error("bench takes no ::: arguments")
        if args.full is not None:
            from ._bench import run_suite

            return run_suite(args.full)
        from ._bench import race

        race(args.tasks, args.jobs, args.rounds)
        return 0
    try:
        from .run._cli import run_command

        return run_command(args, groups, parser)
    except KeyboardInterrupt:  # before the runner took Ctrl-C over (reading stdin, say)
        print("pipepool run: interrupted before any job started", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
