"""The benchmark suite: pipepool against the pools a user would pick instead, in one run.

Measures (the registry: ``config.MEASURE_INFO``; at each parallelism of
``--parallelism``, 2 and 8 by default, where they take one):

===========  ==========================================================================
tiny         20,000 no-op calls submitted one by one and all collected: tasks/s, and the
             CPU time per task of the parent (all its threads) and of the workers
mib          200 tasks each returning 1 MiB: MB/s (10^6 bytes), beside the copy bound
kib64        2,000 tasks each sending 64 KiB: MB/s
latency      one no-op at a time, 2,000 round trips: p50 and p99 in µs
startup      pool construction + first result, with fork, forkserver and spawn: ms
startup-map  pool made, map of 200 no-op calls, shutdown(wait=True) returned, per start
             method, p=2: ms (``pool_life.py``)
recycle      max_tasks_per_child=1, one worker, tasks whose module imports numpy: the
             gap from one task's end to the next one's start, per start method
             (``pool_life.py``)
idle         36 tasks of 0.05-0.3 s on 2 workers, waited on: the parent's voluntary
             context switches per second (``idle.py``)
calls        Python-level calls per task in the parent over a tiny-task batch (a profile
             function in every parent thread): a count, which load does not move
sweep        tiny tasks (fewer per point) at parallelism 1, 2, 4, ... 64: tasks/s
hol          one 10 s task, then 1,000 tasks of 1 ms, on 4 workers: seconds until the
             short ones are done (head-of-line blocking), on a fresh pool (cold) and on
             one that ran no-ops first (warm: an adaptive dispatch depth has seen tiny
             tasks)
map          one chunked map of 1,000,000 no-op calls from a list at p=2: 10,000 per
             chunk for every pool with a map, the automatic default of
             multiprocessing.Pool and mpire, two iterables (a pair per call), and the
             serialization floor (no pool): items/s and CPU per item
timeouts     a burst of 16 tasks of 30 s each limited to 0.2 s, at p=2: seconds until
             all have failed (with_options(timeout=), pebble's schedule(timeout=),
             mpire's task_timeout)
cancel       Future.cancel() of a future handed over and not started (pipepool's only)
joblib-*     joblib's Parallel(n_jobs=2), backend "pipepool" vs "loky"
             (``joblib_adapters.py``): tiny calls (and joblib's sequential backend, what
             the backends' overhead is counted above), 1 MiB numpy results, 100 MB
             numpy results and arguments (memmapped by both)
===========  ==========================================================================

Every measure runs its contenders interleaved (round 1: A B C, round 2: B C A, ...),
each sample on a fresh pool whose workers are up before the clock starts (except for
the start-up measures), and reports medians: on a shared machine noise then hits
everyone alike. Contenders whose package is missing (loky, mpire, pebble, zooparallel)
or that the interpreter lacks (InterpreterPoolExecutor before 3.14) are skipped with a
note.

This module is the command line and the machine's state; ``benchmarks/__init__.py``
names the other modules and how a family of measures is added.

Every run records how busy the machine was (``benchmarks/_noise.py``): the 1-minute load
average at its start and end, and the CPU time other processes used while it ran. A run
on a busy machine is marked noisy in its header, its full-configuration results go to
``benchmarks/results/noisy/`` instead of replacing the published ones, and it never
rewrites the README's table (``--readme``, ``benchmarks/readme.py``). It also records
how steady the machine's speed was: a speed probe before every sample, their spread in
the header (``_noise.steadiness``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import platform
import shlex
import subprocess
import sys
import time
from typing import Any

import pipepool

from . import _noise, readme, report
from .config import MEASURE_INFO, MEASURES, PRESETS, START_METHODS, Config
from .contenders import (
    pipepool_map_auto,
)
from .measures import Suite, latency_cdf, summarize
from .targets import TARGETS, Target, best_peer, evaluate_targets, median_of

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
__all__ = [
    "MEASURES",
    "MEASURE_INFO",
    "PRESETS",
    "START_METHODS",
    "TARGETS",
    "Config",
    "Suite",
    "Target",
    "best_peer",
    "evaluate_targets",
    "main",
    "median_of",
]


# -- machine and command ----------------------------------------------------------------------


def byte_compile() -> str | None:
    """Compile pipepool's modules and this suite's to bytecode where they have none, as
    an install from a wheel does; a note saying so, or None if there was nothing to do.

    The standard library's modules are compiled, and every spawn or forkserver worker
    imports its pool's code afresh: a checkout run with PYTHONDONTWRITEBYTECODE=1 (or
    from a read-only tree) would make pipepool's workers compile ~1,800 lines at each
    start while the stdlib's load bytecode, a start-up handicap no user has. Compiling
    the suite's own modules (every worker of every pool imports them) keeps that cost
    out of all the start-up figures alike.
    """
    import compileall

    compiled = []
    for folder in (os.path.dirname(pipepool.__file__), HERE):
        missing = [p for p in _sources(folder) if _stale(p)]
        if missing and compileall.compile_dir(folder, quiet=2):
            compiled.append(f"{os.path.relpath(folder, ROOT)} ({len(missing)} modules)")
    if not compiled:
        return None
    return (
        "byte-compiled before the run, as a wheel's install is (there was no bytecode, "
        "or only a stale one): " + ", ".join(compiled)
    )


def _stale(source: str) -> bool:
    """No bytecode for ``source``, or bytecode of another version of it (its header's
    timestamp is not the file's): an import would compile it again, in every worker."""
    import importlib.util

    try:
        with open(importlib.util.cache_from_source(source), "rb") as f:
            header = f.read(16)
        mtime = int(os.stat(source).st_mtime) & 0xFFFFFFFF
    except OSError:
        return True
    if header[:4] != importlib.util.MAGIC_NUMBER:
        return True
    if int.from_bytes(header[4:8], "little"):  # hash-based: checked at import, not here
        return False
    return int.from_bytes(header[8:12], "little") != mtime


def _sources(folder: str) -> list[str]:
    return [
        os.path.join(d, name)
        for d, _, names in os.walk(folder)
        if "__pycache__" not in d
        for name in names
        if name.endswith(".py")
    ]


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "pipepool": f"{pipepool.__version__} ({pipepool.IMPLEMENTATION} loop)",
        "pipepool_path": os.path.dirname(os.path.dirname(os.path.abspath(pipepool.__file__))),
        "default_start_method": __import__("multiprocessing").get_start_method(),
    }
    with contextlib.suppress(AttributeError):  # not on Linux
        info["usable_cores"] = len(os.sched_getaffinity(0))
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    for module in ("loky", "matplotlib"):
        try:
            info[module] = __import__(module).__version__
        except ImportError:
            info[module] = None
    info["git"] = _git_state()
    return info


def _git_state() -> str | None:
    try:
        head = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        dirty = subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--", "src", "pyx"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    files = [line[3:] for line in dirty.splitlines()]
    return head.strip() + (f" + uncommitted changes in {', '.join(files)}" if files else "")


# -- command line ----------------------------------------------------------------------------


def build_parser(prog: str = "python -m benchmarks") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n\n")[0],
        epilog="Measures: "
        + ", ".join(MEASURES)
        + ". See benchmarks/suite.py. Where a contender's time goes: "
        + f"{prog} profile CONTENDER --help.",
    )
    preset = parser.add_mutually_exclusive_group()
    preset.add_argument(
        "--quick",
        action="store_const",
        const="quick",
        dest="preset",
        help="fewer rounds and tasks (about a minute): a smoke run",
    )
    preset.add_argument(
        "--smoke",
        action="store_const",
        const="smoke",
        dest="preset",
        help="the test suite's tiny configuration (seconds; numbers meaningless)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        type=_measure_names,
        metavar="MEASURE",
        help="run only these measures, by name or comma-separated (targets that need "
        "others show n/a)",
    )
    parser.add_argument(
        "--ab",
        metavar="REV",
        help="A/B mode: run the --only measures against REV (a git commit or tag, built "
        "once into build/ab/, or a built source tree's path) in interleaved rounds, "
        "pipepool's contenders only; report each side's medians and the same-round "
        "ratios (benchmarks/ab.py)",
    )
    parser.add_argument("--pipepool-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "-p", "--parallelism", type=int, nargs="+", help="parallelism levels (default: 2 8)"
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds per measure")
    parser.add_argument("--tasks", type=int, help="tasks per tiny-task sample")
    parser.add_argument(
        "--prefetch",
        type=int,
        nargs="+",
        help="LocalExecutor prefetch depths to try (default: 1 16 64)",
    )
    parser.add_argument(
        "--out",
        help="output directory (default: benchmarks/results, "
        "or benchmarks/results/<preset> with --quick/--smoke)",
    )
    parser.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    parser.add_argument(
        "--readme",
        nargs="?",
        const=readme.README,
        metavar="PATH",
        help="after the run, rewrite the benchmark table in the README (or PATH) from "
        "it; refused, with exit status 3, if the run was noisy",
    )
    return parser


def results_dir(out: str | None, preset: str, noisy: bool) -> str:
    """Where a run writes: ``--out``, else ``benchmarks/results`` (the published results,
    which docs/benchmarks.md includes) for a quiet full run, ``benchmarks/results/noisy``
    for a noisy one (it must not replace them), ``benchmarks/results/<preset>`` else."""
    if out:
        return out
    if preset == "full":
        return os.path.join(HERE, "results", "noisy" if noisy else "")
    return os.path.join(HERE, "results", preset)


def _measure_names(value: str) -> list[str]:
    """``--only``'s words: measure names, one or comma-separated."""
    names = [v for v in value.split(",") if v]
    unknown = [n for n in names if n not in MEASURES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown measure {', '.join(unknown) or value!r} (one of {', '.join(MEASURES)})"
        )
    return names


def config(args: argparse.Namespace) -> Config:
    """The preset with the command line's overrides."""
    cfg = dataclasses.replace(PRESETS[args.preset or "full"])
    if args.parallelism:
        cfg.parallelism = args.parallelism
    if args.rounds:
        cfg.rounds = cfg.startup_rounds = args.rounds
        cfg.sweep_rounds = min(cfg.sweep_rounds, args.rounds)
        cfg.hol_rounds = min(cfg.hol_rounds, args.rounds)
        cfg.map_rounds = min(cfg.map_rounds, args.rounds)
    if args.tasks:
        cfg.tiny_tasks = args.tasks
    if args.prefetch:
        cfg.prefetches = args.prefetch
    return cfg


def main(argv: list[str] | None = None, prog: str = "python -m benchmarks") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["profile"]:
        from . import profile

        return profile.main(argv[1:], prog=f"{prog} profile")
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    preset = args.preset or "full"
    cfg = config(args)
    chosen = {name for names in args.only or [MEASURES] for name in names}
    measures = [m for m in MEASURES if m in chosen]
    if args.ab:
        from . import ab

        if args.only is None:
            parser.error("--ab needs --only: the measures to compare")
        return ab.main(args.ab, argv, measures, prog)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    command = " ".join([prog, *map(shlex.quote, argv)])
    log(f"{command}: {preset} configuration, measures {', '.join(measures)}")
    began, start = time.time(), _noise.read()
    cores = os.cpu_count() or 1
    log("machine at the start: " + _noise.describe(_noise.verdict(start, start, cores)))
    compiled = byte_compile()
    suite = Suite(cfg, log, pipepool_only=args.pipepool_only)
    if compiled:
        suite.notes.append(compiled)
    for note in suite.notes:
        log("note: " + note)
    by_measure: dict[str, Any] = {}  # how busy the machine was during each measure
    for name in measures:  # in the registry's order: tiny first (it chooses `local`)
        before = _noise.read()
        suite.run(name)
        by_measure[name] = _noise.verdict(before, _noise.read(), cores, within_run=True)
        if name == "tiny":
            log(f"LocalExecutor configuration for the other measures: {suite.local_why}")
    noise = _noise.verdict(start, _noise.read(), cores)
    noise["measures"] = by_measure
    noise["speed"] = _noise.steadiness(suite.speed_probes)
    if noise["noisy"]:
        log("NOISY RUN: " + "; ".join(noise["reasons"]))
    out_dir = results_dir(args.out, preset, noise["noisy"])
    summarize(suite, cfg)
    _, _, map_note = pipepool_map_auto()
    data: dict[str, Any] = {
        "command": command,
        "preset": preset,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(began)),
        "elapsed_s": round(time.time() - began, 1),
        "load_1min": {"before": noise["load_1min_start"], "after": noise["load_1min_end"]},
        "noise": noise,
        "machine": machine(),
        "config": dataclasses.asdict(cfg),
        "notes": suite.notes,
        "local_choice": {
            "key": suite.local.key,
            "label": suite.local.label,
            "why": suite.local_why,
        },
        "map_auto_chunksize": map_note,
        "contenders": suite.contenders,
        "measures": suite.measures,
        "latency_cdf": latency_cdf(suite),
    }
    data["targets"] = evaluate_targets(data, cfg)
    paths = report.write_all(data, out_dir, plots=not args.no_plots)
    print(report.targets_markdown(data))
    log("wrote " + ", ".join(os.path.relpath(p) for p in paths))
    if args.readme:
        try:
            readme.update_readme(data, args.readme)
        except readme.NoisyRunError as exc:
            log(f"{args.readme} not rewritten: {exc}")
            return readme.EXIT_NOISY
        log(f"rewrote the benchmark table in {os.path.relpath(args.readme)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
