"""The package's layout is the one docs/design.md ("Layout") describes: every module under
src/pipepool is listed there and nothing listed is gone, rooms import each other without
circles (but the ones the design names), and a worker process never loads the executor."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "pipepool"
DESIGN = ROOT / "docs" / "design.md"

# Circles between rooms the design defends, one line each ("Layout"): errors imports
# _broken_pool lazily so that a worker does not import concurrent.futures.process.
ALLOWED_CIRCLES = {
    frozenset({"pipepool.errors", "pipepool._broken_pool"}),
}

pytestmark = pytest.mark.timeout(60)


def listed_modules(text: str) -> set[str]:
    """The module paths of the tree under ``src/pipepool/`` in the Layout section: each
    line is ``<indent><name> <what it is>``, a name ending in "/" opens a folder, and two
    more spaces of indent go one folder deeper."""
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    tree = section.split("```\nsrc/pipepool/\n", 1)[1].split("```", 1)[0]
    found: set[str] = set()
    folders: list[str] = []
    for line in tree.splitlines():
        match = re.match(r"( *)(\S+)", line)
        assert match, f"design.md, Layout: a blank line in the tree: {line!r}"
        depth = len(match.group(1)) // 2 - 1
        del folders[depth:]
        name = match.group(2)
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
        else:
            found.add("/".join([*folders, name]))
    return found


def test_the_design_lists_every_module_and_only_those():
    listed = listed_modules(DESIGN.read_text(encoding="utf-8"))
    present = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")}
    assert not present - listed, f"in src/pipepool, not in design.md's Layout: {present - listed}"
    assert not listed - present, f"in design.md's Layout, not in src/pipepool: {listed - present}"


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    """``pipepool.<folder>`` for a module inside a room, else the module itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else module


def room_imports() -> dict[str, set[str]]:
    """Which rooms (and top-level modules) each one imports, at any depth of its code."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                if target in modules and _room(target) != _room(name) and name != "pipepool":
                    graph.setdefault(_room(name), set()).add(_room(target))
    return graph


def unnamed_modules(room: Path) -> list[str]:
    """The modules (and folders) of a room its ``__init__`` docstring does not name: the
    docstring is the room's map, and a module added without a word there is off it."""
    doc = ast.get_docstring(ast.parse((room / "__init__.py").read_text(encoding="utf-8")))
    names = [p.stem for p in room.glob("*.py") if p.stem != "__init__"]
    names += [p.name for p in room.iterdir() if (p / "__init__.py").is_file()]
    return sorted(
        name for name in names if not re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", doc or "")
    )


def test_each_rooms_docstring_names_its_modules():
    rooms = [p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    assert len(rooms) > 5
    unnamed = {room.name: missing for room in rooms if (missing := unnamed_modules(room))}
    assert not unnamed, f"modules the room's __init__ docstring does not name: {unnamed}"


def test_a_module_the_docstring_does_not_name_is_found(tmp_path):
    room = tmp_path / "room"
    room.mkdir()
    (room / "__init__.py").write_text('"""``_named`` does this; _named.x is not _other."""\n')
    for name in ("_named", "_other", "_unnamed", "_named_too"):
        (room / f"{name}.py").write_text("")
    assert unnamed_modules(room) == ["_named_too", "_unnamed"]


def test_rooms_import_each_other_without_circles():
    graph = room_imports()

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo += graph.get(node, ())
        return False

    circles = {frozenset({a, b}) for a, targets in graph.items() for b in targets if reaches(b, a)}
    assert circles <= ALLOWED_CIRCLES, f"import circles: {circles - ALLOWED_CIRCLES}"
    assert "pipepool.worker" in graph["pipepool.executor"]  # the check sees real imports


def test_a_worker_never_loads_the_executor():
    # What a spawned or forkserver worker imports: the target's module and what it needs.
    code = (
        "import sys, pipepool.worker\n"
        "print(sorted(m for m in sys.modules if m.startswith('pipepool')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    loaded = ast.literal_eval(out)
    assert "pipepool.worker" in loaded
    rooms = {"executor", "futures", "cluster", "joblib", "airflow", "run"}
    assert not [m for m in loaded if m.split(".")[1:2] and m.split(".")[1] in rooms], loaded


def test_a_worker_imports_nothing_it_needs_only_later_or_elsewhere():
    # Start-up time: the events (the parent's reports), traceback (with linecache,
    # tokenize, textwrap: only once a task fails) and tempfile (the start marks' and the
    # crash reports' fallback where there is no memfd_create) load on first use.
    code = (
        "import sys, pipepool.worker\n"
        "print(sorted(m for m in ('pipepool.events', 'traceback', 'tempfile') "
        "if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert ast.literal_eval(out) == []


FORKSERVER_PRELOAD = """
from multiprocessing import forkserver
import pipepool
if {running}:
    forkserver.ensure_running()
else:
    forkserver.set_forkserver_preload(["__main__", "json"])
for _ in range(2):  # the second pool adds nothing more
    ex = pipepool.LocalExecutor(1, start_method="forkserver")
    ex.start()
    ex.queue("k", len, "abc")
    ex.wait_until_done()
    assert ex.get_event_buffer()["k"].result == 3
    ex.end()
print(forkserver._forkserver._preload_modules)
"""


@pytest.mark.parametrize("running", [False, True], ids=["new server", "running server"])
def test_a_fork_server_the_pool_starts_preloads_the_worker(running):
    # Each forkserver worker then finds its code imported (a sixth of its start-up);
    # the user's preloads stay, and a server already running is left as it is.
    out = subprocess.run(
        [sys.executable, "-c", FORKSERVER_PRELOAD.format(running=running)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    want = ["__main__"] if running else ["__main__", "json", "pipepool.worker"]
    assert ast.literal_eval(out) == want
