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
    # What this install can import: the README's `pip install '.[test]'` has no Airflow,
    # the pure build's test jobs no compiled loop either; each is skipped with a note. The
    # docs step of .ci/run and the workflow's docs job run the script with everything
    # required (CI=true).
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


@pytest.fixture
def fake_integration(tmp_path, monkeypatch):
    """A package with an integration whose library is missing, loaded as pipepool.airflow
    loads PipepoolExecutor (a module ``__getattr__`` imports it on first use), and one
    whose module imports a missing module of the package itself."""
    pkg = tmp_path / "fakeintpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A fake package."""\n__all__: list = []\n')
    (pkg / "lazy.py").write_text(
        '"""Loads its library on first use."""\n'
        '__all__ = ["Thing"]\n'
        "def __getattr__(name):\n"
        "    from . import _impl\n"
        "    return getattr(_impl, name)\n"
    )
    (pkg / "_impl.py").write_text("import no_such_library_for_pipepool_tests\n")
    (pkg / "broken.py").write_text('"""Imports itself wrong."""\nimport fakeintpkg.gone\n')
    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "api.md").write_text("::: fakeintpkg.lazy.Thing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield reference
    for name in [m for m in sys.modules if m.startswith("fakeintpkg")]:
        sys.modules.pop(name)


def test_a_missing_library_is_a_note_unless_required(fake_integration: Path, capsys) -> None:
    """The README's test command has no Airflow: an integration whose library is missing
    is skipped with a note, also where only first use imports it; required (CI=true), it
    is a problem."""

    def check(require: bool) -> list[str]:  # the compiled loop's own entries are not here
        found = _checker().check(("fakeintpkg.lazy",), fake_integration, require=require)
        return [p for p in found if "fakeintpkg" in p]

    assert check(require=False) == []
    notes = capsys.readouterr().err
    assert "'::: fakeintpkg.lazy.Thing' not checked, no_such_library_for_pipepool_tests" in notes
    assert "fakeintpkg.lazy skipped, no_such_library_for_pipepool_tests is missing" in notes
    assert check(require=True) == [
        "docs/reference: '::: fakeintpkg.lazy.Thing' needs no_such_library_for_pipepool_tests",
        "fakeintpkg.lazy: cannot import it to check, no_such_library_for_pipepool_tests is missing",
    ]


def test_a_missing_module_of_the_package_is_never_skipped(fake_integration: Path) -> None:
    """Only a library outside the package is optional: the package's own missing module
    is a broken package, a problem even where integrations may be skipped."""
    found = _checker().check(("fakeintpkg.broken",), fake_integration, require=False)
    problems = [p for p in found if "fakeintpkg" in p]
    assert len(problems) == 1
    assert problems[0].startswith("fakeintpkg.broken: cannot import it to check")
    assert "fakeintpkg.gone" in problems[0]
