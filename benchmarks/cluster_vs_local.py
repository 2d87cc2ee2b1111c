"""Tasks/s of ClusterExecutor on a local Dask cluster next to LocalExecutor, same machine.

What a user pays for the cluster's API on one machine: every contender has the same
number of worker processes (``-j``, one thread each) and runs the same batch through
the scheduler-style API (queue everything, then ``sync`` until done). Executors are
started once, before the clock, and warmed up; rounds are interleaved so that noise from
other work on the machine hits every contender alike; the table shows the median.

    python benchmarks/cluster_vs_local.py                  # 2 workers, 5 rounds
    python benchmarks/cluster_vs_local.py -j 2 -n 2000 --rounds 7 --out table.md

Workloads: ``abs(i)`` (pure overhead) and ``time.sleep(0.01)`` (10 ms tasks, where the
ideal is ``100 * j`` tasks/s). Needs ``pip install 'pipepool[dask]'``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from pipepool import ClusterExecutor, LocalExecutor

SLEEP = 0.01


def contenders(jobs: int) -> dict[str, LocalExecutor | ClusterExecutor]:
    cluster: dict[str, Any] = dict(n_workers=jobs, threads_per_worker=1, silence_logs=logging.ERROR)
    return {
        "LocalExecutor": LocalExecutor(jobs),
        "ClusterExecutor (LocalCluster)": ClusterExecutor(None, **cluster),
        "ClusterExecutor, running_events=False": ClusterExecutor(
            None, running_events=False, **cluster
        ),
        "ClusterExecutor, worker_saturation=inf": ClusterExecutor(
            None, worker_saturation=float("inf"), **cluster
        ),
    }


def run_batch(ex, fn, args: list) -> float:
    """Seconds to queue ``fn(arg)`` for each arg and drive the executor until all ended."""
    started = time.perf_counter()
    for i, arg in enumerate(args):
        ex.queue(i, fn, arg)
    done = 0
    while done < len(args):
        ex.sync(timeout=0.05)
        events = ex.get_event_buffer()
        done += sum(1 for e in events.values() if e.state.terminal)
        failed = [e for e in events.values() if e.state.value == "failed"]
        if failed:
            raise SystemExit(f"a task failed: {failed[0].exception!r}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=2, help="worker processes each")
    parser.add_argument("-n", "--tasks", type=int, default=2000, help="no-op tasks per round")
    parser.add_argument("--sleep-tasks", type=int, default=200, help="10 ms tasks per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", help="also write the table (markdown) to this file")
    args = parser.parse_args()

    workloads: dict[str, tuple[Callable[..., Any], list[Any]]] = {
        "no-op `abs(i)`": (abs, list(range(args.tasks))),
        f"`time.sleep({SLEEP})`": (time.sleep, [SLEEP] * args.sleep_tasks),
    }
    executors = contenders(args.jobs)
    rates: dict[tuple[str, str], list[float]] = {}
    try:
        for ex in executors.values():
            ex.start()
            run_batch(ex, abs, list(range(200)))  # warm-up: workers up, imports done
        for r in range(args.rounds):
            for wname, (fn, fargs) in workloads.items():
                for name, ex in executors.items():
                    rate = len(fargs) / run_batch(ex, fn, fargs)
                    rates.setdefault((wname, name), []).append(rate)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        for ex in executors.values():
            ex.end()

    lines = [
        f"tasks/s, median of {args.rounds} interleaved rounds, {args.jobs} worker "
        f"processes each, {os.cpu_count()} cores "
        f"(Python {sys.version.split()[0]}):",
        "",
        "| workload | " + " | ".join(executors) + " |",
        "| --- |" + " --- |" * len(executors),
    ]
    for wname in workloads:
        cells = [f"{statistics.median(rates[(wname, name)]):,.0f}" for name in executors]
        lines.append(f"| {wname} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
