"""What machine a run ran on, for exports and ``--json``: CPU model, topology, kernel,
frequency governor where readable (null where not). Only what the system tells without
privileges; ``/proc`` and ``/sys`` are read under a root tests can point elsewhere."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time


def machine_metadata(root: str = "/") -> dict[str, object]:
    """This machine's description; ``root``: where its /proc and /sys are (a captured
    tree in tests: the names of this host, kernel and Python are still this one's)."""
    from .. import __version__

    found: dict[str, object] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "kernel": platform.release(),
        "cpu_count": os.cpu_count() or 0,
        "python_version": platform.python_version(),
        "pipepool_version": __version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    found["cpu_model_name"] = _cpu_model(root) or None
    governor = _read(os.path.join(root, "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"))
    found["cpu_governor"] = governor or None
    if hasattr(os, "sched_getaffinity") and root == "/":
        found["cpu_affinity"] = _ranges(sorted(os.sched_getaffinity(0)))
    found["topology"] = None
    try:
        from ._topology import read_topology

        top = read_topology(root)
        found["topology"] = (
            f"{len(top.groups('package'))} package(s), {len(top.cores())} core(s), "
            f"{len(top.cpus)} CPU(s), {len(top.groups('llc'))} last-level cache(s), "
            f"{len(set(top.groups('node')) - {-1}) or 1} NUMA node(s)"
        )
    except (OSError, ValueError):
        pass
    return found


def _cpu_model(root: str = "/") -> str:
    text = _read(os.path.join(root, "proc/cpuinfo"), whole=True)
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            return value.strip()
    if root != "/":
        return ""
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
            )
            return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return platform.processor()


def _read(path: str, *, whole: bool = False) -> str:
    try:
        with open(path) as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return ""
    return text if whole else text.strip()


def _ranges(cpus: list[int]) -> str:
    from ._placement import _list

    return _list(cpus)
