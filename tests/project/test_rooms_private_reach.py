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

So ``ex._steps(...)`` in futures/ would be a reach (``_steps`` is the executor's), and
``t._state`` there is not (futures/ assigns it: the stdlib Future's state, on its own
records). Names nobody in src/ defines (the standard library's) are not judged here.

Modules are judged the same way (``private_imports``): a subpackage room's modules named
``_x`` are its own parts, so another room importing one (``from ..worker._marks import
MarkTable``, ``from ..worker import _tree``, ``import pipepool.run._cli``) is a reach;
the room offers what others use under public names (its ``__init__``'s, or a public
module's). The top-level modules of ``pipepool`` (``_api``, ``_task``, ``_signals``,
...) are the package's shared core, a room of one module each that every room may
import: they are not judged here.
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


def imported_modules(path: Path, tree: ast.AST, src: Path = SRC) -> list[tuple[int, str]]:
    """``(line, dotted name under pipepool)`` of each module a file imports, relative
    imports resolved (``from ..worker import _tree`` names ``worker._tree`` and
    ``worker``: an imported name may be a module)."""
    package = list(path.relative_to(src).parent.parts)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "pipepool":
                    found.append((node.lineno, ".".join(parts[1:])))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                parts = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "pipepool":
                parts = node.module.split(".")[1:]
            else:
                continue
            found.append((node.lineno, ".".join(parts)))
            found += [(node.lineno, ".".join([*parts, alias.name])) for alias in node.names]
    return found


def private_imports(src: Path = SRC) -> list[str]:
    """Every import of another subpackage room's underscore module under ``src``, as
    ``file:line: module (room's)``."""
    found = []
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        room = room_of(path, src)
        for line, name in imported_modules(path, tree, src):
            parts = name.split(".")
            if len(parts) < 2 or parts[0] == room or not (src / parts[0]).is_dir():
                continue  # its own room, the shared core, or the package itself
            if any(is_private(part) for part in parts[1:]) and _is_module(src, parts):
                found.append(f"{path.relative_to(src)}:{line}: {name} ({parts[0]}'s)")
    return found


def _is_module(src: Path, parts: list[str]) -> bool:
    """Whether ``parts`` (under ``src``) names a module or package, not a name in one."""
    where = src.joinpath(*parts)
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def test_no_room_reaches_into_another_rooms_private_names() -> None:
    assert reaches() == []


def test_no_room_imports_another_rooms_underscore_module() -> None:
    assert private_imports() == []


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


def test_a_private_import_is_found(tmp_path: Path) -> None:
    """The rule catches a room importing another room's underscore module, in each
    spelling; lets a room import its own, the shared core's, and another room's public
    names and public modules; and does not take a private name for a module."""
    (tmp_path / "_api.py").write_text("class Base: ...\n")
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "__init__.py").write_text(
        "from ._marks import MarkTable as MarkTable\nfrom . import _tree\n_x = 1\n"
    )
    (tmp_path / "worker" / "_marks.py").write_text("class MarkTable: ...\n")
    (tmp_path / "worker" / "_tree.py").write_text("")
    (tmp_path / "worker" / "zygote.py").write_text("from ._marks import MarkTable\n")
    (tmp_path / "executor").mkdir()
    (tmp_path / "executor" / "__init__.py").write_text(
        "from .._api import Base\n"
        "from ..worker import MarkTable, _x, zygote\n"
        "from ..worker.zygote import MarkTable\n"
        "from ..worker._marks import MarkTable\n"
        "from ..worker import _tree\n"
        "import pipepool.worker._tree\n"
        "from pipepool.worker import _marks\n"
    )
    assert private_imports(tmp_path) == [
        "executor/__init__.py:4: worker._marks (worker's)",
        "executor/__init__.py:5: worker._tree (worker's)",
        "executor/__init__.py:6: worker._tree (worker's)",
        "executor/__init__.py:7: worker._marks (worker's)",
    ]
