"""The CPUs of a pinned run's job slots: the placement plan (``_placement``) on the CPUs
this process may use and no other run leases (``_lease``), held while the run lasts;
and ``--show-plan``, which prints the plan ``--pin`` would get, runs nothing.

Refused before anything runs: ``--pin`` where there is no CPU affinity API (macOS), a
``-j`` the CPUs cannot honour, too few free CPUs with ``--lease fail``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable

from .. import host
from ..host import Topology, TopologyError, read_topology
from ._lease import Leases, holders
from ._options import MeasureError, MeasureOptions
from ._placement import PlacementError, Plan, plan

LEASE_POLL = 0.2  # s between looks for CPUs other runs released (--lease wait)


def usable_cpus() -> list[int]:
    """The cores this process may run on, sorted; MeasureError where there is no
    affinity API (macOS, Windows)."""
    allowed = host.allowed_cpus()
    if allowed is None or not hasattr(os, "sched_setaffinity"):
        raise MeasureError(
            f"--pin needs CPU affinity (os.sched_setaffinity), which {sys.platform} does "
            "not have; run without --pin to run the jobs unpinned"
        )
    return sorted(allowed)


def pinned_plan(
    options: MeasureOptions, jobs: int, note: Callable[[str], None]
) -> tuple[Plan, Leases | None]:
    """The plan of ``jobs`` slots of ``options.cpus_per_job`` CPUs, on the CPUs no other
    run leases (their leases held: the caller releases them), unless ``--lease ignore``."""
    width = options.cpus_per_job or 1
    usable_cpus()  # refused first where there is no affinity API
    try:
        top = read_topology()
        placed = plan(top, jobs, width, reserve=options.pin_reserve)  # could it fit at all?
        if options.lease == "ignore":
            return placed, None
        leases = Leases()
        return _leased(top, jobs, width, options, leases, note), leases
    except (PlacementError, TopologyError) as exc:
        raise MeasureError(str(exc)) from None


def _leased(
    top: Topology,
    jobs: int,
    width: int,
    options: MeasureOptions,
    leases: Leases,
    note: Callable[[str], None],
) -> Plan:
    """The plan on the CPUs no other run holds, with their leases taken: waiting
    (``--lease wait``) or refusing (``fail``) while too few are free."""
    noted = False
    while True:
        free = leases.take(top.cpus)
        try:
            placed = plan(top.restricted(free), jobs, width, reserve=options.pin_reserve)
        except PlacementError:
            leases.release()
            taken = holders(set(top.cpus) - free, leases.directory)
            who = "; ".join(h.describe() for h in taken) or "(released just now)"
            if options.lease == "fail":
                raise MeasureError(
                    f"--pin: {len(free)} of {len(top.cpus)} CPUs free, too few for -j "
                    f"{jobs} x {width}; leased by other runs: {who} (--lease wait to "
                    "wait for them, --lease ignore to pin anyway)"
                ) from None
            if not noted:
                noted = True
                note(f"--pin: waiting for CPUs leased by other runs: {who}")
            time.sleep(LEASE_POLL)
            continue
        leases.keep({c for s in placed.slots for c in s} | set(placed.reserved))
        return placed


def show_plan(options: MeasureOptions, jobs: int, as_json: bool) -> None:
    """``--show-plan``: the placement ``--pin`` would use, on stdout (JSON with --json);
    MeasureError if there is none."""
    width = options.cpus_per_job or 1
    try:
        if options.sysfs_root:
            top = read_topology(options.sysfs_root)
        else:
            top = read_topology()
            if top.source == "sysctl":  # macOS: the counts, but nothing can be pinned
                top.notes.append("--pin is refused here: macOS has no CPU affinity API")
        placed = plan(top, jobs, width, reserve=options.pin_reserve)
    except (PlacementError, TopologyError) as exc:
        raise MeasureError(str(exc)) from None
    taken = [] if options.sysfs_root else holders(top.cpus)
    if taken and options.lease != "ignore":  # the plan --pin would get now: the free CPUs
        with contextlib.suppress(PlacementError):
            free = top.restricted(set(top.cpus) - {h.cpu for h in taken})
            placed = plan(free, jobs, width, reserve=options.pin_reserve)
    if as_json:
        shown = placed.as_dict()
        shown["leased"] = [
            {"cpu": h.cpu, "pid": h.pid, "since": h.since, "command": h.command} for h in taken
        ]
        print(json.dumps(shown))
        return
    sys.stdout.write(placed.text())
    if taken:
        print("  leased by other runs now (--pin takes the other CPUs, or waits):")
        for holder in taken:
            print(f"    {holder.describe()}")
