"""The measuring room of ``pipepool run``: what makes a batch of commands a benchmark.

``run/`` runs the jobs (GNU parallel's runner); this room measures them. It owns its
options (``add_options``: their own group of the parser, and ``MeasureOptions``) and
meets the runner through what ``run/_seam.py`` declares, which ``Measurement``
satisfies: plan the CPU slots, the probe a job's worker runs around the job, the
joblog's columns, the summary's lines and JSON keys. A measuring option is added here.

``_options``: the options and their usage rules; ``_measurement``: ``Measurement``;
``_slots``: the pinned plan on the CPUs no other run leases, and ``--show-plan``;
``_placement``: the plan's rules over the host's topology (``pipepool.host``);
``_lease``: the CPU leases between runs; ``_probe``: what the worker does around a job
(pin, wait for quiet, sample) and the record it makes; ``_noise``: the noise verdict;
``_quiet``: ``--wait-quiet``; ``_report``: the summary's noise, waits, ``--repeat``
statistics and ``--compare`` verdict; ``_compare``: the bootstrap ratio; ``_export``:
pyperf's and hyperfine's files; ``_machine``: the machine's metadata.
"""

from typing import TYPE_CHECKING

from .. import _lazy
from ._measurement import Measurement
from ._options import NUMBER_OPTIONS, MeasureError, MeasureOptions, add_options

if TYPE_CHECKING:  # what __getattr__ loads at run time, as the type checker sees it
    from ._machine import machine_metadata
    from ._slots import show_plan

# Loaded on first use: the socket module alone costs a run's start-up ~15 ms.
_LAZY = {"machine_metadata": "_machine", "show_plan": "_slots"}

if not TYPE_CHECKING:  # the type checker reads the names imported above, not this hook
    __getattr__, __dir__ = _lazy.exports(globals(), _LAZY)


__all__ = [
    "NUMBER_OPTIONS",
    "MeasureError",
    "MeasureOptions",
    "Measurement",
    "add_options",
    "machine_metadata",
    "show_plan",
]
