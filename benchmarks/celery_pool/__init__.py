"""pipepool's Celery pool beside Celery's prefork pool (issue 43, item 4): same machine,
same Redis, same run, ``-c 2``, the two pools interleaved round by round.

    python -m benchmarks.celery_pool               # the rows (about 10 minutes)
    python -m benchmarks.celery_pool --smoke       # seconds: it works, numbers meaningless
    python -m benchmarks.celery_pool --scenarios   # prefork's hang scenarios, both pools

Needs the ``bench`` extra (Celery, redis-py) and Debian's ``redis-server``, which the
harness starts on a free local port and stops at the end. One job per module: ``app``
(the Celery app and tasks the workers run), ``services`` (Redis and the workers),
``measures`` (one sample of each row), ``scenarios`` (the hang scenarios), ``run`` (the
rounds, medians, ratios and the report).

Registration, for the suite (``benchmarks/suite.py``): ``suite_step(argv)`` runs this
harness as one step and returns its exit status. Nothing is imported here: every worker
imports ``benchmarks.celery_pool.app``, and this package's ``__init__`` with it.
"""

from __future__ import annotations


def suite_step(argv: list[str] | None = None) -> int:
    """Run the harness (``python -m benchmarks.celery_pool`` with ``argv``)."""
    from .run import main

    return main(argv)
