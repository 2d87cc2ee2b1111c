"""Write a suite run's results: markdown tables, JSON, PNG plots.

Everything is rendered from the JSON document alone, so a run's report can be redrawn
later without running anything::

    python -m benchmarks.report benchmarks/results/results.json
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from . import _noise
from ._plots import LATENCY_PNG, SWEEP_PNG, write_plots
from .contenders import PEER_COLUMNS

MD_NAME = "results.md"
JSON_NAME = "results.json"


def write_all(data: dict[str, Any], out_dir: str, *, plots: bool = True) -> list[str]:
    """Write results.md, results.json and (matplotlib permitting) the plots."""
    os.makedirs(out_dir, exist_ok=True)
    written = []
    if plots:
        data["plots"] = write_plots(data, out_dir)
    else:
        data["plots"] = {"note": "plots not requested (--no-plots)"}
    json_path = os.path.join(out_dir, JSON_NAME)
    with open(json_path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    written.append(json_path)
    md_path = os.path.join(out_dir, MD_NAME)
    with open(md_path, "w") as f:
        f.write(markdown(data))
    written.append(md_path)
    written += [os.path.join(out_dir, name) for name in data["plots"].get("files", [])]
    return written


# -- markdown -------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit in ("tasks/s", "items/s"):
        return f"{value:,.0f}"
    if unit == "µs/task":
        return f"{value:,.1f}" if value >= 1 else f"{value:.3f}"
    if unit.startswith("µs"):
        return f"{value:,.0f}"
    if unit == "MB/s":
        return f"{value:,.0f}"
    if unit == "ms":
        return f"{value:,.1f}"
    if unit == "s":
        return f"{value:,.2f}" if value >= 1 else f"{value:.3g}"
    if unit == "calls/task":
        return f"{value:,.1f}"
    if unit == "switches/s":
        return f"{value:,.1f}"
    return f"{value:,.3g}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def _table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _label(data: dict[str, Any], key: str) -> str:
    c = data["contenders"].get(key)
    return c["label"] if c else key


def targets_markdown(data: dict[str, Any]) -> str:
    rows = []
    for t in data["targets"]:
        unit = _unit_of(data, t["measure"], t["field"])
        sign = "+" if t.get("over") else ""  # an overhead above a baseline
        ours = f"{_label(data, t['ours'])}: {sign}{_fmt(t['ours_value'], unit)} {unit}"
        if t["peer"] in data["contenders"]:
            peer = f"{_label(data, t['peer'])}: {sign}{_fmt(t['peer_value'], unit)} {unit}"
        else:
            peer = f"{t['peer']}: {_fmt(t['peer_value'], unit)} {unit}"
        if t.get("over"):
            peer += f" (above {_label(data, t['over'])}: {_fmt(t['over_value'], unit)} {unit})"
        met = {True: "**met**", False: "not met", None: "n/a"}[t["met"]]
        rows.append([t["target"], ours, peer, _ratio(t["ratio"]), t["goal"], met])
    return _table(
        ["target", "pipepool", "compared with", "ratio", "goal", "met"],
        rows,
        ["---", "---", "---", "---:", "---", "---"],
    )


def _unit_of(data: dict[str, Any], measure: str, field: str | None) -> str:
    m = data["measures"].get(measure, {})
    if field in ("parent_cpu_us", "worker_cpu_us"):
        return "µs/task"
    if field in ("p50_us", "p99_us", "mean_us"):
        return "µs"
    if field == "seconds":
        return "s"
    return m.get("unit", "")


def _better(m: dict[str, Any], a: float, b: float) -> float:
    """How many times better ``a`` is than ``b`` (>1: a is better)."""
    return a / b if m["better"] == "higher" else b / a


CPU_MEASURES = ("tiny", "mib", "kib64", "sweep", "map", "joblib-tiny", "joblib-mib")
SPECIAL = ("sweep", "hol")  # measures with a section of their own (below)


def _measure_sections(data: dict[str, Any], name: str) -> list[str]:
    """One table per parameter: each contender's median, its spread, the measure's
    extra columns (CPU per task, ``columns`` of the registry) and its ratio to each peer."""
    m = data["measures"][name]
    unit, fld = m["unit"], m["field"]
    columns = [tuple(c) for c in m.get("columns", [])]
    out = [f"## {m['title']}"]
    for param, by_key in m["params"].items():
        peers = [k for k in PEER_COLUMNS if by_key.get(k, {}).get("median")]
        header = ["contender", f"{unit} (median)", "min to max"]
        if name in CPU_MEASURES:
            header += ["parent CPU µs/task", "worker CPU µs/task"]
        if name in ("latency", "cancel"):
            header = ["contender", "p50 µs", "p99 µs", "mean µs", "p50 min to max"]
        if name == "cancel":
            header += ["cancelled"]
        if name == "calls":
            header = ["contender", "Python calls/task", "min to max", "builtin calls/task"]
        header += [title for title, _, _ in columns]
        header += [f"vs {PEER_COLUMNS[k]}" for k in peers]
        rows = []
        for key, entry in by_key.items():
            med = entry.get("median")
            if not med:
                rows.append(
                    [_label(data, key), "error: " + "; ".join(entry.get("errors", []))]
                    + [""] * (len(header) - 2)
                )
                continue
            spread = f"{_fmt(entry['min'], unit)} to {_fmt(entry['max'], unit)}"
            if name in ("latency", "cancel"):
                row = [
                    _label(data, key),
                    _fmt(med["p50_us"], "µs"),
                    _fmt(med["p99_us"], "µs"),
                    _fmt(med["mean_us"], "µs"),
                    spread,
                ]
            else:
                row = [_label(data, key), _fmt(med[fld], unit), spread]
            if name in CPU_MEASURES:
                row += [f"{med['parent_cpu_us']:,.3g}", f"{med['worker_cpu_us']:,.3g}"]
            if name == "cancel":
                row += [f"{med['cancelled']:.0%}"]
            if name == "calls":
                row += [_fmt(med["c_calls"], unit)]
            row += [_fmt(med.get(field), col_unit) for _, field, col_unit in columns]
            for peer in peers:
                row.append(_ratio(_better(m, med[fld], by_key[peer]["median"][fld])))
            if len(entry.get("errors", [])):
                row[0] += f" ({entry['ok']}/{len(entry['samples'])} samples ok)"
            rows.append(row)
        out.append(f"### {_param_title(name, param)}\n\n" + _table(header, rows))
    return out


COST_ROWS = ("{local}", "ppe-submit", "airflow", "std-submit")  # cost_markdown's rows


def cost_markdown(data: dict[str, Any]) -> str:
    """Parent and worker CPU per task (``tiny``) and Python-level calls per task in the
    parent (``calls``) of LocalExecutor, ProcessPoolExecutor, the Airflow-style pair and
    the stdlib's pool, at each parallelism: the figures load moves least."""
    tiny = data["measures"].get("tiny", {}).get("params", {})
    calls = data["measures"].get("calls", {}).get("params", {})
    params = list(dict.fromkeys([*tiny, *calls]))
    if not params:
        return ""
    local = data["local_choice"]["key"]
    header = ["contender"]
    for p in params:
        header += [f"parent CPU µs, p={p}", f"worker CPU µs, p={p}", f"Python calls, p={p}"]
    rows = []
    for key in (k.format(local=local) for k in COST_ROWS):
        row = [_label(data, key)]
        for p in params:
            med = tiny.get(p, {}).get(key, {}).get("median") or {}
            counted = calls.get(p, {}).get(key, {}).get("median") or {}
            row += [
                _fmt(med.get("parent_cpu_us"), "µs/task"),
                _fmt(med.get("worker_cpu_us"), "µs/task"),
                _fmt(counted.get("py_calls"), "calls/task"),
            ]
        if any(cell != "n/a" for cell in row[1:]):
            rows.append(row)
    if not rows:
        return ""
    return (
        "Per task, from the tiny-task batches: CPU of the parent (all its threads) and of "
        "the workers, and Python-level function calls in the parent (the `calls` "
        "measure; builtin calls are in its table).\n\n" + _table(header, rows)
    )


def _param_title(measure: str, param: str) -> str:
    if measure in ("startup", "startup-map"):
        method, p = param.split(":")
        return f"{method}, parallelism {p}"
    if measure == "hol":
        state, workers = param.split(":")
        return f"{state} pool, {workers} workers"
    if measure == "recycle":
        return f"{param}, one worker"
    return f"parallelism {param}"


def _sweep_section(data: dict[str, Any]) -> str:
    m = data["measures"]["sweep"]
    params = list(m["params"])
    keys: list[str] = []
    for by_key in m["params"].values():
        keys += [k for k in by_key if k not in keys]
    rows = []
    for key in keys:
        row = [_label(data, key)]
        for p in params:
            entry = m["params"][p].get(key, {})
            row.append(_fmt(entry["median"]["rate"], "tasks/s") if entry.get("median") else "n/a")
        rows.append(row)
    return (
        f"## {m['title']}\n\nMedian tasks/s at each parallelism "
        f"(plot: `{SWEEP_PNG}`).\n\n" + _table(["contender"] + [f"p={p}" for p in params], rows)
    )


def _hol_section(data: dict[str, Any]) -> str:
    m = data["measures"]["hol"]
    cfg = data["config"]
    ideal = cfg["hol_count"] * cfg["hol_short"] / max(1, cfg["hol_workers"] - 1)
    rows = []
    for param, by_key in m["params"].items():
        state = param.split(":")[0]
        for key, entry in by_key.items():
            med = entry.get("median")
            if not med:
                rows.append(
                    [
                        _label(data, key),
                        state,
                        "error: " + "; ".join(entry.get("errors", [])),
                        "",
                        "",
                    ]
                )
                continue
            s = med["seconds"]
            blocked = "blocked behind the long task" if s >= 0.9 * cfg["hol_long"] else "no"
            rows.append(
                [_label(data, key), state, _fmt(s, "s"), f"{s / cfg['hol_long']:.2f}", blocked]
            )
    return (
        f"## {m['title']}\n\nWith no blocking the short ones take about "
        f"{ideal:.2f} s of sleeping spread over the other {cfg['hol_workers'] - 1} "
        "workers, plus the pool's overhead; a short task queued behind the long one "
        f"waits its {cfg['hol_long']:g} s out.\n\n"
        + _table(
            [
                "contender",
                "pool",
                "s until the short tasks are done",
                "÷ long task",
                "head-of-line blocking",
            ],
            rows,
            ["---", "---", "---:", "---:", "---"],
        )
    )


def header_lines(data: dict[str, Any]) -> list[str]:
    """The run's header bullets: the machine, the code, the command and how busy the
    machine was (a noisy run says so first). The README's block starts with these."""
    mach = data["machine"]
    cfg = data["config"]
    cores = f"{mach['cores']} cores"
    if mach.get("usable_cores") not in (None, mach["cores"]):
        cores += f" ({mach['usable_cores']} usable)"
    noise = data.get("noise")
    lines = []
    if noise is None:  # a run from before the machine's load was recorded in full
        load = (
            f"1-minute load average {_load(data['load_1min']['before'])} before, "
            f"{_load(data['load_1min']['after'])} after; the CPU other processes used "
            "was not recorded"
        )
    else:
        load = _noise.describe(noise)
        if noise["noisy"]:
            lines.append(
                "- **Noisy run**: "
                + "; ".join(noise["reasons"])
                + ". Its figures do not count: load slows the peers' helper threads more "
                "than pipepool, so it flatters pipepool; it does not replace the "
                "published results or the README's table."
            )
    lines += [
        f"- **Machine**: {cores}"
        + (f", {mach['cpu']}" if mach.get("cpu") else "")
        + f", {mach['machine']}; {mach['python']}; kernel {mach['kernel']}",
        f"- **pipepool**: {mach['pipepool']}, git {mach.get('git') or 'unknown'}; "
        f"default start method {mach['default_start_method']}; "
        f"loky {mach.get('loky') or 'not installed'}",
        f"- **Command**: `{data['command']}` ({data['preset']} configuration: "
        f"{cfg['rounds']} interleaved rounds, start-up {cfg.get('startup_rounds', cfg['rounds'])}, "
        f"sweep {cfg['sweep_rounds']}, long tasks {cfg['hol_rounds']}; medians), "
        f"started {data['started']}, took {data['elapsed_s']:.0f} s",
        f"- **Load**: {load}" + ("" if noise is None or noise["noisy"] else " (a quiet run)"),
    ]
    speed = None if noise is None else noise.get("speed")
    if speed is not None:  # (runs from before the speed probes have none)
        lines.append(f"- **Speed**: {_noise.describe_speed(speed)}")
    return lines


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# pipepool benchmark results",
        "",
        *header_lines(data),
        f"- **LocalExecutor** in the rows marked so and in the targets: "
        f"{data['local_choice']['why']}",
        f"- **map(chunksize=auto)**: {data['map_auto_chunksize']}",
    ]
    lines += [f"- **Note**: {note}" for note in data["notes"]]
    plots = data.get("plots", {})
    if plots.get("note"):
        lines.append(f"- **Plots**: {plots['note']}")
    lines += [
        "",
        "## Targets",
        "",
        "Each ratio is pipepool's median over the peer's, both from this run "
        "(latency and start-up: time ratios, lower is better).",
        "",
        targets_markdown(data),
        "",
    ]
    cost = cost_markdown(data)
    if cost:
        lines += ["## Cost per task", "", cost, ""]
    lines += [
        "In the tables below, each `vs peer` column says how many times better the row "
        "is than that peer's headline contender: higher throughput, or lower time "
        "(>1 means the row wins). CPU per task: the parent's own CPU (all its threads), "
        "and the workers' (from /proc/<pid>/schedstat), divided by the tasks.",
        "",
    ]
    for name in data["measures"]:  # in the order they ran: the registry's
        if name not in SPECIAL:
            lines += ["\n\n".join(_measure_sections(data, name)), ""]
    if "latency" in data["measures"] and plots.get("files"):
        lines += [f"Latency distribution: `{LATENCY_PNG}`.", ""]
    if "startup" in data["measures"]:
        lines += [
            "Start-up counts until the first result: pipepool and the stdlib pool "
            "start workers as work needs them (the stdlib all at once with fork), "
            "multiprocessing.Pool, loky and the Airflow-style pool start every worker "
            "up front.",
            "",
        ]
    if "sweep" in data["measures"]:
        lines += [_sweep_section(data), ""]
    if "hol" in data["measures"]:
        lines += [_hol_section(data), ""]
    return "\n".join(lines)


def _load(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m benchmarks.report RESULTS.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        data = json.load(f)
    for path in write_all(data, os.path.dirname(os.path.abspath(argv[0]))):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())


# The formatting the README writer shares (benchmarks/readme.py), so both say it alike.
fmt, ratio, table, label, unit_of = _fmt, _ratio, _table, _label, _unit_of
