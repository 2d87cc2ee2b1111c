"""pipepool's benchmark suite: pipepool against the pools a user would pick instead.

Run it from the repository root::

    python -m benchmarks                        # the full suite (about 15 minutes on 2 cores)
    python -m benchmarks --quick                # fewer rounds and tasks: a smoke run
    python -m benchmarks --only tiny,recycle    # some measures (--help lists them)
    python -m benchmarks --ab REV --only tiny   # this checkout against another (ab.py)
    python -m benchmarks profile ppe-submit     # where a contender's time goes (profile.py)

Results go to ``benchmarks/results/`` (``--quick``: ``benchmarks/results/quick/``): a
markdown table with every target's ratio, the JSON of every sample, and PNG plots.
Every quantity is a measure of the suite; there are no side scripts (docs/benchmarks.md
dates the figures of those it retired).

The modules: ``suite`` (the command line and the machine's state), ``config`` (the
presets and the registry of measures, ``MEASURE_INFO``), ``measures`` (the samples, the
interleaved rounds: ``Suite``, the core measures), ``contenders`` (one adapter per pool
and idiom, ``SPECS``; ``peers/`` holds the peers written here or imported when used),
``targets`` (the ratios and their goals: one goal per quantity), ``report`` and
``readme`` (results.md and .json, the plots, the README's block), ``ab`` (the A/B mode)
and ``profile``; ``tasks``, ``_heavy``, ``_cpu``, ``_calls``, ``_plots``, ``_noise``
and ``_stats`` are their helpers. The families of measures in modules of their own:
``joblib_adapters`` (joblib's Parallel), ``pool_life`` (short-lived pools, the recycle
gap) and ``idle`` (an idle parent's wake-ups).

A new family of measures is one module plus registry lines: the module defines its
samples and a ``run_NAME(suite)`` per measure that calls ``suite.interleave`` with its
contenders (``Spec`` objects: its own, or ``suite.specs(*keys)`` of ``SPECS``);
``config.MEASURE_INFO`` gets an entry per measure (title, unit, primary field, which way
is better, the Config field its ``n`` is, ``"run": "module.run_NAME"``, and any Config
fields it needs in ``Config``); ``targets.TARGETS`` gets its goals (one per quantity,
which tests/project/test_benchmarks_targets.py holds). The report, the JSON, ``--only``
and the A/B mode then take it as they take the others.
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
