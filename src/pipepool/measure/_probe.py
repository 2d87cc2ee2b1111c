"""What a job's worker does around the job for the measuring room: pin itself to the
job's slot (``--pin``: the job and all it starts inherit the mask), wait for quiet CPUs
(``--wait-quiet``, ``_quiet``), and sample what else ran meanwhile (``_noise``); then
the attempt's measured record, the part of its JSON record that is this room's.

A ``Probe`` is made by the runner for each attempt and travels in its spec to the
worker (``run/_seam.py`` declares what the worker calls); the worker's copy keeps what
it sampled on itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .. import host
from . import _noise
from ._quiet import wait_quiet


@dataclass(slots=True)
class Probe:
    cpus: tuple[int, ...] | None  # --pin: the slot's CPUs, the job's whole tree's
    noise: bool  # sample what else ran meanwhile (--pin, --repeat)
    threshold: float = _noise.CONTENTION  # --noise-threshold
    wait_quiet: float | None = None  # --wait-quiet MAX: s to wait for quiet CPUs first
    allowance: int = 0  # CPUs the run's other jobs may be using (no --pin: -j - 1)
    stat: str | None = None  # where --wait-quiet looks, if not /proc/stat (a test's)
    quiet: dict | None = None  # (in the worker) the wait's record
    before: host.Sample | None = None  # (in the worker) the counters at the job's start

    @property
    def wait(self) -> float:
        return self.wait_quiet or 0.0

    def prepare(self) -> bool:
        """Pin this worker to the slot, then wait for quiet: True if it waited."""
        if self.cpus is not None:
            os.sched_setaffinity(0, self.cpus)
        if self.wait_quiet is None:
            return False
        cpus = self.cpus if self.cpus is not None else tuple(sorted(_usable()))
        self.quiet = wait_quiet(cpus, self.wait_quiet, allowance=self.allowance, stat=self.stat)
        return True

    def start(self) -> None:
        if self.noise:
            self.before = host.sample(self.cpus)

    def finish(self, cpu_time: float | None) -> dict[str, object]:
        noise = None
        if cpu_time is not None and self.before is not None:
            width = len(self.cpus) if self.cpus else len(_usable())
            after = host.sample(self.cpus)
            noise = _noise.measure(self.before, after, cpu_time, width, self.threshold)
        return record(self.cpus, noise, self.quiet)


def record(
    cpus: tuple[int, ...] | None, noise: dict | None = None, quiet: dict | None = None
) -> dict[str, object]:
    """The measured part of a job's JSON record: its CPUs (``--pin``), whether it was
    noisy (null: not judged) and the measures behind it, and its wait for quiet."""
    return {
        "cpus": list(cpus) if cpus is not None else None,
        "noisy": None if not noise else bool(noise.get("noisy")),
        "noise": noise or None,
        "wait_quiet": quiet,
    }


def _usable() -> set[int]:
    allowed = host.allowed_cpus()
    return set(range(os.cpu_count() or 1)) if allowed is None else allowed  # None: macOS
