#!/usr/bin/env bash
# Installs Apache Airflow into the active virtual environment (.ci/run's .venv-ci) for the
# PipepoolExecutor tests in tests/airflow_face/, which must run (not skip) in CI. Airflow is
# not a dependency of the library, only of the `airflow` extra; it shares the venv with
# the `test` extra (pip check finds no conflict). The version is the one the tests
# certify (docs/airflow.md); override with AIRFLOW_VERSION=... to try another 3.3+.
# Measured on the 2-core CI machine: about 50 s with a cold pip cache.
set -euo pipefail
AIRFLOW_VERSION="${AIRFLOW_VERSION:-3.3.2}"
python -m pip install --quiet "apache-airflow==${AIRFLOW_VERSION}"
python -m pip check
