"""Docs that cannot drift: every test the README and docs/ cite exists where they say.

A citation is a code span: a path under tests/ (a file, a folder or a glob), a test in a
file (``tests/room/test_x.py::test_name``, or ``test_x.py::test_name`` where one test file
in the tree has that name), and ``::test_name``, a test of the file cited last on the page.
Parameters (``[...]``) are not checked, only the name. Skipped where docs/ is absent: a
wheel's tests run from a copy of tests/ alone.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
DOCS = ROOT / "docs"

pytestmark = pytest.mark.skipif(
    not (DOCS / "index.md").is_file(), reason="no docs/ beside tests/ (not a source checkout)"
)

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+)`")
IN_TREE = re.compile(r"(tests/[\w./*-]+?)(?:::([\w.]+)(?:\[[^\]]*\])?)?")
BY_NAME = re.compile(r"(test_\w+\.py)::([\w.]+)(?:\[[^\]]*\])?")
SAME_FILE = re.compile(r"::([\w.]+)(?:\[[^\]]*\])?")


@dataclass(frozen=True)
class Citation:
    where: str  # page:line
    text: str
    file: Path | None  # the test file it names, or None for a path alone
    name: str | None

    def __str__(self) -> str:
        return f"{self.where}: `{self.text}`"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


@functools.cache
def files_by_name() -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for path in TESTS.rglob("*.py"):
        found.setdefault(path.name, []).append(path)
    return found


def citations(text: str, page: str) -> tuple[list[Citation], list[str]]:
    """The citations of a page's ``text`` in order, and what could not be read as one (a
    ``::name`` with no file cited before it, a file name that is not one test file)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found: list[Citation] = []
    unread: list[str] = []
    current: Path | None = None
    for m in SPAN.finditer(text):
        span, where = m.group(1), f"{page}:{text.count(chr(10), 0, m.start()) + 1}"
        if tree := IN_TREE.fullmatch(span):
            path, name = ROOT / tree.group(1), tree.group(2)
            if path.suffix == ".py" and "*" not in tree.group(1):
                current = path
            found.append(Citation(where, span, path if name else None, name))
        elif named := BY_NAME.fullmatch(span):
            matches = files_by_name().get(named.group(1), [])
            if len(matches) != 1:
                unread.append(f"{where}: `{span}`: {len(matches)} files of that name in tests/")
                continue
            current = matches[0]
            found.append(Citation(where, span, current, named.group(2)))
        elif same := SAME_FILE.fullmatch(span):
            if current is None:
                unread.append(f"{where}: `{span}`: no test file cited before it")
                continue
            found.append(Citation(where, span, current, same.group(1)))
    return found, unread


def defined(path: Path) -> set[str]:
    """The names a citation may give in ``path``: its functions and classes, and
    ``Class.method``."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names.update(
                f"{node.name}.{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            )
    return names


def broken(citation: Citation) -> str | None:
    """Why ``citation`` is wrong, or None."""
    if citation.file is None:  # a path: a file, a folder or a glob
        if "*" in citation.text:
            return None if list(ROOT.glob(citation.text)) else "matches no file"
        return None if (ROOT / citation.text).exists() else "no such file or folder"
    if not citation.file.is_file():
        return f"{citation.file.relative_to(ROOT)} does not exist"
    if citation.name not in defined(citation.file):
        return f"no {citation.name} in {citation.file.relative_to(ROOT)}"
    return None


def test_every_cited_test_exists_where_the_docs_say():
    cited = 0
    wrong: list[str] = []
    for page in pages():
        found, unread = citations(page.read_text(), str(page.relative_to(ROOT)))
        wrong += unread
        cited += len(found)
        wrong += [f"{c}: {why}" for c in found if (why := broken(c))]
    assert not wrong, "stale citations of tests:\n  " + "\n  ".join(wrong)
    assert cited > 50  # docs/design.md alone cites more: the reading found them


def test_the_reading_catches_each_kind_of_drift():
    """Each kind of stale citation is reported: a file that moved, a test renamed, a
    ``::name`` not in the file cited before it, a folder that is gone; a fenced block
    is not read, and a ``::name`` with no file before it cannot be read."""
    page = (
        "`::orphan`, `tests/core/test_frames.py::test_split_keeps_partial_tail`,\n"
        "`::no_such_test`, `tests/test_frames.py::test_split_keeps_partial_tail`,\n"
        "`tests/no_room/`, `tests/run/test_cli*.py`,\n"
        "`test_contract.py::test_dead_worker_fails_only_its_task[local-python-fork]`,\n"
        "`::also_missing`\n"
        "```\n`::inside_a_fence`\n```\n"
    )
    found, unread = citations(page, "page.md")
    assert unread == ["page.md:1: `::orphan`: no test file cited before it"]
    assert {c.text: broken(c) for c in found} == {
        "tests/core/test_frames.py::test_split_keeps_partial_tail": None,
        "::no_such_test": "no no_such_test in tests/core/test_frames.py",
        "tests/test_frames.py::test_split_keeps_partial_tail": (
            "tests/test_frames.py does not exist"
        ),
        "tests/no_room/": "no such file or folder",
        "tests/run/test_cli*.py": None,
        "test_contract.py::test_dead_worker_fails_only_its_task[local-python-fork]": None,
        "::also_missing": "no also_missing in tests/contract/test_contract.py",
    }
