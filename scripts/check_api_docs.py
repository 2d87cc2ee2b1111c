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
them all); otherwise it is skipped with a note.
"""

from __future__ import annotations

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
MODULES = ("pipepool", "pipepool.joblib", "pipepool.airflow", "pipepool.celery.prefork")
COMPILED = {"pipepool.loop._loop": ("PipeLoop", "FrameReader")}  # not in any __all__: internal
ENTRY = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)


def entries(reference: Path = REFERENCE) -> list[str]:
    """Every ``::: path`` of the reference pages, in page order."""
    found = []
    for page in sorted(reference.glob("*.md")):
        found += ENTRY.findall(page.read_text(encoding="utf-8"))
    return found


def resolve(path: str) -> Any:
    """The object ``path`` names: the longest importable module prefix, then attributes."""
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
            if require:
                problems.append(f"docs/reference: '::: {path}' needs {exc.name}")
            else:
                print(f"note: '::: {path}' not checked, {exc.name} is missing", file=sys.stderr)
            continue
        except (ImportError, AttributeError) as exc:
            problems.append(f"docs/reference: '::: {path}' does not resolve ({exc!r})")
            continue
        documented.setdefault(path.rsplit(".", 1)[-1], []).append(obj)
    public: list[tuple[str, ModuleType, str]] = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            if require:
                problems.append(f"{name}: cannot import it to check ({exc})")
            else:
                print(f"note: {name} skipped, its library is missing ({exc})", file=sys.stderr)
            continue
        public += [(name, module, attr) for attr in module.__all__]
    for name, attrs in COMPILED.items():
        try:
            module = importlib.import_module(name)
        except ImportError as exc:  # a pure build: the extension is not there to document
            if require:
                problems.append(f"{name}: the compiled loop did not import ({exc})")
            else:
                print(f"note: {name} skipped, a pure build ({exc})", file=sys.stderr)
            continue
        public += [(name, module, attr) for attr in attrs]
    for modname, module, attr in public:
        where = f"{modname}.{attr}"
        obj = getattr(module, attr)
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


def main() -> int:
    problems = check(require=os.environ.get("CI") == "true" or "--require" in sys.argv)
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} problem(s): document them (see docs/reference/)")
        return 1
    print("every public name has a docstring and a reference entry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
