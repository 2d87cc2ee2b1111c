"""Imported first by every Airflow test module: a private AIRFLOW_HOME, then Airflow.

Airflow writes ``airflow.cfg`` and its database under AIRFLOW_HOME on first import, so
the tests point it at a temporary directory before anything imports ``airflow``. Without
Airflow the tests skip locally; with ``CI=true`` a missing Airflow is an error (``.ci/run``
installs it through ``.ci/install-airflow.sh``), never a silent skip.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import optional

if "PIPEPOOL_AIRFLOW_TEST_HOME" not in os.environ:
    _home = tempfile.mkdtemp(prefix="pipepool-airflow-home-")
    atexit.register(shutil.rmtree, _home, True)
    os.environ["PIPEPOOL_AIRFLOW_TEST_HOME"] = _home
    os.environ["AIRFLOW_HOME"] = _home
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    # A fixed secret: Airflow otherwise warns and makes one per process.
    os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", "pipepool-tests-only")
HOME = os.environ["AIRFLOW_HOME"]


def require_airflow() -> None:
    """Skip the calling module without Airflow, unless CI=true: then fail (optional.py's
    rule). Looks for it without importing it: Airflow itself is imported by the tests that
    need it, which run last (conftest.py), so the rest of the suite never forks with it
    loaded."""
    optional.require("airflow", load=False)
