"""pipepool for Apache Airflow: ``PipepoolExecutor``, Airflow's LocalExecutor on a pool
whose parent never blocks on a pipe (user guide: ``docs/airflow.md``).

Select it with ``[core] executor = pipepool.airflow.PipepoolExecutor`` (or
``AIRFLOW__CORE__EXECUTOR``) after ``pip install 'pipepool[airflow]'``. Importing this
package imports Airflow; the rest of pipepool never does.

Files: ``executor.py`` the executor (scheduler side), ``_worker.py`` what runs inside a
worker, ``_procs.py`` process groups, memory and the OOM-kill counter (scheduler side).
"""

from .executor import PipepoolExecutor

__all__ = ["PipepoolExecutor"]
