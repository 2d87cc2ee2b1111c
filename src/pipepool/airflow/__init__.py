"""pipepool for Apache Airflow 3.0-3.3: ``PipepoolExecutor``, Airflow's LocalExecutor on a
pool whose parent never blocks on a pipe (user guide: ``docs/airflow.md``).

Select it with ``[core] executor = pipepool.airflow.PipepoolExecutor`` (or
``AIRFLOW__CORE__EXECUTOR``) after ``pip install 'pipepool[airflow]'``. The executor (and
with it Airflow) is imported on first use of ``PipepoolExecutor``: Airflow's provider
discovery imports ``provider`` from this package while Airflow itself is still loading.
The rest of pipepool never imports Airflow.

Files: ``executor.py`` the executor (scheduler side), with ``_rounds.py`` its pool's
side (rounds, the driver thread, events into states) and ``_workloads.py`` what differs
per workload kind and version; ``_worker.py`` what runs inside a worker, ``_procs.py``
process groups, memory and the OOM-kill counter (scheduler side), ``_versions.py`` the
Airflow version gates, ``provider.py`` the provider entry point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _lazy

if TYPE_CHECKING:
    from .executor import PipepoolExecutor

__all__ = ["PipepoolExecutor"]


if not TYPE_CHECKING:  # the checker sees the import above, never an Any-typed hook
    __getattr__, __dir__ = _lazy.exports(globals(), {"PipepoolExecutor": "executor"})
