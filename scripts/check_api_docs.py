"""Check that every public name has a docstring and an entry in the API reference.

Usage: ``python scripts/check_api_docs.py`` (exit status 1 and one line per problem).
``mkdocs build --strict`` fails on an entry that does not resolve, but not on a public
name that has no entry, nor on an entry whose docstring is empty: this script does.

Public names: ``pipepool.__all__``, the ``__all__`` of the integration modules
(``pipepool.joblib``, ``pipepool.airflow``, ``pipepool.celery.prefork``) and the compiled
loop's classes. An entry is
a ``::: dotted.path`` line in ``docs/reference/*.md`` that resolves, at run time, to the
same object. Docstrings: a class or function needs its own; each public method or
property a class defines needs one (inherited from a documented base method counts);
a constant needs an attribute docstring (a string right after its assignment, which is
what mkdocstrings shows). With CI=true (or ``--require``) an integration whose library
is missing, or a build without the compiled loop, is an error (the docs build documents
them all); otherwise it is skipped with a note. A library is missing when importing a
name fails with ModuleNotFoundError for a module outside its package, wherever that import
happens: at the module's import, or on first use of a name its ``__getattr__`` loads
(``pipepool.airflow.PipepoolExecutor``). A module of the package itself that cannot be
found is a problem either way.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
# The public modules: the package and one line per integration (its ``__all__`` is checked;
# without its library it is skipped with a note, unless required).
MODULES = (
    "pipepool",
    "pipepool.joblib",
    "pipepool.airflow",
    "pipepool.celery.prefork",
)
COMPILED = {"pipepool.loop._loop": ("PipeLoop", "FrameReader")}  # not in any __all__: internal
ENTRY = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)


def entries(reference: Path = REFERENCE) -> list[str]:
    """Every ``::: path`` of the reference pages, in page order."""
    found = []
    for page in sorted(reference.glob("*.md")):
        found += ENTRY.findall(page.read_text(encoding="utf-8"))
    return found


def missing_library(exc: ModuleNotFoundError, checked: str) -> str | None:
    """The library whose absence ``exc`` reports while ``checked`` (a dotted name) was
    imported, or None when the module not found is of ``checked``'s own package (a
    broken package, never skipped)."""
    top = (exc.name or "").partition(".")[0]
    return exc.name if top and top != checked.partition(".")[0] else None


def resolve(path: str) -> Any:
    """The object ``path`` names: the longest importable module prefix, then attributes.
    A library that is missing (at an import, or in a lazy ``__getattr__``) raises its
    ModuleNotFoundError."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            obj: Any = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and not name.startswith(exc.name):
                raise  # the module is there but a library it imports is not
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def _public_names(name: str) -> tuple[ModuleType, list[tuple[str, Any]]]:
    """Module ``name`` and its ``__all__``'s objects (a lazy name loads here, so a
    missing library raises here)."""
    module = importlib.import_module(name)
    return module, [(attr, getattr(module, attr)) for attr in module.__all__]


def _attribute_docstring(module: ModuleType, name: str, seen: int = 0) -> str | None:
    """The string literal right after ``name = ...`` in ``module``'s source, following
    ``from .x import name`` (how ``pipepool.IMPLEMENTATION`` reaches the package)."""
    source = inspect.getsource(module)
    body = ast.parse(source).body
    for i, node in enumerate(body):
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        if name in targets and i + 1 < len(body):
            nxt = body[i + 1]
            value = (
                nxt.value.value
                if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                else None
            )
            if isinstance(value, str) and value.strip():
                return value
        imported = isinstance(node, ast.ImportFrom) and any(
            (alias.asname or alias.name) == name for alias in node.names
        )
        if imported and seen < 3:
            assert isinstance(node, ast.ImportFrom)
            base = module.__name__ if hasattr(module, "__path__") else module.__package__
            target = importlib.import_module(
                "." * node.level + (node.module or ""), base if node.level else None
            )
            return _attribute_docstring(target, name, seen + 1)
    return None


def _own_docstring(obj: Any) -> str | None:
    if inspect.isclass(obj):
        doc = vars(obj).get("__doc__")
        return doc if isinstance(doc, str) and doc.strip() else None
    doc = getattr(obj, "__doc__", None)
    return doc if isinstance(doc, str) and doc.strip() else None


def _member_problems(where: str, cls: type) -> list[str]:
    problems = []
    for attr, value in vars(cls).items():
        if attr.startswith("_"):
            continue
        if not (callable(value) or isinstance(value, (property, classmethod, staticmethod))):
            continue
        if not inspect.getdoc(getattr(cls, attr)):
            problems.append(f"{where}.{attr}: public member without a docstring")
    return problems


def check(
    modules: tuple[str, ...] = MODULES, reference: Path = REFERENCE, *, require: bool = True
) -> list[str]:
    """The problems found (empty when every public name is documented and referenced).

    ``require``: an integration whose library is missing, or a pure build without the
    compiled loop, is a problem (the docs build needs them all); else a note on stderr.
    """
    problems: list[str] = []
    documented: dict[str, list[Any]] = {}
    for path in entries(reference):
        try:
            obj = resolve(path)
        except ModuleNotFoundError as exc:
            library = missing_library(exc, path)
            if library is None:
                problems.append(f"docs/reference: '::: {path}' does not resolve ({exc!r})")
            elif require:
                problems.append(f"docs/reference: '::: {path}' needs {library}")
            else:
                print(f"note: '::: {path}' not checked, {library} is missing", file=sys.stderr)
            continue
        except (ImportError, AttributeError) as exc:
            problems.append(f"docs/reference: '::: {path}' does not resolve ({exc!r})")
            continue
        documented.setdefault(path.rsplit(".", 1)[-1], []).append(obj)
    public: list[tuple[str, ModuleType, str, Any]] = []
    for name in modules:
        try:
            module, names = _public_names(name)
        except ModuleNotFoundError as exc:
            library = missing_library(exc, name)
            if library is None:
                problems.append(f"{name}: cannot import it to check ({exc!r})")
            elif require:
                problems.append(f"{name}: cannot import it to check, {library} is missing")
            else:
                print(f"note: {name} skipped, {library} is missing", file=sys.stderr)
            continue
        except ImportError as exc:
            problems.append(f"{name}: cannot import it to check ({exc!r})")
            continue
        public += [(name, module, attr, obj) for attr, obj in names]
    for name, attrs in COMPILED.items():
        try:
            module = importlib.import_module(name)
        except ImportError as exc:  # a pure build: the extension is not there to document
            if require:
                problems.append(f"{name}: the compiled loop did not import ({exc})")
            else:
                print(f"note: {name} skipped, a pure build ({exc})", file=sys.stderr)
            continue
        public += [(name, module, attr, getattr(module, attr)) for attr in attrs]
    for modname, module, attr, obj in public:
        where = f"{modname}.{attr}"
        if not any(o is obj for o in documented.get(attr, [])):
            problems.append(f"{where}: no '::: ...{attr}' entry in docs/reference/*.md")
        if inspect.isclass(obj) or inspect.isroutine(obj):
            if not _own_docstring(obj):
                problems.append(f"{where}: no docstring")
            if inspect.isclass(obj):
                problems += _member_problems(where, obj)
        elif not _attribute_docstring(module, attr):
            problems.append(f"{where}: no attribute docstring after its assignment")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Check that every public name has a docstring and an API reference entry."
    )
    parser.add_argument(
        "--require",
        action="store_true",
        help="an integration whose library is missing, or a build without the compiled "
        "loop, is a problem, not a note (the default with CI=true)",
    )
    args = parser.parse_args(argv)
    problems = check(require=args.require or os.environ.get("CI") == "true")
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} problem(s): document them (see docs/reference/)")
        return 1
    print("every public name has a docstring and a reference entry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
