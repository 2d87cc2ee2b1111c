"""The README's benchmark table, written from a quiet run only.

The README shows one run's header (machine, code, command, load) and its targets and
cost-per-task tables, between two markers. ``python -m benchmarks --readme`` rewrites
that block after its run, and this module does it from a saved run::

    python -m benchmarks.readme benchmarks/results/results.json

Either refuses a noisy run (``NoisyRunError``, exit status 3), and a run from before
the machine's load was recorded in full: a table taken on a busy machine flatters
pipepool, whose one loop suffers less from load than the peers' helper threads.
"""

from __future__ import annotations

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


def block(data: dict[str, Any]) -> str:
    """The README's block for a run: its header, the targets, the cost per task."""
    parts = ["\n".join(report.header_lines(data)), report.targets_markdown(data)]
    cost = report.cost_markdown(data)
    if cost:
        parts.append(cost)
    return "\n\n".join(parts)


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
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2):
        print("usage: python -m benchmarks.readme RESULTS.json [README.md]", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        data = json.load(f)
    path = argv[1] if len(argv) == 2 else README
    try:
        update_readme(data, path)
    except NoisyRunError as exc:
        print(f"{path} not rewritten: {exc}", file=sys.stderr)
        return EXIT_NOISY
    print("rewrote the benchmark table in", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
