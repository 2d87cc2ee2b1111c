"""pipepool as an Airflow provider: what ``airflow providers list``, ``airflow providers
executors`` and ``airflow config list`` show of it.

Airflow finds this through the ``apache_airflow_provider`` entry point (pyproject.toml)
and calls ``get_provider_info()`` while it discovers providers, so this module imports
nothing but the standard library (neither Airflow nor the executor). ``OPTIONS`` is the
one list of the ``[pipepool]`` options: the executor reads each through Airflow's
config, with the default given here as the fallback.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

SECTION = "pipepool"
"""The airflow.cfg section (``AIRFLOW__PIPEPOOL__<OPTION>`` in the environment)."""

EXECUTOR = "pipepool.airflow.PipepoolExecutor"
"""The executor's import path, as ``[core] executor`` names it."""

OPTIONS: dict[str, dict[str, Any]] = {
    "queue_ahead": {
        "description": (
            "Workloads the scheduler may hand over beyond the running ones; empty: as many "
            "as parallelism. They wait in the scheduler's memory, never in a pipe, and a "
            "worker that finishes starts the next one within 20 ms instead of at the "
            "scheduler's next loop. 0: a workload is handed over only when a worker is free."
        ),
        "type": "integer",
        "example": "8",
        "default": None,
    },
    "max_tasks_per_child": {
        "description": "Recycle a worker after this many workloads (0: never).",
        "type": "integer",
        "example": "100",
        "default": "0",
    },
    "max_rss_mib": {
        "description": (
            "Recycle a worker whose resident memory is above this many MiB after a workload "
            "(0: no limit). It exits once its outcome is sent; a fresh one replaces it."
        ),
        "type": "integer",
        "example": "2048",
        "default": "0",
    },
    "gc_freeze": {
        "description": (
            "Freeze the scheduler's garbage collector while forking workers, so they share "
            "its memory copy-on-write (Airflow PR 58365)."
        ),
        "type": "boolean",
        "example": "False",
        "default": "True",
    },
    "term_grace": {
        "description": "Seconds terminate() gives a SIGTERMed workload before SIGKILL.",
        "type": "float",
        "example": "10",
        "default": "5",
    },
}
"""The ``[pipepool]`` options, as Airflow's provider schema describes an option."""


def get_provider_info() -> dict[str, Any]:
    """The provider dict Airflow's ProvidersManager validates and lists."""
    try:
        version = metadata.version("pipepool")
    except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        version = "0.0.0"
    return {
        # Airflow compares it with the canonical distribution name, and refuses a mismatch.
        "package-name": "pipepool",
        "name": "pipepool",
        "description": (
            "PipepoolExecutor: Airflow's LocalExecutor on a process pool whose scheduler "
            "never blocks on a pipe."
        ),
        "versions": [version],
        "executors": [EXECUTOR],
        "config": {
            SECTION: {
                "description": "PipepoolExecutor (docs/airflow.md in pipepool's source).",
                "options": {
                    name: {**option, "version_added": "0.1.0"} for name, option in OPTIONS.items()
                },
            }
        },
        # Airflow 3.2+: functions that return the provider's CLI commands. Without one,
        # every `airflow` command warns and imports the executor to look for commands.
        "cli": [f"{__name__}.get_cli_commands"],
    }


def get_cli_commands() -> list[Any]:
    """pipepool adds no ``airflow`` subcommand (Airflow 3.2+ calls this for the list)."""
    return []
