"""The ``pipepool run`` command: check the usage (its parser is ``_parser``), make the
jobs, the runner and the measuring room (``pipepool.measure``), run, and report (the
summary, the exports, the ``--json`` line)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from .._cli_common import (
    EXIT_ERROR,
    OutputPathError,
    check_file,
    default_jobs,
    make_directory,
)
from ..measure import MeasureOptions

if TYPE_CHECKING:
    from ..measure import Measurement
    from ._options import RunOptions
    from ._runner import Runner
    from ._summary import Summary
    from ._template import Job, Template


def run_command(args: argparse.Namespace, groups: list, parser: argparse.ArgumentParser) -> int:
    from ..measure import MeasureError, Measurement
    from ._gate import GateError
    from ._inputs import InputError
    from ._joblog import JoblogError
    from ._runner import Runner

    measuring = MeasureOptions.from_args(args)
    _check_usage(args, measuring, parser)
    cores = default_jobs()
    try:
        jobs_at_once, load, delimiter = _numbers(args, cores)
    except ValueError as exc:  # -j, --load, -d
        parser.error(str(exc))
    template = _template(args)
    try:
        jobs = _jobs(args, groups, template, delimiter, measuring.repeat)
    except InputError as exc:
        print(f"pipepool run: {exc}", file=sys.stderr)
        return EXIT_ERROR
    refused = measuring.jobs_error(len(jobs))
    if refused is not None:
        parser.error(refused)
    at_once = jobs_at_once or (cores if args.cluster in (None, "local") else 0)
    if args.show_plan:
        return _show_plan(measuring, at_once, args.json)
    if args.dry_run:  # print the commands, run nothing (slots as if run in order)
        for i, job in enumerate(jobs):
            print(job.bind_slot(i % max(at_once, 1) + 1).command)
        return 0
    measurement = Measurement(measuring)
    try:
        _check_outputs(args)
        measurement.check_outputs()
    except OutputPathError as exc:
        print(f"pipepool run: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        options = _run_options(args, at_once, load, template)
        runner = Runner(jobs, options, measuring=measurement)  # a -j --pin cannot honour
        summary = runner.run()  # fails here, first
    except (OSError, ImportError, GateError, JoblogError, MeasureError) as exc:
        # an unwritable joblog, no scheduler at --cluster ADDRESS, --cluster without
        # Dask installed (the message says how), more -j than --pin has cores for,
        # --resume on a file not a joblog
        print(f"pipepool run: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return _report(args, summary, runner, measurement)


def _check_usage(
    args: argparse.Namespace, measuring: MeasureOptions, parser: argparse.ArgumentParser
) -> None:
    """Refuse (a usage error, exit 255) options that do not go together."""
    if args.resume and not args.joblog:
        parser.error("--resume and --resume-failed need --joblog FILE")
    if args.ungroup and (args.line_buffer or args.keep_order or args.results):
        parser.error("--ungroup writes straight to stdout: not with -k, --line-buffer or --results")
    if args.cluster is not None:
        local_only = [*measuring.local_only] + [
            name
            for name, given in (
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
    refused = measuring.usage_error()
    if refused is not None:
        parser.error(refused)


def _numbers(args: argparse.Namespace, cores: int) -> tuple[int | None, float | None, bytes | None]:
    """``-j``, ``--load`` and the input delimiter (``-0``, ``-d``); ValueError with a
    message for the user."""
    from ._compat import parse_delimiter, parse_jobs, parse_load

    jobs_at_once = parse_jobs(args.jobs, cores) if args.jobs is not None else None
    load = parse_load(args.load, cores) if args.load is not None else None
    delimiter = b"\0" if args.null else None
    if args.delimiter is not None:
        delimiter = parse_delimiter(args.delimiter)
    return jobs_at_once, load, delimiter


def _template(args: argparse.Namespace) -> Template:
    from ._template import Template

    words = args.cmd
    if words and words[0] == "--":
        words = words[1:]
    return Template(
        tuple(words),
        shell=not args.no_shell,
        quote=args.quote,
        tagstring=args.tagstring,
        append=args.max_args != 0,
    )


def _jobs(
    args: argparse.Namespace,
    groups: list,
    template: Template,
    delimiter: bytes | None,
    repeat: int,
) -> list[Job]:
    """The jobs the input sources make (InputError: a source cannot be read)."""
    from ._inputs import Source, group_rows, rows_from_sources
    from ._template import build_jobs

    # -a FILE is GNU parallel's :::: FILE, before the ::: sources; stdin is the source
    # only when there is no other
    sources = [Source("::::", [name]) for name in args.arg_file or ()] + list(groups)
    if not sources:
        _check_stdin()
        sources = [Source("::::", ["-"])]
    rows = rows_from_sources(sources, delimiter=delimiter, colsep=args.colsep, link=args.link)
    rows = group_rows(rows, args.max_args)
    if args.shuf:
        import random

        random.shuffle(rows)  # before numbering: {#} counts in run order, as GNU's
    return build_jobs(template, rows, repeat=repeat)


def _show_plan(measuring: MeasureOptions, jobs: int, as_json: bool) -> int:
    """``--show-plan``: the placement ``--pin`` would use, and nothing run."""
    from ..measure import MeasureError, show_plan

    try:
        show_plan(measuring, jobs, as_json)
    except MeasureError as exc:
        print(f"pipepool run: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def _check_outputs(args: argparse.Namespace) -> None:
    """The files and directories the runner writes, checked before the first job runs."""
    if args.results:
        make_directory("--results", args.results)
    if args.joblog:
        check_file("--joblog", args.joblog)


def _run_options(
    args: argparse.Namespace, jobs: int, load: float | None, template: Template
) -> RunOptions:
    from ._options import RunOptions

    options = RunOptions(
        jobs=jobs,
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
        delay=args.delay or 0.0,
        load=load,
        memfree=args.memfree,
        line_buffer=args.line_buffer,
        ungroup=args.ungroup,
    )
    if args.halt is not None:
        options.halt = args.halt
    return options


def _report(
    args: argparse.Namespace, summary: Summary, runner: Runner, measurement: Measurement
) -> int:
    """After the run: the exports, the ``--json`` line (always, even when an export
    failed), and the exit status."""
    failures = measurement.export(summary.outcomes)  # checked before the run: gone since
    try:
        if args.json:  # the last line of stdout, whatever the jobs printed before it
            from ..measure import machine_metadata

            line = json.dumps({**summary.as_dict(), "machine": machine_metadata()}) + "\n"
            sys.stdout.write(line if runner.stdout_ends_line() else "\n" + line)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader left; the exit status still tells
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    for failure in failures:  # after the JSON line: the run's results are not lost
        print(f"pipepool run: {failure}", file=sys.stderr)
    return EXIT_ERROR if failures else summary.exit_status()


def _check_stdin() -> None:
    from ._inputs import InputError

    if sys.stdin is not None and sys.stdin.isatty():
        raise InputError(
            "no jobs: pipe them in one per line, use -a FILE, or give "
            "arguments after ::: (see pipepool run --help)"
        )
