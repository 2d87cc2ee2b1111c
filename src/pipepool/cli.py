"""The ``pipepool`` command line: ``pipepool run`` (a batch of commands in parallel, the
way GNU parallel runs them) and ``pipepool bench`` (race pipepool against the standard
library's pools)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import NoReturn

EXIT_ERROR = 255  # the run could not start (as GNU parallel); 1-101 count failed jobs

RUN_EPILOG = """\
input:
  pipepool run < jobs.txt               one shell command per line
  pipepool run -a jobs.txt              the same, from a file
  pipepool run 'gzip {}' ::: *.log      one job per argument ({} is replaced)
  pipepool run 'cmd {1} {2}' ::: a b ::: 1 2   every combination (a 1, a 2, b 1, b 2)
  ls *.csv | pipepool run wc -l {}      a command, and arguments from stdin
replacement strings: {} {.} {/} {//} {/.} {#} {N} (quoted for the shell)

exit status: 0 if every job succeeded, else the number of failed jobs (at most 101);
130 after Ctrl-C, 143 after SIGTERM, 255 if the run could not start.
Ctrl-C once: start no new job, let running ones finish; twice: kill them.
"""


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

    run = sub.add_parser(
        "run",
        help="run a batch of commands in parallel (like GNU parallel)",
        description="Run one job per input line, or per argument after :::, in parallel.",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "-j",
        "--jobs",
        type=_positive_int,
        default=None,
        metavar="N",
        help="jobs at a time (default: the number of cores)",
    )
    run.add_argument(
        "-a",
        "--arg-file",
        metavar="FILE",
        help="read jobs (or, with a command, its arguments) one per line from "
        "FILE ('-' for stdin) instead of stdin",
    )
    run.add_argument(
        "--no-shell",
        action="store_true",
        help="split each job with shlex and exec it directly, no /bin/sh -c",
    )
    run.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="SECS",
        help="kill a job's whole process group after SECS (SIGTERM, then "
        "SIGKILL); it counts as failed (Exitval -1)",
    )
    run.add_argument(
        "--retries",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="run a failed job up to N more times (default 0)",
    )
    run.add_argument(
        "--halt",
        type=_halt,
        default=None,
        metavar="WHEN,WHAT=N",
        help="stop early: soon|now,fail|success|done=N or N%% (soon: start no "
        "new job; now: kill running ones too); default never",
    )
    run.add_argument(
        "-k",
        "--keep-order",
        action="store_true",
        help="print job outputs in input order, not completion order",
    )
    run.add_argument(
        "--tag",
        action="store_true",
        help="prefix each output line with the job's argument(s) and a tab",
    )
    run.add_argument(
        "--results",
        metavar="DIR",
        help="also keep each job's output in DIR/<seq>/stdout and stderr",
    )
    run.add_argument(
        "--joblog", metavar="FILE", help="log one row per finished job (GNU parallel's columns)"
    )
    resume = run.add_mutually_exclusive_group()
    resume.add_argument(
        "--resume",
        action="store_const",
        const="all",
        dest="resume",
        help="skip jobs that already have a row in --joblog",
    )
    resume.add_argument(
        "--resume-failed",
        action="store_const",
        const="failed",
        dest="resume",
        help="skip jobs whose --joblog row succeeded; rerun failed ones",
    )
    run.add_argument(
        "--joblog-fsync",
        action="store_true",
        help="fsync the joblog after each row (survives a power cut)",
    )
    run.add_argument(
        "--progress",
        "--bar",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="live progress bar on stderr (default: when stderr is a terminal)",
    )
    run.add_argument(
        "--no-summary",
        dest="summary",
        action="store_false",
        help="print no summary on stderr at the end",
    )
    run.add_argument(
        "--json", action="store_true", help="print a JSON summary as the last line of stdout"
    )
    run.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run the jobs on a Dask cluster: its scheduler's address "
        "(tcp://host:8786; -j defaults to its worker threads), or 'local' "
        "for -j worker processes on 127.0.0.1 (needs pipepool[dask])",
    )
    run.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="COMMAND",
        help="command template; {} is replaced by each argument",
    )

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
        return _run(args, groups, parser)
    except KeyboardInterrupt:  # before the runner took Ctrl-C over (reading stdin, say)
        print("pipepool run: interrupted before any job started", file=sys.stderr)
        return 130


def _run(
    args: argparse.Namespace, groups: list[tuple[str, list[str]]], parser: argparse.ArgumentParser
) -> int:
    from .run._inputs import (
        InputError,
        arg_rows_from_groups,
        build_jobs,
        resolve_groups,
    )
    from .run._runner import Runner, RunOptions

    if args.resume and not args.joblog:
        parser.error("--resume and --resume-failed need --joblog FILE")
    template = args.cmd
    if template and template[0] == "--":
        template = template[1:]
    try:
        if groups and args.arg_file:
            raise InputError("give arguments either after ::: or with -a FILE, not both")
        if groups:
            rows: list | None = arg_rows_from_groups(resolve_groups(groups))
            lines = None
        else:
            lines = _read_input(args.arg_file)
            rows = [(line,) for line in lines] if template else None
        jobs = build_jobs(template, rows, lines, shell=not args.no_shell)
    except InputError as exc:
        print(f"pipepool run: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.results:
        os.makedirs(args.results, exist_ok=True)
    at_once = args.jobs or (default_jobs() if args.cluster in (None, "local") else 0)
    options = RunOptions(
        jobs=at_once,
        cluster=args.cluster,
        timeout=args.timeout,
        retries=args.retries,
        keep_order=args.keep_order,
        tag=args.tag,
        results=args.results,
        joblog=args.joblog,
        resume=args.resume,
        joblog_fsync=args.joblog_fsync,
        progress=args.progress,
        summary=args.summary,
        json=args.json,
    )
    if args.halt is not None:
        options.halt = args.halt
    try:
        summary = Runner(jobs, options).run()
    except (OSError, ImportError) as exc:  # an unwritable joblog, no scheduler at
        # --cluster ADDRESS, or --cluster without Dask installed (the message says how)
        print(f"pipepool run: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        if args.json:
            sys.stdout.flush()
            print(json.dumps(summary.as_dict()))
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader left; the exit status still tells
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return summary.exit_status()


def _read_input(name: str | None) -> list[str]:
    from .run._inputs import InputError, read_lines

    if name is None or name == "-":
        if name is None and sys.stdin is not None and sys.stdin.isatty():
            raise InputError(
                "no jobs: pipe them in one per line, use -a FILE, or give "
                "arguments after ::: (see pipepool run --help)"
            )
        if sys.stdin is None:
            return []
        return read_lines(sys.stdin.buffer)
    try:
        with open(name, "rb") as f:
            return read_lines(f)
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror}") from exc


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def _halt(text: str):
    from .run._halt import parse_halt

    try:
        return parse_halt(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


if __name__ == "__main__":
    sys.exit(main())
