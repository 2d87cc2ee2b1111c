"""The sdist's tests run from what the sdist ships. MANIFEST.in ships tests/ whole, but
not benchmarks/ (nor any other package at the repository's root), so a test that imports
one fails there, or only skips where it is the benchmarks' own test and says so. Checked
two ways: every import under tests/, read off the syntax (those inside functions too,
which only a run would reach), and a collection of a copy of tests/ alone, as the sdist
has it, where no module of the checkout can be imported by accident.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pipepool

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

pytestmark = pytest.mark.timeout(120)

# The files under tests/ that may import a package the sdist lacks: the benchmarks' own
# tests, each skipped without benchmarks/ (what the collection below holds for the
# module-level imports), and the Celery tests' Redis server, the harness's RedisServer,
# whose fixture skips without it (pytest.importorskip).
BENCHMARKS_OWN_TESTS = {
    "tests/project/test_benchmarks.py",
    "tests/project/test_benchmarks_ab.py",
    "tests/project/test_benchmarks_peers.py",
    "tests/project/test_benchmarks_targets.py",
    "tests/celery_scenarios/conftest.py",
    "tests/celery_scenarios/test_harness_rows.py",
    "tests/celery_scenarios/test_prefork_hangs.py",
    "tests/celery_pool/conftest.py",
}


def unshipped_packages() -> set[str]:
    """The importable packages at the repository's root but tests/: none is in the sdist
    (the library ships from src/, and MANIFEST.in adds no other package)."""
    return {
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and p.name != "tests" and (p / "__init__.py").is_file()
    }


def imported_roots(path: Path) -> set[str]:
    """The top-level names of every absolute import in ``path``, at any depth."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_no_test_imports_a_package_the_sdist_lacks_but_the_benchmarks_own():
    unshipped = unshipped_packages()
    if (ROOT / "benchmarks").is_dir():  # a checkout (the sdist has none to find)
        assert "benchmarks" in unshipped  # the walk found the one the tests know of
    reaches = {
        f"{path.relative_to(ROOT).as_posix()}: {', '.join(sorted(names))}"
        for path in sorted(TESTS.rglob("*.py"))
        if (names := imported_roots(path) & unshipped)
        and path.relative_to(ROOT).as_posix() not in BENCHMARKS_OWN_TESTS
    }
    assert not reaches, f"tests importing what the sdist does not ship: {sorted(reaches)}"


def test_a_copy_of_tests_alone_collects_without_errors(tmp_path):
    """tests/ and pyproject.toml (its pytest settings), as the sdist has them, collected
    where nothing but the installed pipepool is importable: a test of the benchmarks
    skips, none fails to import."""
    copy = tmp_path / "sdist"
    shutil.copytree(TESTS, copy / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy)
    env = dict(os.environ, PYTHONPATH=str(Path(pipepool.__file__).resolve().parents[1]))
    env.pop("PYTEST_ADDOPTS", None)
    args = ["--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0", "tests"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        stdin=subprocess.DEVNULL,
    )
    errors = [line for line in proc.stdout.splitlines() if line.startswith(("ERROR", "E "))]
    assert proc.returncode == 0, "\n".join(errors) or proc.stdout[-3000:] + proc.stderr[-2000:]
