#!/usr/bin/env bash
# Installs Apache Airflow into the active virtual environment (.ci/run's .venv-ci) for the
# PipepoolExecutor tests in tests/airflow_face/, which must run (not skip) in CI. Airflow is
# not a dependency of the library, only of the `airflow` extra; it shares the venv with
# the `test` extra (pip check finds no conflict). The version is the one the tests
# certify (docs/airflow.md): the newest supported minor here; the workflow matrix
# (.github/workflows/airflow.yml) runs this with AIRFLOW_VERSION=3.0.x ... 3.3.x.
# Measured on the 2-core CI machine: about 50 s with a cold pip cache.
#
# Airflow's own constraints files are not on PyPI, so what a release needs and does not
# cap is capped here, to the lines the next release pins (measured 2026-12 with each):
# 3.0 allows any FastAPI, but under today's FastAPI and cadwyn its execution API rejects
# every task runner's request body ("Input should be a valid dictionary"; every task
# fails): FastAPI <0.118 as 3.1 pins, with its cadwyn. 3.2 allows any FastAPI >=0.129,
# but under today's cadwyn (9) its dag-processor dies building the execution API
# ("needs a discriminator field"): FastAPI <0.137 as 3.3 pins, cadwyn <8.
set -euo pipefail
AIRFLOW_VERSION="${AIRFLOW_VERSION:-3.3.2}"
pins=()
case "$AIRFLOW_VERSION" in
    3.0.*) pins=("fastapi[standard]>=0.116,<0.118" "cadwyn<6") ;;
    3.2.*) pins=("fastapi[standard-no-fastapi-cloud-cli]>=0.129,<0.137" "cadwyn<8") ;;
esac
# The installer: pip, or the one the caller names in PIP (.ci/run: "uv pip").
read -ra pip <<< "${PIP:-python -m pip}"
"${pip[@]}" install --quiet "apache-airflow==${AIRFLOW_VERSION}" "${pins[@]}"
"${pip[@]}" check
