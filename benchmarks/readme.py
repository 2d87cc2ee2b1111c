"""The README's benchmark table, written from a quiet run only.

The README shows one run's header (machine, code, command, load), a headline table of
at most ten target rows (one per idiom and peer, ``HEADLINE``) and the sentence that
sums it up, all written here from the same rows, between two markers: the prose cannot
disagree with the table. Every target row is on the benchmarks page (``results.md``).
``python -m benchmarks --readme`` rewrites that block after its run, and this module
does it from a saved run::

    python -m benchmarks.readme benchmarks/results/results.json

Either refuses a noisy run (``NoisyRunError``, exit status 3), and a run from before
the machine's load was recorded in full: a table taken on a busy machine flatters
pipepool, whose one loop suffers less from load than the peers' helper threads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from . import report

BEGIN = "<!-- benchmarks:begin (python -m benchmarks --readme writes this block) -->"
END = "<!-- benchmarks:end -->"
EXIT_NOISY = 3
README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


class NoisyRunError(Exception):
    """The run cannot stand for pipepool's speed: the machine was busy (or not checked)."""


# The headline: (idiom, the target row's name starts with, its param) in table order; a
# row the run did not measure is left out. At most ten.
HEADLINE: tuple[tuple[str, str, str | None], ...] = (
    ("chunked `map` of many tiny calls", "chunked map of", None),
    ("one item at a time, `map(chunksize=1)`", "ProcessPoolExecutor.map chunksize 1 vs", "2"),
    ("`submit` + `result()`", "ProcessPoolExecutor submit+result", "2"),
    ("scheduler rounds (`LocalExecutor` defaults)", "scheduler rounds: default", "2"),
    ("round-trip latency, p50", "round-trip latency p50, p=", "2"),
    ("1 MiB results (share of one copy)", "1 MiB results vs the copy bound, p=", "2"),
    ("per-task timeouts under a burst", "per-task timeouts", None),
    ("start-up + first result ({param})", "start-up + first task", None),
    ("joblib, 1 MiB numpy results", "joblib 1 MiB numpy results", None),
    ("long tasks: no head-of-line blocking", "long tasks, no head-of-line blocking: Process", None),
)


def headline_rows(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(idiom, target row)`` of each ``HEADLINE`` entry this run measured."""
    out = []
    for idiom, prefix, param in HEADLINE:
        for t in data["targets"]:
            if t["ratio"] is None:
                continue
            if t["target"].startswith(prefix) and (param is None or t["param"] == param):
                out.append((idiom.format(param=t["param"].replace(":", ", p=")), t))
                break
    return out


def headline_markdown(data: dict[str, Any]) -> str:
    """The headline table and the sentence about it, from the same rows."""
    rows = []
    chosen = headline_rows(data)
    for idiom, t in chosen:
        unit = report.unit_of(data, t["measure"], t["field"])
        ours = f"{report.fmt(t['ours_value'], unit)} {unit}"
        peer = report.label(data, t["peer"]) if t["peer"] in data["contenders"] else t["peer"]
        theirs = f"{peer}: {report.fmt(t['peer_value'], unit)} {unit}"
        verdict = {True: "**met**", False: "not met", None: "n/a"}[t["met"]]
        rows.append([idiom, ours, theirs, report.ratio(t["ratio"]), t["goal"], verdict])
    table = report.table(
        ["idiom", "pipepool", "compared with (the best peer measured)", "ratio", "goal", "met"],
        rows,
        ["---", "---:", "---", "---:", "---", "---"],
    )
    met = sum(1 for _, t in chosen if t["met"])
    every = [t for t in data["targets"] if t["met"] is not None]
    prose = (
        f"{met} of these {len(chosen)} headline rows are met in this run, and "
        f"{sum(1 for t in every if t['met'])} of all {len(every)} target rows. Every target "
        "row, every measure (CPU per task, the sweep 1..64, 64 KiB arguments, several "
        "iterables, joblib) and the plots are on the [benchmarks page](docs/benchmarks.md) "
        "and in `benchmarks/results/`; where the time goes: `benchmarks/results/profile.md`."
    )
    return table + "\n\n" + prose


def block(data: dict[str, Any]) -> str:
    """The README's block for a run: its header, the headline table and its sentence."""
    return "\n".join(report.header_lines(data)) + "\n\n" + headline_markdown(data)


def update_readme(data: dict[str, Any], path: str) -> None:
    """Replace the block between the markers in ``path`` with this run's, if the run
    was quiet; else raise ``NoisyRunError`` and leave the file as it was."""
    noise = data.get("noise")
    if noise is None:
        raise NoisyRunError(
            "the run recorded no load figures (made before runs measured the CPU other "
            "processes used): run the suite again on a quiet machine"
        )
    if noise["noisy"]:
        raise NoisyRunError("a noisy run: " + "; ".join(noise["reasons"]))
    with open(path, encoding="utf-8") as f:
        text = f.read()
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < begin:
        raise ValueError(f"{path} has no benchmark block (the lines {BEGIN!r} ... {END!r})")
    new = text[: begin + len(BEGIN)] + "\n\n" + block(data) + "\n\n" + text[end:]
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(new)
    os.replace(tmp, path)  # never a half-written README


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.readme",
        description="Rewrite the README's benchmark block from a saved quiet run "
        f"(a noisy one is refused with exit status {EXIT_NOISY}).",
    )
    parser.add_argument("results", help="the run's results.json (python -m benchmarks --out)")
    parser.add_argument("readme", nargs="?", default=README, help="the README (default: ours)")
    args = parser.parse_args(argv)
    try:
        with open(args.results) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read the run {args.results}: {exc}")
    try:
        update_readme(data, args.readme)
    except NoisyRunError as exc:
        print(f"{args.readme} not rewritten: {exc}", file=sys.stderr)
        return EXIT_NOISY
    print("rewrote the benchmark table in", args.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
