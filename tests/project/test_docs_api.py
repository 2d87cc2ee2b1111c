"""Every public name has a docstring and an API reference entry (scripts/check_api_docs.py,
which .ci/run also runs before building the docs), and the checker catches each kind of
gap."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _checker():
    spec = importlib.util.spec_from_file_location(
        "check_api_docs", ROOT / "scripts" / "check_api_docs.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_public_name_is_documented() -> None:
    # What this install can import: the pure build's test jobs have no compiled loop and
    # no Airflow. The docs step of .ci/run and the workflow's docs job run the script
    # with everything required (CI=true).
    assert _checker().check(require=False) == []


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A package with one documented and one undocumented name of each kind."""
    pkg = tmp_path / "fakedocpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        '"""A fake package."""\n'
        '__all__ = ["Good", "Bare", "good_fn", "bare_fn", "CONST", "BARE_CONST"]\n'
        "class Good:\n"
        '    """Documented."""\n'
        "    def method(self):\n"
        '        """Documented too."""\n'
        "    def undocumented(self):\n"
        "        pass\n"
        "class Bare:\n"
        "    pass\n"
        "def good_fn():\n"
        '    """Documented."""\n'
        "def bare_fn():\n"
        "    pass\n"
        "CONST = 1\n"
        '"""Documented."""\n'
        "BARE_CONST = 2\n"
    )
    reference = tmp_path / "reference"
    reference.mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    yield reference
    sys.modules.pop("fakedocpkg", None)


def test_checker_reports_each_gap(fake_package: Path) -> None:
    (fake_package / "api.md").write_text(
        "# API\n\n::: fakedocpkg.Good\n\n::: fakedocpkg.bare_fn\n\n::: fakedocpkg.CONST\n\n"
        "::: fakedocpkg.Missing\n"
    )
    problems = _checker().check(modules=("fakedocpkg",), reference=fake_package, require=True)
    text = "\n".join(problems)
    assert "fakedocpkg.Bare: no '::: ...Bare' entry" in text
    assert "fakedocpkg.Bare: no docstring" in text
    assert "fakedocpkg.bare_fn: no docstring" in text
    assert "fakedocpkg.Good.undocumented: public member without a docstring" in text
    assert "fakedocpkg.BARE_CONST: no attribute docstring" in text
    assert "fakedocpkg.good_fn: no '::: ...good_fn' entry" in text
    assert "'::: fakedocpkg.Missing' does not resolve" in text
    for fine in ("Good: no docstring", "Good.method", "CONST: no attribute", "good_fn: no doc"):
        assert not any(p.startswith("fakedocpkg." + fine) for p in problems), fine
