"""``--wait-quiet MAX``: before each job starts, wait until its CPUs are quiet, at most
MAX seconds.

Per job and in its worker, not once before the run: a neighbour that starts halfway
through a suite disturbs the jobs after it, and only the worker knows the job's CPUs
(its ``--pin`` CPUs, else every CPU it may use). The measure is the run's own
``others_cpu`` (``_noise``): the busy time of those CPUs in ``/proc/stat`` over a
``WINDOW``, as a share of the CPU time they had. The machine-wide measures
(``procs_running``, CPU pressure) count this run's own jobs and miss a hog that has a
CPU to itself, so they are recorded beside the verdict but do not decide it.

Without ``--pin`` the run's other jobs may be busy on those CPUs: ``allowance`` CPUs
(``-j`` less one) are taken as theirs, and the share is of the CPUs left. With ``-j``
at least the CPUs and no ``--pin`` nothing is left to judge: the job starts at once and
its record says ``quiet: null``.
"""

from __future__ import annotations

import time

from ..host import others_cpu
from . import _noise

WINDOW = 0.25  # s per look: 25 clock ticks per CPU, short enough to start promptly
QUIET = 0.25  # others used at most this share of the job's CPUs' time in a window


def wait_quiet(
    cpus: tuple[int, ...] | list[int],
    limit: float,
    *,
    allowance: int = 0,
    stat: str | None = None,
) -> dict[str, object]:
    """Wait until others use at most ``QUIET`` of ``cpus`` over a ``WINDOW``, at most
    ``limit`` s; the record of the wait (``waited`` s, ``quiet``: reached or not, None
    when it cannot be told, ``others``: the share in the last window, ``looks``: the
    windows it took; 1 when the CPUs were quiet at once). ``stat``: a file read in place
    of ``/proc/stat`` (a test's)."""
    t0 = time.monotonic()
    room = len(cpus) - allowance  # CPUs not taken as the run's own other jobs'
    before = _noise.sample(cpus, stat)
    if before is None or room <= 0:
        why = "no /proc/stat" if before is None else "-j at least the CPUs without --pin"
        return {"waited": 0.0, "quiet": None, "others": None, "looks": 0, "why": why}
    deadline = t0 + limit
    looks = 0
    while True:
        looks += 1
        time.sleep(max(min(WINDOW, deadline - time.monotonic()), 0.01))
        after = _noise.sample(cpus, stat)
        if after is None:  # /proc/stat went away: nothing more to be told
            return {"waited": round(time.monotonic() - t0, 3), "quiet": None,
                    "others": None, "looks": looks, "why": "no /proc/stat"}  # fmt: skip
        others = share(before, after, len(cpus), allowance)
        now = time.monotonic()
        if others <= QUIET or now >= deadline:
            return {
                "waited": round(now - t0, 3),
                "quiet": others <= QUIET,
                "others": round(others, 3),
                "looks": looks,
                "procs_running": after.running,
                "why": None if others <= QUIET else f"not quiet after {limit:g} s",
            }
        before = after


def share(before: _noise.Sample, after: _noise.Sample, width: int, allowance: int = 0) -> float:
    """Of the CPU time the ``width`` CPUs had between two samples, less ``allowance``
    CPUs' worth, the share others used (0-1)."""
    span = max(after.t - before.t, 1e-9)
    if width - allowance <= 0:
        return 0.0
    # the run's other jobs' allowance counts as the caller's own CPU
    _, others = others_cpu(after.busy - before.busy, allowance * span, span, width - allowance)
    return min(others, 1.0)
