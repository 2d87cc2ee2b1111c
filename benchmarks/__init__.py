"""pipepool's benchmark suite: pipepool against the pools a user would pick instead.

Run it from the repository root::

    python -m benchmarks            # the full suite (about 10 minutes on 2 cores)
    python -m benchmarks --quick    # fewer rounds and tasks: a smoke run

Results go to ``benchmarks/results/`` (``--quick``: ``benchmarks/results/quick/``): a
markdown table with every target's ratio, the JSON of every sample, and PNG plots. The
other scripts in this folder (``loop_bench.py``, ``cli_jobs.py``, ``heartbeat.py``,
``joblib_arrays.py``...) are separate benchmarks of one layer or one case each.
"""

from __future__ import annotations

import importlib.util
import os
import sys

# A source checkout without an install: use src/ (the .so built in place). Looked up, not
# imported: spawned workers of every pool import this package to unpickle the tasks, and
# importing pipepool here would slow the peers' start-up by pipepool's import time.
if importlib.util.find_spec("pipepool") is None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
