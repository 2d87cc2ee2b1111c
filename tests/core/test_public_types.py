"""The type checker sees the public names that load lazily as what they are: each one a
module's ``__getattr__`` serves at run time is imported for it under ``TYPE_CHECKING``,
and no module ``__getattr__`` is visible to it (it would type any name, a misspelt one
included, as whatever the hook returns: ``Any`` before). The lazy import that keeps a
spawned worker's start-up short stays: a worker never loads ``_broken_pool``."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import pipepool
import pipepool.errors

pytestmark = pytest.mark.timeout(60)

PACKAGE = Path(pipepool.__file__).parent


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def type_checking_imports(path: Path) -> dict[str, tuple[str | None, int]]:
    """Names imported under a module-level ``if TYPE_CHECKING:``, to ``(module, level)``."""
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    for alias in stmt.names:
                        found[alias.asname or alias.name] = (stmt.module, stmt.level)
    return found


def visible_module_getattr(path: Path) -> bool:
    """A module-level ``__getattr__`` the type checker reads: not in the branch of an
    ``if [not] TYPE_CHECKING:`` that only runs."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        seen: list[ast.stmt] = [node]
        if isinstance(node, ast.If):
            test = node.test
            if _is_type_checking(test):
                seen = node.body
            elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                seen = (
                    node.orelse if _is_type_checking(test.operand) else [*node.body, *node.orelse]
                )
            else:
                seen = [*node.body, *node.orelse]
        if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in seen):
            return True
    return False


def test_no_module_getattr_is_visible_to_the_type_checker():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert PACKAGE / "errors.py" in modules
    visible = [str(p.relative_to(PACKAGE)) for p in modules if visible_module_getattr(p)]
    assert visible == []


def test_every_lazy_name_is_imported_for_the_type_checker():
    package = type_checking_imports(PACKAGE / "__init__.py")
    assert set(pipepool._LAZY) <= set(package), set(pipepool._LAZY) - set(package)
    errors = type_checking_imports(PACKAGE / "errors.py")
    assert set(errors) == {"WorkerLostError", "InitializerError", "DeathCause"}
    # And the hook serves each at run time: the very object the type checker reads.
    for module, imports in ((pipepool, package), (pipepool.errors, errors)):
        for name, (source, level) in imports.items():
            assert level == 1 and source, name
            origin = importlib.import_module(f"pipepool.{source}")
            assert getattr(module, name) is getattr(origin, name), name


def test_a_worker_does_not_load_the_lazy_errors():
    """``concurrent.futures.process`` costs a spawned worker ~5 ms, and no worker raises
    the errors that need it; the first access from the parent loads them."""
    code = (
        "import sys, pipepool.worker\n"
        "lazy = ('pipepool._broken_pool', 'concurrent.futures.process')\n"
        "print([m for m in lazy if m in sys.modules])\n"
        "import pipepool.errors\n"
        "pipepool.errors.DeathCause\n"
        "print([m for m in lazy if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    ).stdout.splitlines()
    assert out == ["[]", "['pipepool._broken_pool', 'concurrent.futures.process']"]


def test_the_package_docstring_names_every_executor():
    """``help(pipepool)`` lists each executor it exports (it left ``ClusterExecutor`` out)."""
    executors = [name for name in pipepool.__all__ if name.endswith("Executor")]
    assert {"LocalExecutor", "ClusterExecutor", "ProcessPoolExecutor"} <= set(executors)
    missing = [name for name in executors if f"``{name}``" not in (pipepool.__doc__ or "")]
    assert not missing, f"the package docstring leaves out {missing}"
