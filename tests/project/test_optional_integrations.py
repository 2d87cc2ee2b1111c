"""The one rule for a missing optional library (tests/optional.py): skipped locally, an
error with CI=true; and the tests that behave differently without the integrations are
the ones marked for .ci/run's pass without them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import optional

TESTS = Path(__file__).resolve().parents[1]


def _error_in_ci(name: str) -> str:
    """What ``require(name)`` says with CI=true, failing this test (not skipping it) if it
    does anything but raise ImportError."""
    try:
        optional.require(name)
    except ImportError as exc:
        return str(exc)
    except pytest.skip.Exception as exc:
        pytest.fail(f"skipped with CI=true: {exc}")
    pytest.fail("no error")


def test_a_missing_library_skips_locally_and_fails_in_ci(monkeypatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no_such_library_for_pipepool_tests"):
        optional.require("no_such_library_for_pipepool_tests")
    monkeypatch.setenv("CI", "true")
    error = _error_in_ci("no_such_library_for_pipepool_tests")
    assert error.startswith("CI=true but no_such_library_for_pipepool_tests is not installed")


def test_an_installed_library_is_returned_and_not_loaded_unless_asked(monkeypatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert optional.require("json") is sys.modules["json"]
    sys.modules.pop("this", None)  # the one module whose import prints
    assert optional.require("this", load=False) is None
    assert "this" not in sys.modules


def test_an_integration_names_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setitem(
        optional.INTEGRATIONS,
        "no_such_library_for_pipepool_tests",
        optional.Integration("pip install 'pipepool[nothing]'", ("airflow_face",)),
    )
    assert "(pip install 'pipepool[nothing]')" in _error_in_ci("no_such_library_for_pipepool_tests")


def test_what_the_pass_without_integrations_runs_exists() -> None:
    """A folder or checker misspelt in optional.py would leave its tests out of that pass
    without a word."""
    for integration in optional.INTEGRATIONS.values():
        for folder in integration.tests:
            assert (TESTS / folder).is_dir(), integration
    for tool in optional.TOOLS.values():
        for test in tool.tests:
            path, _, name = test.partition("::")
            assert f"def {name}(" in (TESTS / path).read_text(), tool
    for checker in optional.CHECKERS:
        path, _, name = checker.partition("::")
        assert (TESTS / path).is_file(), checker
        assert not name or f"def {name}(" in (TESTS / path).read_text(), checker


def test_marked_tests_are_those_listed() -> None:
    assert optional.marked("tests/project/test_docs_api.py::test_every_public_name_is_documented")
    assert optional.marked("tests/airflow_face/test_provider.py::test_x[a-b]")
    hyperfine = "tests/measure/test_export.py::test_the_hyperfine_export_matches_real_hyperfine_s"
    assert optional.marked(hyperfine)
    assert optional.marked("tests/cli/test_halt.py::test_gnu_parallel_agrees[row-1]")
    assert not optional.marked("tests/cli/test_halt.py::test_halt_rows[row-1]")
    assert not optional.marked("tests/airflow_face_like/test_x.py::test_y")
    assert not optional.marked("tests/core/test_frames.py::test_header")
    assert optional.marked("tests/celery_pool/test_worker.py::test_x")


def test_the_checkers_are_marked_and_the_rest_is_not() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "--collect-only",
            "-q",
            "-m",
            "without_integrations",
            str(TESTS / "project" / "test_docs_api.py"),
            str(TESTS / "core" / "test_frames.py"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TESTS.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    selected = [line for line in proc.stdout.splitlines() if "::" in line]
    assert selected and all("test_docs_api.py::" in line for line in selected), proc.stdout
