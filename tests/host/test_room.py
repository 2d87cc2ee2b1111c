"""The host room is the one reader of the kernel's files: no module outside it names a
path under /proc or /sys (it asks ``pipepool.host``), and a worker, which imports the
room for the spin's runnable count, loads only its light part."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "pipepool"
# a path under /proc or /sys: "/proc", "/sys/fs/cgroup", or relative to a root, "proc/stat"
KERNEL_PATH = re.compile(r"^(/(proc|sys)(/|$)|(proc|sys)/)")


def kernel_paths(source: str) -> list[str]:
    """The strings of ``source`` (f-strings by their first text) that name a path under
    /proc or /sys; docstrings, which may speak of them, left out."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = None if id(node) in docstrings else node.value
        elif isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            text = first.value if isinstance(first, ast.Constant) else None
        if isinstance(text, str) and KERNEL_PATH.match(text):
            found.append(text)
    return found


def test_the_rule_sees_the_ways_a_path_is_written() -> None:
    code = (
        '"""Reads /proc/stat."""\n'
        'a = open("/proc/stat")\n'
        'b = f"/proc/{pid}/stat"\n'
        'c = os.path.join(root, "sys/devices/system/cpu")\n'
        'd = ("maxrss", "sys", "proc")\n'
    )
    assert set(kernel_paths(code)) == {"/proc/stat", "/proc/", "sys/devices/system/cpu"}


def test_no_module_outside_the_host_room_names_a_path_under_proc_or_sys() -> None:
    readers = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "host"
        and (found := kernel_paths(path.read_text(encoding="utf-8")))
    }
    assert readers == {}, f"read /proc or /sys through pipepool.host instead: {readers}"


def test_a_worker_loads_only_the_light_part_of_the_room() -> None:
    code = (
        "import sys, pipepool.worker\n"
        "print(sorted(m for m in sys.modules if m.startswith('pipepool.host')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert ast.literal_eval(out) == [
        "pipepool.host",
        "pipepool.host._files",
        "pipepool.host._process",
    ]
