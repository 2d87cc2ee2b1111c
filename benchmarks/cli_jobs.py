"""``pipepool run`` against GNU parallel and ``xargs -P`` on N trivial jobs (``true``).

Each contender runs the same N jobs with the same parallelism; the clock covers the whole
command as a user sees it (interpreter start-up included). Rounds are interleaved so
that noise from other work on the machine hits every contender alike; the table shows
the median jobs/s. Contenders whose program is missing are left out.

    python benchmarks/cli_jobs.py                 # 1000 jobs, -j = cores, 5 rounds
    python benchmarks/cli_jobs.py -n 2000 -j 4 --rounds 3 --out benchmarks/results/cli_jobs.md
    python benchmarks/cli_jobs.py --baseline /tmp/main/src   # also another checkout's runner

``--baseline SRC`` adds the runner from another source tree (say, main's, checked out
with ``git worktree add /tmp/main main`` and its extension built or copied in) to the
same interleaved rounds, so a change's overhead is measured against the same noise.
The CPU column is the whole command's user + system time (runner, workers, jobs),
steadier than wall time on a busy machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time


def contenders(jobs: int, baseline: str | None = None) -> dict[str, list[str]]:
    py = [sys.executable, "-m", "pipepool", "run", "-j", str(jobs), "--no-summary", "--no-progress"]
    table = {
        "pipepool run (sh -c per job)": py,
        "pipepool run --no-shell": [*py, "--no-shell"],
        "pipepool run --joblog (sh -c)": [*py, "--joblog", os.devnull],
    }
    if baseline:  # the same commands, run by the baseline tree's runner (see run_env)
        for name in list(table):
            table[f"baseline: {name}"] = ["PYTHONPATH=" + baseline, *table[name]]
    if shutil.which("parallel"):
        table["GNU parallel (sh -c per job)"] = ["parallel", "--will-cite", "-j", str(jobs)]
    if shutil.which("xargs"):
        table["xargs -P (sh -c per job)"] = ["xargs", "-P", str(jobs), "-I{}", "sh", "-c", "{}"]
        table["xargs -P (exec directly)"] = ["xargs", "-P", str(jobs), "-L1"]
    return table


def time_one(argv: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system of the whole tree) of one command."""
    if argv[0].startswith("PYTHONPATH="):  # a baseline contender: its own source tree
        env = dict(env, PYTHONPATH=argv[0].split("=", 1)[1])
        argv = argv[1:]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(
        argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, timeout=600
    )
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs-count", type=int, default=1000, help="jobs per run")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", help="also write the table (markdown) to this file")
    parser.add_argument(
        "--baseline", metavar="SRC", help="also time the runner of another source tree"
    )
    args = parser.parse_args()
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [os.path.abspath(src), env.get("PYTHONPATH", "")])
    )
    stdin = b"true\n" * args.jobs_count
    table = contenders(args.jobs, args.baseline)
    samples: dict[str, list[float]] = {name: [] for name in table}
    cpu: dict[str, list[float]] = {name: [] for name in table}
    for _ in range(args.rounds):
        for name, argv in table.items():
            wall, used = time_one(argv, stdin, env)
            samples[name].append(wall)
            cpu[name].append(used)
    impl = subprocess.run(
        [sys.executable, "-c", "import pipepool; print(pipepool.IMPLEMENTATION)"],
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()
    lines = [
        f"{args.jobs_count} `true` jobs, -j {args.jobs}, {os.cpu_count()} cores, "
        f"median of {args.rounds} interleaved rounds, wall time of the whole command "
        f"(pipepool loop: {impl})",
        "",
        "| contender | seconds | jobs/s | CPU seconds | vs GNU parallel | vs xargs -P |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    medians = {name: statistics.median(values) for name, values in samples.items()}

    def ratio(name: str, other: str) -> str:
        return f"{medians[other] / medians[name]:.2f}x" if other in medians else "-"

    for name, median in medians.items():
        lines.append(
            f"| {name} | {median:.3f} | {args.jobs_count / median:,.0f} | "
            f"{statistics.median(cpu[name]):.3f} | {ratio(name, 'GNU parallel (sh -c per job)')} "
            f"| {ratio(name, 'xargs -P (sh -c per job)')} |"
        )
    if args.baseline:
        lines.append("")
        for name in [n for n in medians if f"baseline: {n}" in medians]:
            base = f"baseline: {name}"
            lines.append(
                f"- {name}: {medians[name] / medians[base]:.3f}x the baseline's wall time, "
                f"{statistics.median(cpu[name]) / statistics.median(cpu[base]):.3f}x its CPU"
            )
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
