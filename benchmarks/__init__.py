"""pipepool's benchmark suite: pipepool against the pools a user would pick instead.

Run it from the repository root::

    python -m benchmarks            # the full suite (about 10 minutes on 2 cores)
    python -m benchmarks --quick    # fewer rounds and tasks: a smoke run
    pipepool bench --full           # the same, from the CLI of a source checkout

Results go to ``benchmarks/results/`` (``--quick``: ``benchmarks/results/quick/``): a
markdown table with every target's ratio, the JSON of every sample, and PNG plots. The
other scripts in this folder (``loop_bench.py``, ``cli_jobs.py``) are separate
benchmarks of one layer each.
"""

from __future__ import annotations

import os
import sys

try:
    import pipepool  # noqa: F401
except ImportError:  # a source checkout without an install: use src/ (the .so built in place)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
