"""Which Airflow this is, as constants the executor's features are gated on.

One executor class serves Airflow 3.0 through 3.3 (docs/airflow.md, "Supported
versions"); what differs between them is decided here once, from the installed
version, never by catching an ImportError:

* 3.0: constructor keyword ``team_id``; the scheduler hands workloads over only to an
  executor that overrides ``queue_workload``; no ``self.conf``;
* 3.1: ``team_name``; ``self.conf`` (``get``/``getboolean`` only);
* 3.2: callback workloads (``ExecuteCallback``, ``queued_callbacks``, deadline alerts);
* 3.3: connection tests (``TestConnection``, ``queued_connection_tests``),
  ``BaseExecutor.run_workload`` and ``get_execution_api_server_url``.

``check()`` refuses what cannot work (Airflow 2.x, a pipepool without its compiled loop)
with an ImportError that says why: Airflow lists only executors that import cleanly.
"""

from __future__ import annotations

import importlib
import re

import airflow

VERSION: tuple[int, int] = (0, 0)
"""(major, minor) of the installed Airflow; pre-releases count as their release."""
_match = re.match(r"(\d+)\.(\d+)", airflow.__version__)
if _match:
    VERSION = (int(_match.group(1)), int(_match.group(2)))

V3_1 = VERSION >= (3, 1)
"""``team_name`` (not ``team_id``), ``BaseExecutor.conf``."""
V3_2 = VERSION >= (3, 2)
"""Callback workloads (``ExecuteCallback``), ``queued_callbacks``, ``supports_multi_team``."""
V3_3 = VERSION >= (3, 3)
"""Connection-test workloads, ``BaseExecutor.run_workload``, ``get_execution_api_server_url``."""

OLDEST = (3, 0)
"""The oldest Airflow the executor supports."""


def check(version: tuple[int, int] = VERSION, *, compiled: bool | None = None) -> None:
    """Raise ImportError, saying why, where the executor cannot run: an Airflow older
    than 3.0 (no workloads, no task SDK), or a pipepool built without its compiled loop
    (a scheduler must not quietly run on the pure-Python twin). ``compiled`` defaults to
    whether ``pipepool.loop._loop`` imports."""
    if version < OLDEST:
        raise ImportError(
            "pipepool.airflow.PipepoolExecutor needs apache-airflow 3.0 or newer (this is "
            f"{'.'.join(map(str, version))}: Airflow 2.x has no workloads nor task SDK); "
            "install a supported one with: pip install 'pipepool[airflow]'"
        )
    if compiled is None:
        try:
            importlib.import_module("pipepool.loop._loop")
        except ImportError:
            compiled = False
        else:
            compiled = True
    if not compiled:
        raise ImportError(
            "pipepool.airflow.PipepoolExecutor needs pipepool's compiled loop "
            "(pipepool.loop._loop), which this installation lacks: install a pipepool "
            "wheel, or build it with a C compiler and without PIPEPOOL_PURE=1"
        )
