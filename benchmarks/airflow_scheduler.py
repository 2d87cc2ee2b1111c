"""Tasks per minute through Airflow's real scheduler: LocalExecutor vs PipepoolExecutor.

Each round runs the same ~200-task DAG (``tests/airflow_face/e2e_dag.py``) once per executor,
interleaved, each in a fresh AIRFLOW_HOME (sqlite, a copy of one migrated database) with
its own api-server, dag-processor and scheduler on 127.0.0.1. A run's rate is its task
instances divided by the span from the first task's start to the last task's end, read
from the metadata database (so start-up and DAG parsing are left out, alike for both).
The table shows the median per executor and their ratio, and every run's states are
checked against the ones Airflow must give them.

    python benchmarks/airflow_scheduler.py                 # 3 rounds, parallelism 4
    python benchmarks/airflow_scheduler.py --rounds 5 --parallelism 8 --ok 190

Needs ``pip install 'pipepool[airflow]'``; takes minutes per run on 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # helpers, which e2e imports
sys.path.insert(0, str(ROOT / "tests" / "airflow_face"))
sys.path.insert(0, str(ROOT / "src"))

import e2e  # noqa: E402

CONTENDERS = {"Airflow LocalExecutor": e2e.LOCAL, "PipepoolExecutor": e2e.PIPEPOOL}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--ok", type=int, default=190, help="ok_* tasks in the DAG (+9 others)")
    parser.add_argument("--bound", type=float, default=900, help="s per run before it fails")
    args = parser.parse_args()
    rates: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory(prefix="pipepool-airflow-bench-") as tmp:
        template = e2e.Home(Path(tmp) / "template", e2e.PIPEPOOL)
        template.migrate()
        for r in range(args.rounds):
            order = list(CONTENDERS.items())
            if r % 2:
                order.reverse()  # neither executor always runs first
            for name, executor in order:
                home = e2e.Home(
                    Path(tmp) / f"{r}-{executor}",
                    executor,
                    parallelism=args.parallelism,
                    n_ok=args.ok,
                )
                home.migrate(template.db)
                began = time.monotonic()
                states, span = e2e.scheduler_run(home, bound=args.bound)
                wrong = {t: s for t, s in states.items() if s != e2e.expected_state(t)}
                rate = len(states) / span * 60
                rates[name].append(rate)
                flag = f" WRONG STATES: {wrong}" if wrong else ""
                print(
                    f"round {r + 1} {name}: {len(states)} task instances, {span:.1f} s "
                    f"first start to last end, {rate:.1f} tasks/min "
                    f"(run {time.monotonic() - began:.0f} s){flag}",
                    flush=True,
                )
    medians = {name: statistics.median(v) for name, v in rates.items()}
    local, ours = medians["Airflow LocalExecutor"], medians["PipepoolExecutor"]
    print(f"\nparallelism {args.parallelism}, {args.ok + 9} task instances, {args.rounds} rounds")
    print("| executor | tasks/min (median) | runs |")
    print("| --- | ---: | --- |")
    for name, values in rates.items():
        print(f"| {name} | {medians[name]:.1f} | {', '.join(f'{v:.1f}' for v in values)} |")
    print(f"\nPipepoolExecutor / LocalExecutor: {ours / local:.2f}x")


if __name__ == "__main__":
    main()
