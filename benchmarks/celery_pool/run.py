"""The command line: the rows run round by round with the pools interleaved, their medians,
the same-run ratios held to issue 43's goals, the machine's load, and the hang scenarios.

    python -m benchmarks.celery_pool                # the rows, both pools
    python -m benchmarks.celery_pool --smoke        # tiny sizes: it works (numbers meaningless)
    python -m benchmarks.celery_pool --scenarios    # the hang scenarios, both pools

Results go to ``benchmarks/results/celery/`` (``--smoke``: ``.../celery/smoke/``; a noisy
full run: ``.../celery/noisy/``): ``results.md`` and ``results.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import _noise
from . import measures, scenarios
from .services import POOLS, RedisServer, Worker, connect, pipepool_pool_missing

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Sizes:
    rounds: int = 5  # interleaved rounds: each pool once per round, the order alternating
    tasks: int = 2_000  # tiny: tasks per sample
    latency_calls: int = 300  # latency: round trips per sample
    recycle_tasks: int = 40  # recycle: tasks per sample (each on a new child)
    kills: int = 3  # resume: kills per round


PRESETS = {
    "full": Sizes(),
    "smoke": Sizes(rounds=1, tasks=100, latency_calls=20, recycle_tasks=8, kills=1),
}


@dataclass(frozen=True)
class Row:
    """A row of the table: a sample field, which way is better, and issue 43's goal as
    a bound on pipepool's median over prefork's (``<=`` for lower-is-better rows)."""

    key: str
    title: str
    field: str
    unit: str
    better: str  # "higher" or "lower"
    goal: str  # ">=" or "<="
    bound: float


ROWS = (
    Row("tiny", "tiny tasks through Redis, -c 2", "rate", "tasks/s", "higher", ">=", 1.0),
    Row("latency", "publish-to-result latency p50", "p50_ms", "ms", "lower", "<=", 1.0),
    Row("latency", "publish-to-result latency p99", "p99_ms", "ms", "lower", "<=", 1.0),
    Row("recycle", "gap a recycle leaves (max_tasks_per_child=1), median", "gap_ms", "ms",
        "lower", "<=", 0.5),
    Row("recycle", "gap a recycle leaves (max_tasks_per_child=1), mean", "gap_mean_ms", "ms",
        "lower", "<=", 0.5),
    Row("resume", "resume after a child is SIGKILLed", "resume_ms", "ms", "lower", "<=", 0.5),
)  # fmt: skip


def one_round(pool: str, url: str, sizes: Sizes, samples: dict[str, dict[str, list[Any]]]) -> None:
    """One round of one pool: a fresh worker for tiny, latency and resume; another with
    ``--max-tasks-per-child 1`` for recycle."""
    add = samples[pool]
    with Worker(pool, url) as worker:
        add["tiny"].append(measures.tiny(worker, sizes.tasks))
        add["latency"].append(measures.latency(worker, sizes.latency_calls))
        for _ in range(sizes.kills):
            add["resume"].append(measures.resume(worker))
    with Worker(pool, url, options=["--max-tasks-per-child", "1"]) as worker:
        add["recycle"].append(measures.recycle(worker, sizes.recycle_tasks))


def medians(samples: list[dict[str, Any]]) -> dict[str, float]:
    fields = [k for k, v in samples[0].items() if isinstance(v, float)]
    return {f: statistics.median(s[f] for s in samples) for f in fields}


def evaluate(by_pool: dict[str, dict[str, dict[str, float]]]) -> list[dict[str, Any]]:
    """Each row: both medians, pipepool's over prefork's, and whether the goal is met."""
    out = []
    for row in ROWS:
        ours = by_pool.get("pipepool", {}).get(row.key, {}).get(row.field)
        theirs = by_pool.get("prefork", {}).get(row.key, {}).get(row.field)
        ratio = ours / theirs if ours is not None and theirs else None
        met = None
        if ratio is not None:
            met = ratio >= row.bound if row.goal == ">=" else ratio <= row.bound
        out.append({
            **dataclasses.asdict(row), "pipepool": ours, "prefork": theirs,
            "ratio": ratio, "met": met,
        })  # fmt: skip
    return out


def markdown(data: dict[str, Any]) -> str:
    def num(v: float | None) -> str:
        return "n/a" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.3g}")

    lines = [
        "# pipepool's Celery pool beside prefork",
        "",
        f"`{data['command']}`, {data['started']}, {data['elapsed_s']} s; "
        f"{data['machine']['software']}.",
        "",
        "Machine: " + _noise.describe(data["noise"])
        + (" **NOISY RUN: " + "; ".join(data["noise"]["reasons"]) + "**"
           if data["noise"]["noisy"] else ""),
        "",
        "| row | pipepool | prefork | pipepool / prefork | goal | met |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]  # fmt: skip
    for t in data["rows"]:
        ratio = "n/a" if t["ratio"] is None else f"{t['ratio']:.2f}x"
        met = {True: "**met**", False: "not met", None: "n/a"}[t["met"]]
        lines.append(
            f"| {t['title']} ({t['unit']}) | {num(t['pipepool'])} | {num(t['prefork'])} "
            f"| {ratio} | {t['goal']} {t['bound']:g}x | {met} |"
        )
    for note in data["notes"]:
        lines += ["", f"Note: {note}"]
    return "\n".join(lines) + "\n"


def scenario_markdown(outcomes: list[scenarios.Outcome]) -> str:
    lines = ["| scenario | pool | healthy | observed | s |", "| --- | --- | --- | --- | ---: |"]
    for o in outcomes:
        ok = "yes" if o.passed else "**no: reproduced**"
        lines.append(f"| {o.scenario} | {o.pool} | {ok} | {o.observed} | {o.seconds:.0f} |")
    return "\n".join(lines) + "\n"


SOFTWARE = (
    "import platform, billiard, celery, kombu, redis; print(f'Python "
    "{platform.python_version()}, Celery {celery.__version__}, billiard "
    "{billiard.__version__}, kombu {kombu.__version__}, redis-py {redis.__version__}')"
)


def software(python: str = sys.executable) -> str:
    """The versions the workers run: asked of their interpreter (``--python``)."""
    done = subprocess.run(
        [python, "-c", SOFTWARE], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def scenario_plan(
    server: RedisServer,
    python: str,
    window: float | None,
    stop_window: float | None,
    quick: bool,
) -> dict[str, Callable[[str], scenarios.Outcome]]:
    """Each scenario at the harness's sizes, or the tests' (``quick``: a 1.5 s child
    initializer against a 1 s worker_proc_alive_timeout, where the harness has 6 s against
    Celery's default 4 s); ``window``: the seconds a hang is watched, ``stop_window``: a
    warm shutdown."""
    url = server.url
    w = {} if window is None else {"window": window}
    stop = {} if stop_window is None else {"stop_window": stop_window}
    init_s, alive_s = (1.5, 1.0) if quick else (6.0, 0.0)
    return {
        "lock_holder_killed": lambda p: scenarios.lock_holder_killed(
            p, url, python=python, **w, **stop),
        "slow_init_respawn": lambda p: scenarios.slow_init_respawn(
            p, url, init_s, alive_s, window=window or 45.0, python=python),
        "reconnect_free_worker": lambda p: scenarios.reconnect_free_worker(
            p, url, lambda: server.restart(1.0), python=python, **w),
        "recycle_duplicates": lambda p: scenarios.recycle_duplicates(p, url, python=python),
        "maxmem_respawn": lambda p: scenarios.maxmem_respawn(p, url, python=python),
        "shutdown_results": lambda p: scenarios.shutdown_results(p, url, python=python),
        "oom_named": lambda p: scenarios.oom_named(p, url, python=python),
        "recycle_soak": lambda p: scenarios.recycle_soak(p, url, python=python),
    }  # fmt: skip


def run_scenarios(
    names: list[str], pools: list[str], server: RedisServer, python: str,
    window: float | None, stop_window: float | None, quick: bool,
    log: Callable[[str], None],
) -> list[scenarios.Outcome]:  # fmt: skip
    plan = scenario_plan(server, python, window, stop_window, quick)
    out = []
    for name in names or list(plan):
        log(f"scenario {name}: {scenarios.EXPLAINED[name]}")
        for pool in pools:
            try:
                outcome = plan[name](pool)
            except Exception as exc:  # a scenario that broke is reported, not fatal
                outcome = scenarios.Outcome(name, pool, False, f"error: {exc!r}"[:600])
            log(f"  {pool}: {'healthy' if outcome.passed else 'NOT healthy'}: {outcome.observed}")
            out.append(outcome)
    return out


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: a smoke run (scenarios: the tests' sizes)"
    )
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--tasks", type=int, help="tiny tasks per sample")
    parser.add_argument("--pools", nargs="+", choices=POOLS, default=list(POOLS))
    parser.add_argument(
        "--scenarios",
        nargs="*",
        choices=list(scenarios.EXPLAINED),
        metavar="NAME",
        help="run the hang scenarios (these, or all) instead of the rows",
    )
    parser.add_argument("--window", type=float, help="scenarios: seconds a hang is watched")
    parser.add_argument(
        "--stop-window", type=float, help="scenarios: seconds a warm shutdown may take"
    )
    parser.add_argument("--json", action="store_true", help="scenarios: print JSON outcomes")
    parser.add_argument(
        "--python", default=sys.executable,
        help="the workers' interpreter (another venv: another Celery, e.g. 5.6.3)",
    )  # fmt: skip
    parser.add_argument("--out", help="output directory (default: benchmarks/results/celery)")
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m benchmarks.celery_pool") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(argv)
    sizes = dataclasses.replace(PRESETS["smoke" if args.smoke else "full"])
    if args.rounds:
        sizes.rounds = args.rounds
    if args.tasks:
        sizes.tasks = args.tasks

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    command = " ".join([prog, *map(shlex.quote, argv)])
    notes = []
    pools = list(args.pools)
    missing = pipepool_pool_missing()
    if "pipepool" in pools and missing:
        pools.remove("pipepool")
        notes.append(f"pipepool's pool skipped: {missing}")
    for note in notes:
        log("note: " + note)
    began, start = time.time(), _noise.read()
    cores = os.cpu_count() or 1
    log("machine at the start: " + _noise.describe(_noise.verdict(start, start, cores)))
    with RedisServer() as server:
        connect(server.url)
        if args.scenarios is not None:
            outcomes = run_scenarios(
                args.scenarios,
                pools,
                server,
                args.python,
                args.window,
                args.stop_window,
                args.smoke,
                log,
            )
            if args.json:
                print(json.dumps([dataclasses.asdict(o) for o in outcomes]))
            else:
                print(f"Workers: {software(args.python)}.\n\n" + scenario_markdown(outcomes))
            return 0
        samples = rounds(pools, server.url, sizes, log)
    noise = _noise.verdict(start, _noise.read(), cores)
    if noise["noisy"]:
        log("NOISY RUN: " + "; ".join(noise["reasons"]))
    by_pool = {p: {k: medians(v) for k, v in m.items() if v} for p, m in samples.items()}
    data: dict[str, Any] = {
        "command": command,
        "preset": "smoke" if args.smoke else "full",
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(began)),
        "elapsed_s": round(time.time() - began, 1),
        "noise": noise,
        "machine": {"cores": cores, "software": software(args.python)},
        "sizes": dataclasses.asdict(sizes),
        "notes": notes,
        "medians": by_pool,
        "samples": samples,
        "rows": evaluate(by_pool),
    }
    sub = "smoke" if args.smoke else ("noisy" if noise["noisy"] else "")
    out = args.out or os.path.join(HERE, "results", "celery", sub)
    print(write(data, out))
    log(f"wrote {os.path.relpath(out)}/results.md and results.json")
    return 0


def rounds(
    pools: list[str], url: str, sizes: Sizes, log: Callable[[str], None]
) -> dict[str, dict[str, list[Any]]]:
    """Every round, the pools in turn (round 1: A B, round 2: B A, ...): the samples."""
    samples: dict[str, dict[str, list[Any]]] = {
        p: {"tiny": [], "latency": [], "recycle": [], "resume": []} for p in pools
    }
    for r in range(sizes.rounds):
        for pool in pools[r % len(pools) :] + pools[: r % len(pools)]:
            log(f"round {r + 1}/{sizes.rounds}: {pool}")
            one_round(pool, url, sizes, samples)
    return samples


def write(data: dict[str, Any], out: str) -> str:
    """results.json and results.md in ``out``; the markdown."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    text = markdown(data)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text)
    return text
