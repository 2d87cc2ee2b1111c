"""The optional libraries the tests use, and the one rule for each: a test that needs one
skips without it, but with ``CI=true`` (CI must run every test) its absence fails.

The README's test command (``pip install '.[test]' && python -m pytest``) installs the test
extra and no integration: a newcomer has no Airflow, and must still see the suite green.
``INTEGRATIONS`` names each library the test extra does not bring, with the tests that
need it (``TOOLS`` the programs), so ``.ci/run``'s pass without them (in a venv with only
``.[test]``, CI unset, the tools off PATH: every test file collected, then the tests
marked ``without_integrations`` run) and this module's skips agree. A new integration is
one line in ``INTEGRATIONS`` (its tests call ``require``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType
from typing import NamedTuple

import pytest


class Integration(NamedTuple):
    """A library (or program) the test extra does not bring: how to install it, and the
    tests that behave differently without it."""

    install: str
    tests: tuple[str, ...]  # their folders, files or tests (file::name), under tests/


AIRFLOW = "pip install 'pipepool[airflow]' (.ci/install-airflow.sh)"
INTEGRATIONS = {
    "airflow": Integration(AIRFLOW, ("airflow_face",)),
    "celery": Integration("pip install 'pipepool[celery]'", ("celery_pool", "celery_scenarios")),
    "redis": Integration("pip install 'pipepool[celery]'", ("celery_scenarios",)),
}
# Libraries of another extra of the project that a test needs (the lint extra's mypy:
# tests/futures/test_seam_types.py), which .ci/run installs: how to install each.
EXTRAS = {"mypy": "pip install '.[lint]'"}
# Programs .ci/run installs (Debian packages) that a newcomer may lack: the tests that
# compare with them skip without them (CI=true makes the hyperfine one fail), and .ci/run's
# pass without integrations hides them from PATH.
TOOLS = {
    "parallel": Integration(
        "apt-get install parallel", ("cli/test_halt.py::test_gnu_parallel_agrees",)
    ),
    "hyperfine": Integration(
        "apt-get install hyperfine",
        ("measure/test_export.py::test_the_hyperfine_export_matches_real_hyperfine_s",),
    ),
}
# Tests that look for every integration (and so behave differently without one), run in
# the pass without them beside the integrations' own.
CHECKERS = (
    "project/test_docs_api.py",
    # imports every module of benchmarks/, whose Celery harness needs Celery
    "project/test_benchmarks_targets.py::"
    "test_the_suite_imports_and_notes_its_missing_peers_without_them",
)


def marked(nodeid: str) -> bool:
    """Whether test ``nodeid`` (``tests/...``) is one of those the pass without the
    integrations runs: under an integration's folder, a tool's test, or a checker."""
    for where in [
        *(where for i in INTEGRATIONS.values() for where in i.tests),
        *(where for t in TOOLS.values() for where in t.tests),
        *CHECKERS,
    ]:
        prefix = "tests/" + where
        if nodeid == prefix or nodeid.startswith((prefix + "/", prefix + "::", prefix + "[")):
            return True
    return False


def in_ci() -> bool:
    """Whether CI runs this (``CI=true``, as GitHub sets it and .ci/run's CI does)."""
    return os.environ.get("CI", "").lower() == "true"


def available(name: str) -> bool:
    """Whether library ``name`` is installed, without importing it."""
    return importlib.util.find_spec(name) is not None


def require(name: str, *, load: bool = True) -> ModuleType | None:
    """Library ``name`` for the calling test (or module, at its top): imported (unless
    ``load`` is false: then only looked for), else the caller is skipped, or with
    ``CI=true`` an ImportError says what to install. The libraries of the test extra
    (distributed, joblib, numpy, ...) follow the same rule: missing only where `.[test]`
    was not installed."""
    if available(name):
        return importlib.import_module(name) if load else None
    if name in INTEGRATIONS:
        how = INTEGRATIONS[name].install
    else:
        how = EXTRAS.get(name, "pip install '.[test]'")
    if in_ci():
        raise ImportError(f"CI=true but {name} is not installed ({how}): its tests must run")
    pytest.skip(f"{name} is not installed ({how})", allow_module_level=True)
