"""The suite's plots: throughput against parallelism, and the latency distribution.

Drawn from a run's JSON document alone (``report.write_all`` calls this), as PNGs.
"""

from __future__ import annotations

import os
from typing import Any

SWEEP_PNG = "throughput_vs_parallelism.png"
LATENCY_PNG = "latency.png"


def _label(data: dict[str, Any], key: str) -> str:
    c = data["contenders"].get(key)
    return c["label"] if c else key


def write_plots(data: dict[str, Any], out_dir: str) -> dict[str, Any]:
    """Throughput vs parallelism and the latency distribution, as PNGs."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {"note": "no plots: matplotlib is not installed (pip install '.[bench]')"}
    files = []
    style = {}
    colors = plt.get_cmap("tab20").colors
    for i, (key, c) in enumerate(data["contenders"].items()):  # one color per contender,
        style[key] = {
            "color": colors[i % len(colors)],  # the same in both plots
            "linestyle": "-" if c["family"] == "pipepool" else "--",
            "linewidth": 2.0 if c["family"] == "pipepool" else 1.2,
        }
    machine_line = (
        f"{data['machine']['cores']} cores, {data['machine']['python']}, "
        f"{data['machine']['kernel']}"
    )
    sweep = data["measures"].get("sweep")
    if sweep:
        fig, ax = plt.subplots(figsize=(8, 5))
        params = [int(p) for p in sweep["params"]]
        keys: list[str] = []
        for by_key in sweep["params"].values():
            keys += [k for k in by_key if k not in keys]
        for key in keys:
            xs, ys = [], []
            for p in params:
                entry = sweep["params"][str(p)].get(key, {})
                if entry.get("median"):
                    xs.append(p)
                    ys.append(entry["median"]["rate"])
            if xs:
                ax.plot(xs, ys, marker="o", label=_label(data, key), **style[key])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(params, [str(p) for p in params])
        ax.set_xlabel("parallelism (worker processes)")
        ax.set_ylabel("no-op tasks/s (median)")
        ax.set_title(f"Throughput vs parallelism ({machine_line})", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, SWEEP_PNG), dpi=110)
        plt.close(fig)
        files.append(SWEEP_PNG)
    cdf = data.get("latency_cdf")
    if cdf:
        fig, axes = plt.subplots(1, len(cdf), figsize=(6 * len(cdf), 4.5), squeeze=False)
        for ax, (param, by_key) in zip(axes[0], cdf.items(), strict=True):
            for key, points in by_key.items():
                ax.plot(
                    [us for _, us in points],
                    [q for q, _ in points],
                    label=_label(data, key),
                    **style[key],
                )
            ax.set_xscale("log")
            ax.set_xlabel("round-trip time of one no-op (µs, log)")
            ax.set_ylabel("percentile")
            ax.set_title(f"Latency distribution, parallelism {param}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(machine_line, fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, LATENCY_PNG), dpi=110)
        plt.close(fig)
        files.append(LATENCY_PNG)
    return {"files": files}
