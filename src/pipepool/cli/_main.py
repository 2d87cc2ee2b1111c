"""The ``pipepool`` command line: ``pipepool run`` (a batch of commands in parallel, the
way GNU parallel runs them), ``pipepool bench`` (race pipepool against the standard
library's pools) and ``pipepool info``. This module only builds the top of the parser and
dispatches; what the subcommands share is in ``pipepool._cli_common``, ``run`` is the
``run/`` room's face, ``bench`` is ``_bench``."""

from __future__ import annotations

import argparse
import sys

from .._cli_common import Parser, positive_int

DESCRIPTION = """\
pipepool run runs a batch of shell commands in parallel, the way GNU parallel does;
pipepool bench races pipepool against the standard library's process pools;
pipepool info says what this machine gives pipepool (how many workers by default, and why).
"""

BENCH_DESCRIPTION = """\
Race pipepool against the standard library's process pools (concurrent.futures and
multiprocessing.Pool) on a built-in workload: many no-op tasks, so what is measured is
each pool's own cost per task (dispatch, pipes, pickling, bookkeeping). Every contender
runs once per round, the rounds interleaved; the median tasks/s of each is printed. The
full benchmark suite lives in the source repository: python -m benchmarks, from a
checkout.
"""


def build_parser() -> Parser:
    from .. import IMPLEMENTATION, __version__
    from ..run import add_run_parser

    parser = Parser(
        prog="pipepool",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        short_usage="pipepool {run,bench,info} ...",
    )
    loop = "compiled" if IMPLEMENTATION == "cython" else "pure-Python"
    parser.add_argument(
        "--version", action="version", version=f"pipepool {__version__} ({loop} loop)"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    run = add_run_parser(sub)
    bench = sub.add_parser(
        "bench",
        help="race pipepool against the standard library's pools",
        description=BENCH_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument(
        "--tasks",
        type=positive_int,
        default=20000,
        metavar="N",
        help="no-op tasks per round (default: %(default)s)",
    )
    bench.add_argument(
        "-j",
        "--jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="workers per pool (default: the number of cores)",
    )
    bench.add_argument(
        "--rounds",
        type=positive_int,
        default=3,
        metavar="N",
        help="interleaved rounds; each contender's median is shown (default: %(default)s)",
    )
    bench.add_argument("--full", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    info = sub.add_parser(
        "info",
        help="how many workers by default and why, the loop, the Python",
        description="Print what pipepool sees here: its version and loop, the Python, "
        "the default start method, and how many workers every face starts by default "
        "with the limit that decided it (affinity mask or cgroup CPU quota).",
    )
    parser.commands.update(run=run, bench=bench, info=info)
    return parser


def info_text() -> str:
    """``pipepool info``: one ``name: value`` line per fact."""
    import multiprocessing
    import platform

    from .. import IMPLEMENTATION, __version__
    from .._cpus import available_cpus

    workers, reason = available_cpus()
    return "\n".join(
        [
            f"pipepool: {__version__}",
            f"loop: {'compiled' if IMPLEMENTATION == 'cython' else 'pure-Python'}",
            f"python: {platform.python_implementation()} {platform.python_version()}",
            f"start method: {multiprocessing.get_start_method(allow_none=False)}",
            f"default workers: {workers}",
            f"because: {reason}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from ..run import split_groups

    head, groups = split_groups(argv)  # argparse cannot parse ":::"; it sees the head only
    if head[:1] == ["run"]:
        from ..run import join_negative_values

        head = join_negative_values(head)
    parser = build_parser()
    args, unknown = parser.parse_known_args(head)
    command = parser.commands[args.command]
    if unknown:  # the subcommand's usage, not the top-level one argparse would print
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "info":
        if groups:
            command.error("info takes no ::: arguments")
        print(info_text())
        return 0
    if args.command == "bench":
        if args.full is not None:
            command.error(
                "--full was removed: the full benchmark suite is development tooling that "
                "ships with the source, not with the package; from a checkout run "
                "python -m benchmarks (--quick, --only MEASURE ..., --out DIR)"
            )
        if groups:
            command.error("bench takes no ::: arguments")
        from ._bench import race

        race(args.tasks, args.jobs, args.rounds)
        return 0
    try:
        from ..run import run_command

        return run_command(args, groups, command)
    except KeyboardInterrupt:  # before the runner took Ctrl-C over (reading stdin, say)
        print("pipepool run: interrupted before any job started", file=sys.stderr)
        return 130
