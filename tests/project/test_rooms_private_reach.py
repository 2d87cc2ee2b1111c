"""No room of src/pipepool touches another room's objects through their private names.

A room is a subpackage of ``pipepool`` (executor, futures, worker, loop, run, cluster,
joblib, airflow) or a top-level module (``_api``, ``_task``, ``_signals``, ``cli``, ...).
Importing another room's modules and public names is fine; what is not is a reach into
another room's private surface. The rule, read off the syntax (``ast``) of every file:

* a room *owns* every private name (one leading underscore, not a dunder) its files
  define: a function, method or class, a parameter, a name or attribute assigned
  (``x._name = ...``, ``_name = ...``), an import alias;
* a *reach* is ``obj._name`` (``obj`` not ``self``/``cls``, nor a class the room itself
  defines: a subclass uses its bases' private members) or a keyword argument
  ``_name=``, in a room that does not own ``_name``, where another room does.

So ``ex._queue_tasks(...)`` in futures/ is a reach (``_queue_tasks`` is ``_api``'s), and
``t._state`` there is not (futures/ assigns it: the stdlib Future's state, on its own
records). Names nobody in src/ defines (the standard library's) are not judged here.
"""

from __future__ import annotations

import ast
import collections
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "pipepool"
SELF_NAMES = frozenset({"self", "cls"})


def room_of(path: Path, src: Path = SRC) -> str:
    """The room of a source file: its subpackage, or its own name at the top level."""
    parts = path.relative_to(src).parts
    return parts[0] if len(parts) > 1 else path.stem


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The private names a file defines, and the classes it defines."""
    names: set[str] = set()
    classes: set[str] = set()
    for node in ast.walk(tree):
        found: list[str] = []
        if isinstance(node, ast.ClassDef):
            classes.add(node.name)
            found = [node.name]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found = [node.name]
        elif isinstance(node, ast.arg):
            found = [node.arg]
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            found = [node.attr]
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found = [node.id]
        elif isinstance(node, ast.alias):
            found = [node.asname or node.name.split(".")[0]]
        names.update(n for n in found if is_private(n))
    return names, classes


def private_uses(tree: ast.AST, own_classes: set[str]) -> list[tuple[int, str]]:
    """``(line, name)`` of each ``obj._name`` and ``_name=`` in a file (``obj`` not
    ``self``, ``cls`` or one of the room's own classes)."""
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and (base.id in SELF_NAMES or base.id in own_classes):
                continue
            uses.append((node.lineno, node.attr))
        elif isinstance(node, ast.keyword) and node.arg is not None and is_private(node.arg):
            uses.append((node.value.lineno, node.arg))
    return uses


def reaches(src: Path = SRC) -> list[str]:
    """Every reach into another room's private names under ``src``, as
    ``file:line: name (owner rooms)``."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(src.rglob("*.py"))}
    owned: dict[str, set[str]] = collections.defaultdict(set)
    classes: dict[str, set[str]] = collections.defaultdict(set)
    for path, tree in trees.items():
        names, kinds = defined_names(tree)
        owned[room_of(path, src)] |= names
        classes[room_of(path, src)] |= kinds
    found = []
    for path, tree in trees.items():
        room = room_of(path, src)
        for line, name in private_uses(tree, classes[room]):
            if name in owned[room]:
                continue
            owners = sorted(other for other, names in owned.items() if name in names)
            if owners:
                found.append(f"{path.relative_to(src)}:{line}: {name} ({', '.join(owners)}'s)")
    return found


def test_no_room_reaches_into_another_rooms_private_names() -> None:
    assert reaches() == []


def test_a_reach_is_found(tmp_path: Path) -> None:
    """The rule catches what it is for: a face calling the executor's private verb, or
    passing a private parameter; and lets a room use its own private names."""
    (tmp_path / "_api.py").write_text(
        "class Base:\n    def _queue_tasks(self, tasks): self._queue = tasks\n"
    )
    (tmp_path / "executor").mkdir()
    (tmp_path / "executor" / "__init__.py").write_text(
        "from .._api import Base\n"
        "class Local(Base):\n"
        "    def __init__(self, _impl=None): self._queue_tasks([])\n"
        "    hand_over = Base._queue_tasks\n"
    )
    (tmp_path / "futures").mkdir()
    (tmp_path / "futures" / "__init__.py").write_text(
        "from ..executor import Local\n"
        "class Record:\n    def __init__(self): self._state = 0\n"
        "def feed(t):\n"
        "    ex = Local(_impl='python')\n"
        "    ex.hand_over([t])\n"
        "    t._state = 1\n"
        "    ex._queue_tasks([t])\n"
    )
    assert reaches(tmp_path) == [
        "executor/__init__.py:4: _queue_tasks (_api's)",
        "futures/__init__.py:5: _impl (executor's)",
        "futures/__init__.py:8: _queue_tasks (_api's)",
    ]
