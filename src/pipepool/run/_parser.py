"""The ``pipepool run`` parser: its options (GNU parallel's where they match, see
docs/run.md), in groups of a few each; the measuring room adds its own group
(``pipepool.measure.add_options``)."""

from __future__ import annotations

import argparse

from .._cli_common import bound, duration, non_negative_int
from ..measure import add_options

RUN_EPILOG = """\
input:
  pipepool run < jobs.txt               one shell command per line
  pipepool run -a jobs.txt              the same, from a file
  pipepool run 'gzip {}' ::: *.log      one job per argument ({} is replaced)
  pipepool run 'cmd {1} {2}' ::: a b ::: 1 2   every combination (a 1, a 2, b 1, b 2)
  pipepool run 'cmd {1} {2}' ::: a b :::+ 1 2  linked pairs (a 1, b 2); --link wraps
  ls *.csv | pipepool run wc -l {}      a command, and arguments from stdin
replacement strings: {} {.} {/} {//} {/.} {#} {%} {N} (quoted for the shell)
GNU parallel options pipepool cannot honour are refused with what to use instead;
the full list of what matches GNU parallel and what differs: docs/run.md

exit status: 0 if every job succeeded, else the number of failed jobs (at most 101);
130 after Ctrl-C, 143 after SIGTERM, 255 if the run could not start.
Ctrl-C once: start no new job, let running ones finish; twice: kill them.
"""


def add_run_parser(sub) -> argparse.ArgumentParser:
    """Add ``run`` to the ``pipepool`` subcommands; return its parser."""
    run = sub.add_parser(
        "run",
        help="run a batch of commands in parallel (like GNU parallel)",
        description="Run one job per input line, or per argument after :::, in parallel.",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        short_usage="pipepool run [OPTIONS] [COMMAND [ARG ...]] [::: ARG ...]",
    )
    _add_input_options(run)
    _add_gnu_input_options(run)
    _add_gnu_flow_options(run)
    _add_running_options(run)
    _add_output_options(run)
    _add_report_options(run)
    add_options(run)  # the measuring room's own group
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
    return run


def _add_input_options(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "-j",
        "-P",
        "--jobs",
        "--max-procs",
        default=None,
        metavar="N",
        help="jobs at a time: N, +N or -N (cores plus or minus N), N%% of the cores "
        "(default: the cores this process may use, the affinity mask capped by a cgroup "
        "CPU quota; pipepool info says which decided)",
    )
    run.add_argument(
        "-a",
        "--arg-file",
        action="append",
        metavar="FILE",
        help="an input source: read jobs (or, with a command, its arguments) one per "
        "line from FILE ('-' for stdin) instead of stdin; repeat for more sources",
    )


def _add_running_options(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--no-shell",
        action="store_true",
        help="split each job with shlex and exec it directly, no /bin/sh -c",
    )
    run.add_argument(
        "--timeout",
        type=bound,
        metavar="SECS",
        help="kill a job's whole process group after SECS (30, 1.5s, 1m30s): SIGTERM, "
        "then SIGKILL if any of it is left 0.5 s later; it counts as failed (Exitval -1)",
    )
    run.add_argument(
        "--retries",
        type=non_negative_int,
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


def _add_output_options(run: argparse.ArgumentParser) -> None:
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


def _add_report_options(run: argparse.ArgumentParser) -> None:
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
        "--json",
        action="store_true",
        help="print a JSON summary as the last line of stdout, a line of its own (after "
        "a newline if the jobs' output did not end with one)",
    )


def _add_gnu_input_options(run: argparse.ArgumentParser) -> None:
    """GNU parallel's options that pipepool run honours as its documentation says (see
    docs/run.md): how input becomes jobs."""
    run.add_argument(
        "--colsep",
        "-C",
        metavar="REGEX",
        help="split each input line into columns {1} {2} ... at REGEX (blanks around "
        "each column trimmed)",
    )
    run.add_argument(
        "-N",
        "-n",
        "--max-args",
        "--max-replace-args",
        dest="max_args",
        type=non_negative_int,
        metavar="N",
        help="N arguments per job: {} is all of them, {1}..{N} each (0: read one, insert none)",
    )
    run.add_argument(
        "--link",
        "--xapply",
        action="store_true",
        help="link the input sources instead of combining them (shorter ones wrap)",
    )
    run.add_argument(
        "--tagstring",
        metavar="STR",
        help="prefix each output line with STR (replacement strings work) and a tab",
    )
    run.add_argument(
        "--dry-run", "--dryrun", action="store_true", help="print the commands, run nothing"
    )
    run.add_argument(
        "-0", "--null", action="store_true", help="input items end with NUL, not newline"
    )
    run.add_argument(
        "-d", "--delimiter", metavar="DELIM", help="input items end with DELIM (\\n, \\0, ...)"
    )
    run.add_argument(
        "-q",
        "--quote",
        action="store_true",
        help="quote the command's words too: each stays one word for the shell",
    )
    run.add_argument("--shuf", action="store_true", help="run the jobs in random order")


def _add_gnu_flow_options(run: argparse.ArgumentParser) -> None:
    """GNU parallel's options of when jobs start and how their output flows, and the
    refused ones (``_compat.REJECTED``)."""
    from ._compat import add_rejected

    run.add_argument(
        "--delay",
        type=duration,
        metavar="SECS",
        help="start no job within SECS of the previous one (30, 1m30s)",
    )
    output = run.add_mutually_exclusive_group()
    output.add_argument(
        "--line-buffer",
        "--linebuffer",
        "--lb",
        action="store_true",
        help="print each line as soon as it is complete (lines of jobs may mix)",
    )
    output.add_argument(
        "-u",
        "--ungroup",
        action="store_true",
        help="jobs write straight to stdout and stderr (output may mix mid-line)",
    )
    output.add_argument("--group", action="store_true", help="whole output per job (the default)")
    run.add_argument(
        "--eta", action="store_true", help="show the progress bar with its ETA on stderr"
    )
    run.add_argument(
        "--load",
        metavar="MAX",
        help="start no job while MAX or more processes are running (N, N%%, +N, -N)",
    )
    run.add_argument(
        "--memfree",
        type=_size,
        metavar="SIZE",
        help="start no job while less than SIZE memory is free (500M, 2G); below "
        "half of it kill the youngest job and run it again later",
    )
    for flag in ("--will-cite", "--no-notice", "--silent"):  # nothing to do: no notice
        run.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    add_rejected(run)


def _size(text: str) -> int:
    from ._compat import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _halt(text: str):
    from ._halt import parse_halt

    try:
        return parse_halt(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
