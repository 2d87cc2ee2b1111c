"""A/B mode: the same measures, this checkout's pipepool against another's, interleaved.

    python -m benchmarks --ab main --only tiny,latency         # a branch, a tag, a commit
    python -m benchmarks --ab f038f2c --only tiny --rounds 9 -p 2
    python -m benchmarks --ab /path/to/a/built/checkout --only tiny --smoke

A per-task regression shows here before it lands. Side A is this checkout (its src/,
as it is, uncommitted changes included); side B is REV: a git revision is exported
(``git archive``) into ``build/ab/<commit>/`` and built into a wheel by pip (the build
requirements its pyproject.toml declares, the compiled loop included), unpacked there,
once per commit (with ``PIPEPOOL_PURE=1`` nothing is compiled, and the tree is cached
apart); a path is a source tree used as it is (its loop already built in place, or
pure). Both sides run this checkout's measure code with this interpreter and its peers:
only pipepool differs, imported from each side's folder (``PYTHONPATH``; spawned workers
inherit it; each round checks where it came from), in a subprocess per side and round.
Rounds alternate the order (A B, B A, A B ...) so drift hits both alike; each runs one
round of every measure, pipepool's contenders only.

The report gives, per measure, parameter, contender and field (the measure's own, and
the parent's CPU per task where measured), the median of each side's rounds and the
median of the same-round ratios A / B: for CPU and time, below 1 means A costs less.
Beside it, the range of the same-round ratios and how many were below 1: a difference
shows when the rounds agree on its side of 1 (all of them, or all but an outlier); when
they split, the machine's drift between a round's two sides was larger than the
difference, and more ``--rounds`` are needed to tell (docs/benchmarks.md, "A/B").
Each side's results are kept beside the report (``ab.md``, ``ab.json``).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from typing import Any

from .config import PRESETS

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CACHE = os.path.join(ROOT, "build", "ab")  # one built tree per commit (gitignored)
BUILT = ".ab-built"  # written last: a tree without it was not finished
SIDE_TIMEOUT = 3600.0  # s: one side's round of the measures
# Options of the A/B command that the sides must not get: the mode itself, and where
# the whole comparison writes (each side writes its round into its own folder).
OWN_OPTIONS = {"--ab": 1, "--out": 1, "--rounds": 1, "--readme": 0, "--no-plots": 0}


class ABError(Exception):
    """The other side could not be built, or a side's run failed."""


@dataclass(frozen=True)
class Side:
    name: str  # "A" or "B"
    label: str  # what it is: this checkout, or REV
    src: str  # the folder holding its pipepool package


def resolve(rev: str, cache: str = CACHE) -> Side:
    """Side B: a built source tree's path as it is, or a git revision built into
    ``cache`` (once per commit)."""
    if os.path.isdir(os.path.join(rev, "src", "pipepool")):
        return Side("B", os.path.abspath(rev), os.path.join(os.path.abspath(rev), "src"))
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}").strip()
    return Side("B", f"{rev} ({commit[:10]})", build(commit, cache))


def build(commit: str, cache: str = CACHE) -> str:
    """The folder to import ``commit``'s pipepool from, made once under ``cache`` and
    found again by its marker: the commit's tree (``git archive``), built into a wheel
    by pip with the build requirements it declares (its compiled loop included),
    unpacked into ``site/``. With ``PIPEPOOL_PURE=1`` (kept apart in the cache) there is
    nothing to compile: the tree's ``src/`` is the package."""
    pure = os.environ.get("PIPEPOOL_PURE", "") == "1"
    tree = os.path.join(cache, commit + ("-pure" if pure else ""))
    found = os.path.join(tree, "src" if pure else "site")
    if os.path.exists(os.path.join(tree, BUILT)):
        return found
    os.makedirs(cache, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f"{commit[:10]}.", dir=cache)
    try:
        with tempfile.TemporaryFile() as archive:
            subprocess.run(
                ["git", "-C", ROOT, "archive", "--format=tar", commit],
                stdout=archive,
                check=True,
                timeout=300,
            )
            archive.seek(0)
            with tarfile.open(fileobj=archive) as tar:
                tar.extractall(scratch, filter="data")
        if not pure:
            _wheel_into(scratch, os.path.join(scratch, "site"))
        with open(os.path.join(scratch, BUILT), "w") as f:
            f.write(f"{commit} built {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}\n")
        shutil.rmtree(tree, ignore_errors=True)
        os.rename(scratch, tree)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return found


def _wheel_into(tree: str, site: str) -> None:
    """Build ``tree``'s wheel (pip, isolated: the build requirements its pyproject.toml
    declares) and unpack it into ``site``, as an install would lay it out."""
    wheels = os.path.join(tree, "dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, tree],
        capture_output=True,
        text=True,
        timeout=1800,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode:
        raise ABError(f"building {tree} failed:\n{done.stderr[-4000:]}")
    (wheel,) = (os.path.join(wheels, n) for n in os.listdir(wheels) if n.endswith(".whl"))
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", ROOT, *args], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except subprocess.CalledProcessError as exc:
        raise ABError(f"git {' '.join(args)}: {exc.stderr.strip()}") from exc


def side_argv(argv: list[str], out: str) -> list[str]:
    """The A/B command line less its own options, for one side's round into ``out``."""
    kept, skip = [], 0
    for word in argv:
        if skip:
            skip -= 1
            continue
        name = word.split("=", 1)[0]
        if name in OWN_OPTIONS:
            skip = OWN_OPTIONS[name] if "=" not in word else 0
            continue
        kept.append(word)
    return [*kept, "--rounds", "1", "--no-plots", "--pipepool-only", "--out", out]


def run_side(side: Side, argv: list[str], out: str) -> dict[str, Any]:
    """One round of the measures with ``side``'s pipepool: its results.json."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (side.src, env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *side_argv(argv, out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SIDE_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode:
        raise ABError(f"side {side.name} ({side.label}) failed:\n{done.stderr[-4000:]}")
    with open(os.path.join(out, "results.json")) as f:
        data: dict[str, Any] = json.load(f)
    imported = data["machine"]["pipepool_path"]
    if os.path.commonpath([imported, side.src]) != side.src:  # the side's own, or no A/B
        raise ABError(f"side {side.name} imported pipepool from {imported}, not {side.src}")
    return data


def values(data: dict[str, Any]) -> dict[tuple[str, str, str, str], float]:
    """``{(measure, param, contender, field): median}`` of one side's round: each
    measure's own field, and the parent's CPU per task where it was measured."""
    out = {}
    for measure, m in data["measures"].items():
        for param, by_key in m["params"].items():
            for key, entry in by_key.items():
                median = entry.get("median") or {}
                for field in dict.fromkeys([m["field"], "parent_cpu_us"]):
                    if field in median:
                        out[(measure, param, key, field)] = median[field]
    return out


def compare(rounds: list[dict[str, dict[tuple[str, str, str, str], float]]]) -> list[dict]:
    """Per quantity: each side's median over the rounds, the median of the same-round
    ratios A / B (rounds where both sides measured it), their range, and how many were
    below 1."""
    rows = []
    for q in dict.fromkeys(q for r in rounds for q in r["A"]):
        a = [r["A"][q] for r in rounds if q in r["A"]]
        b = [r["B"][q] for r in rounds if q in r["B"]]
        ratios = [r["A"][q] / r["B"][q] for r in rounds if q in r["A"] and r["B"].get(q)]
        rows.append(
            {
                "measure": q[0],
                "param": q[1],
                "contender": q[2],
                "field": q[3],
                "a": statistics.median(a),
                "b": statistics.median(b) if b else None,
                "ratio": statistics.median(ratios) if ratios else None,
                "ratios": ratios,
                "low": min(ratios) if ratios else None,
                "high": max(ratios) if ratios else None,
                "below": sum(1 for x in ratios if x < 1),
            }
        )
    return rows


def markdown(a: Side, b: Side, rows: list[dict], rounds: int) -> str:
    lines = [
        f"A: {a.label}; B: {b.label}; {rounds} interleaved rounds, medians; "
        "ratio: the median of the same-round ratios A / B; range: their lowest and "
        "highest; below 1: in how many rounds A / B was below 1 (a difference shows when "
        "the rounds agree on its side of 1)",
        "",
        "| measure | param | contender | field | A | B | A / B | range | below 1 |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        b_value = "n/a" if r["b"] is None else f"{r['b']:,.4g}"
        if r["ratio"] is None:
            ratio = spread = below = "n/a"
        else:
            ratio = f"{r['ratio']:.3f}"
            spread = f"{r['low']:.3f}-{r['high']:.3f}"
            below = f"{r['below']} of {len(r['ratios'])}"
        lines.append(
            f"| {r['measure']} | {r['param']} | {r['contender']} | {r['field']} | "
            f"{r['a']:,.4g} | {b_value} | {ratio} | {spread} | {below} |"
        )
    return "\n".join(lines) + "\n"


def rounds_of(argv: list[str], preset: str) -> int:
    """``--rounds N`` of the command line, else the preset's rounds."""
    for i, word in enumerate(argv):
        if word == "--rounds" and i + 1 < len(argv):
            return int(argv[i + 1])
        if word.startswith("--rounds="):
            return int(word.split("=", 1)[1])
    return PRESETS[preset].rounds


def out_dir(argv: list[str]) -> str:
    for i, word in enumerate(argv):
        if word == "--out" and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith("--out="):
            return word.split("=", 1)[1]
    return os.path.join(HERE, "results", "ab")


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(rev: str, argv: list[str], measures: list[str], prog: str) -> int:
    """``prog --ab REV --only ...``: build or find side B, run the interleaved rounds,
    write and print the comparison."""
    preset = next((p for p in ("quick", "smoke") if f"--{p}" in argv), "full")
    rounds = rounds_of(argv, preset)
    out = out_dir(argv)
    try:
        b = resolve(rev)
        a = Side("A", f"this checkout ({ROOT})", os.path.join(ROOT, "src"))
        log(f"{prog} --ab: A {a.label}, B {b.label}; {rounds} rounds of {', '.join(measures)}")
        sides = {"A": a, "B": b}
        results: list[dict[str, Any]] = []
        for r in range(rounds):
            order = "AB" if r % 2 == 0 else "BA"
            got = {}
            for name in order:
                side_out = os.path.join(out, f"round{r + 1}-{name}")
                data = run_side(sides[name], argv, side_out)
                got[name] = values(data)
                log(f"round {r + 1}/{rounds}: side {name} done ({data['elapsed_s']} s)")
            results.append({"order": order, **got})
    except (ABError, OSError, subprocess.SubprocessError) as exc:
        log(f"{prog} --ab: {exc}")
        return 1
    rows = compare(results)
    table = markdown(a, b, rows, rounds)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "ab.md"), "w") as f:
        f.write(table)
    with open(os.path.join(out, "ab.json"), "w") as f:
        json.dump(
            {
                "a": a.label,
                "b": b.label,
                "measures": measures,
                "orders": [r["order"] for r in results],
                "rows": rows,
            },
            f,
            indent=1,
        )
    print(table, end="")
    log(f"wrote {os.path.relpath(os.path.join(out, 'ab.md'))} and ab.json")
    return 0
