"""What machine a run ran on, for exports and ``--json``: CPU model, topology, kernel,
frequency governor where readable (null where not). Only what the system tells without
privileges; the host room reads ``/proc`` and ``/sys`` under a root tests can point
elsewhere (``pipepool.host``)."""

from __future__ import annotations

import os
import platform
import socket
import time

from .. import host


def machine_metadata(root: str = host.ROOT) -> dict[str, object]:
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
    found["cpu_model_name"] = host.cpu_model(root)
    found["cpu_governor"] = host.cpu_governor(root)
    allowed = host.allowed_cpus()
    if allowed is not None and root == host.ROOT:
        found["cpu_affinity"] = _ranges(sorted(allowed))
    found["topology"] = None
    try:
        top = host.read_topology(root)
        found["topology"] = (
            f"{len(top.groups('package'))} package(s), {len(top.cores())} core(s), "
            f"{len(top.cpus)} CPU(s), {len(top.groups('llc'))} last-level cache(s), "
            f"{len(set(top.groups('node')) - {-1}) or 1} NUMA node(s)"
        )
    except (OSError, ValueError):
        pass
    return found


def _ranges(cpus: list[int]) -> str:
    from ._placement import cpu_list

    return cpu_list(cpus)
