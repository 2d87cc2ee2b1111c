"""The ``pipepool run`` command line: its options (GNU parallel's where they match, see
docs/run.md) and turning them into jobs and a Runner."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from .._cli_common import EXIT_ERROR, default_jobs, non_negative_int, positive_int

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
the full list of what matches GNU parallel and what differs: man pipepool-run

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
    _add_gnu_options(run)
    run.add_argument(
        "--no-shell",
        action="store_true",
        help="split each job with shlex and exec it directly, no /bin/sh -c",
    )
    run.add_argument(
        "--timeout",
        type=_timeout,
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
        "--json",
        action="store_true",
        help="print a JSON summary as the last line of stdout, a line of its own (after "
        "a newline if the jobs' output did not end with one)",
    )
    run.add_argument(
        "--pin",
        dest="cpus_per_job",
        action="store_const",
        const=1,
        help="give each job slot its own core (from the cores this process may use) "
        "and pin every job in it, its children included; -j at most the cores",
    )
    run.add_argument(
        "--cpus-per-job",
        dest="cpus_per_job",
        type=positive_int,
        metavar="K",
        help="as --pin, with K cores per job slot; -j at most cores/K",
    )
    run.add_argument(
        "--pin-reserve",
        action="store_true",
        help="with --pin: leave one core (an E-core if any) to pipepool itself, so the "
        "runner and its workers do not share the jobs' CPUs",
    )
    run.add_argument(
        "--lease",
        choices=("wait", "fail", "ignore"),
        default="wait",
        help="with --pin: CPUs another pipepool run has pinned are not used; too few "
        "free ones: wait for them (default), fail at once, or ignore the leases",
    )
    run.add_argument(
        "--noise-threshold",
        type=_fraction,
        default=0.5,
        metavar="F",
        help="with --pin or --repeat: call a job noisy when others took more than F "
        "(0-1) of its CPUs' time while it was not running (default 0.5)",
    )
    run.add_argument(
        "--wait-quiet",
        type=_timeout,
        metavar="MAX",
        help="before each job starts, wait until others use at most a quarter of its "
        "CPUs' time (its --pin CPUs, else all; /proc/stat over 0.25 s), at most MAX "
        "(seconds or 1m30s); --json's records say how long each waited",
    )
    run.add_argument(
        "--show-plan",
        action="store_true",
        help="print which CPUs each job slot of --pin/--cpus-per-job gets and what the "
        "slots share (cores, L3, NUMA node), then exit without running anything",
    )
    run.add_argument(
        "--sysfs-root",
        metavar="DIR",
        help="with --show-plan: read the topology from DIR/sys and DIR/proc (a tree "
        "captured from another machine) instead of this machine's",
    )
    run.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        metavar="N",
        help="run every job N times, the repetitions interleaved (all jobs, then all "
        "again); the summary gives each job's median and spread of wall time",
    )
    run.add_argument(
        "--compare",
        action="store_true",
        help="A/B: exactly two jobs (two commands, or one command with two values) and "
        "--repeat N; report B's median over A's with a 95%% bootstrap interval and a "
        "verdict ('no difference' when the interval holds 1)",
    )
    run.add_argument(
        "--export-pyperf",
        metavar="FILE",
        help="write every run's wall time to FILE in pyperf's JSON format (pyperf "
        "show/stats/compare_to read it), with the machine's metadata",
    )
    run.add_argument(
        "--export-hyperfine",
        metavar="FILE",
        help="write every job's times to FILE as hyperfine's --export-json does",
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
    return run


def run_command(args: argparse.Namespace, groups: list, parser: argparse.ArgumentParser) -> int:
    from ._compat import parse_delimiter, parse_jobs, parse_load
    from ._gate import GateError
    from ._inputs import InputError, Source, group_rows, rows_from_sources
    from ._joblog import JoblogError
    from ._runner import Runner, RunOptions
    from ._template import Template, build_jobs

    if args.resume and not args.joblog:
        parser.error("--resume and --resume-failed need --joblog FILE")
    if args.ungroup and (args.line_buffer or args.keep_order or args.results):
        parser.error("--ungroup writes straight to stdout: not with -k, --line-buffer or --results")
    if args.cluster is not None:
        local_only = [
            name
            for name, given in (
                ("--pin", args.cpus_per_job),
                ("--ungroup", args.ungroup),
                ("--load", args.load),
                ("--memfree", args.memfree),
            )
            if given
        ]
        if local_only:
            parser.error(
                f"{', '.join(local_only)} act on this machine, not on the cluster's "
                "workers: run without --cluster, or without them"
            )
    if (args.show_plan or args.pin_reserve) and not args.cpus_per_job:
        parser.error("--show-plan and --pin-reserve go with --pin or --cpus-per-job K")
    if args.sysfs_root and not args.show_plan:
        parser.error("--sysfs-root reads another machine's topology: only with --show-plan")
    cores = default_jobs()
    try:
        jobs_at_once = parse_jobs(args.jobs, cores) if args.jobs is not None else None
        load = parse_load(args.load, cores) if args.load is not None else None
        delimiter = b"\0" if args.null else None
        if args.delimiter is not None:
            delimiter = parse_delimiter(args.delimiter)
    except ValueError as exc:
        parser.error(str(exc))
    template_words = args.cmd
    if template_words and template_words[0] == "--":
        template_words = template_words[1:]
    template = Template(
        tuple(template_words),
        shell=not args.no_shell,
        quote=args.quote,
        tagstring=args.tagstring,
        append=args.max_args != 0,
    )
    try:
        # -a FILE is GNU parallel's :::: FILE, before the ::: sources; stdin is the
        # source only when there is no other
        sources = [Source("::::", [name]) for name in args.arg_file or ()] + list(groups)
        if not sources:
            _check_stdin()
            sources = [Source("::::", ["-"])]
        rows = rows_from_sources(sources, delimiter=delimiter, colsep=args.colsep, link=args.link)
        rows = group_rows(rows, args.max_args)
        if args.shuf:
            import random

            random.shuffle(rows)  # before numbering: {#} counts in run order, as GNU's
        jobs = build_jobs(template, rows, repeat=args.repeat)
    except InputError as exc:
        print(f"pipepool run: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.compare and (len(jobs) != 2 * args.repeat or args.repeat < 2):
        parser.error(
            f"--compare needs exactly two jobs (A and B) and --repeat N of at least 2; "
            f"got {len(jobs) // max(args.repeat, 1)} job(s) and --repeat {args.repeat}"
        )
    at_once = jobs_at_once or (cores if args.cluster in (None, "local") else 0)
    if args.show_plan:
        return _show_plan(args, at_once)
    if args.dry_run:  # print the commands, run nothing (slots as if run in order)
        for i, job in enumerate(jobs):
            print(job.bind_slot(i % max(at_once, 1) + 1).command)
        return 0
    if args.results:
        os.makedirs(args.results, exist_ok=True)
    options = RunOptions(
        jobs=at_once,
        cluster=args.cluster,
        timeout=args.timeout,
        retries=args.retries,
        keep_order=args.keep_order,
        tag=args.tag or args.tagstring is not None,
        results=args.results,
        joblog=args.joblog,
        resume=args.resume,
        joblog_fsync=args.joblog_fsync,
        progress=True if args.eta else args.progress,
        summary=args.summary,
        json=args.json,
        slots=template.uses_slot,
        cpus_per_job=args.cpus_per_job,
        pin_reserve=args.pin_reserve,
        lease=args.lease,
        noise_threshold=args.noise_threshold,
        wait_quiet=args.wait_quiet,
        delay=args.delay or 0.0,
        load=load,
        memfree=args.memfree,
        line_buffer=args.line_buffer,
        ungroup=args.ungroup,
        repeat=args.repeat,
        compare=args.compare,
    )
    if args.halt is not None:
        options.halt = args.halt
    try:
        runner = Runner(jobs, options)  # first: a -j that --pin cannot honour fails here
        summary = runner.run()
    except (OSError, ImportError, GateError, JoblogError) as exc:  # an unwritable joblog,
        # no scheduler at --cluster ADDRESS, --cluster without Dask installed (the message
        # says how), more -j than --pin has cores for, --resume on a file not a joblog
        print(f"pipepool run: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        _export(args, summary)
    except OSError as exc:
        print(f"pipepool run: cannot write the export: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        if args.json:  # the last line of stdout, whatever the jobs printed before it
            from ._machine import machine_metadata

            line = json.dumps({**summary.as_dict(), "machine": machine_metadata()}) + "\n"
            sys.stdout.write(line if runner.stdout_ends_line() else "\n" + line)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader left; the exit status still tells
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return summary.exit_status()


def _export(args: argparse.Namespace, summary) -> None:
    """--export-pyperf / --export-hyperfine: the run's times in their formats."""
    if not (args.export_pyperf or args.export_hyperfine):
        return
    from ._export import hyperfine_document, pyperf_document, write_json
    from ._machine import machine_metadata

    if args.export_pyperf:
        write_json(args.export_pyperf, pyperf_document(summary, machine_metadata()))
    if args.export_hyperfine:
        write_json(args.export_hyperfine, hyperfine_document(summary))


def _show_plan(args: argparse.Namespace, jobs: int) -> int:
    """``--show-plan``: the placement ``--pin`` would use, on stdout (JSON with --json)."""
    from ._lease import holders
    from ._placement import PlacementError, plan
    from ._topology import TopologyError, read_topology

    try:
        if args.sysfs_root:
            top = read_topology(args.sysfs_root)
        else:
            top = read_topology()
            if top.source == "sysctl":  # macOS: the counts, but nothing can be pinned
                top.notes.append("--pin is refused here: macOS has no CPU affinity API")
        placed = plan(top, jobs, args.cpus_per_job, reserve=args.pin_reserve)
    except (PlacementError, TopologyError) as exc:
        print(f"pipepool run: {exc}", file=sys.stderr)
        return EXIT_ERROR
    taken = [] if args.sysfs_root else holders(top.cpus)
    if taken and args.lease != "ignore":  # the plan --pin would get now: on the free CPUs
        with contextlib.suppress(PlacementError):
            free = top.restricted(set(top.cpus) - {h.cpu for h in taken})
            placed = plan(free, jobs, args.cpus_per_job, reserve=args.pin_reserve)
    if args.json:
        shown = placed.as_dict()
        shown["leased"] = [
            {"cpu": h.cpu, "pid": h.pid, "since": h.since, "command": h.command} for h in taken
        ]
        print(json.dumps(shown))
    else:
        sys.stdout.write(placed.text())
        if taken:
            print("  leased by other runs now (--pin takes the other CPUs, or waits):")
            for holder in taken:
                print(f"    {holder.describe()}")
    return 0


def _check_stdin() -> None:
    from ._inputs import InputError

    if sys.stdin is not None and sys.stdin.isatty():
        raise InputError(
            "no jobs: pipe them in one per line, use -a FILE, or give "
            "arguments after ::: (see pipepool run --help)"
        )


def _add_gnu_options(run: argparse.ArgumentParser) -> None:
    """GNU parallel's options that pipepool run honours as its documentation says (see
    docs/run.md), and the refused ones (``_compat.REJECTED``)."""
    from ._compat import add_rejected

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
    run.add_argument(
        "--delay",
        type=_duration,
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


def _timeout(text: str) -> float:
    if text.strip().endswith("%"):  # GNU parallel's --timeout N% of the median runtime
        raise argparse.ArgumentTypeError(
            f"{text}: a share of the median runtime is not supported; give seconds"
        )
    value = _duration(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 1") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, not {text}")
    return value


def _duration(text: str) -> float:
    from ._compat import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
