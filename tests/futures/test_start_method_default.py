"""Issue 44.3: the start method a pool uses when it is given none (docs/guides/futures.md,
"Which start method, when mp_context is not given"): the standard library's pool's, on
the platform and Python this runs on, as the guide's table says, and whatever a program
sets as multiprocessing's default. Each case runs in a fresh interpreter: asking for the
default fixes it for the process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import ENV, START_METHODS

BOUND = 60.0  # s for a fresh interpreter to answer

PROGRAM = r"""
import concurrent.futures, json, multiprocessing, sys
import pipepool

if sys.argv[1] != "-":
    multiprocessing.set_start_method(sys.argv[1])


def method(pool):
    return pool._mp_context.get_start_method()


print(json.dumps({
    "default": multiprocessing.get_start_method(),
    "pipepool": method(pipepool.ProcessPoolExecutor(1)),
    "stdlib": method(concurrent.futures.ProcessPoolExecutor(1)),
    "pipepool_recycling": method(pipepool.ProcessPoolExecutor(1, max_tasks_per_child=2)),
    "stdlib_recycling": method(concurrent.futures.ProcessPoolExecutor(1, max_tasks_per_child=2)),
    "local": pipepool.LocalExecutor(1).start_method,
}))
"""


def documented() -> str:
    """The guide's table: fork on Linux to 3.13, forkserver from 3.14, spawn on macOS."""
    if sys.platform == "darwin":
        return "spawn"
    if sys.platform.startswith("linux"):
        return "forkserver" if sys.version_info >= (3, 14) else "fork"
    pytest.skip(f"the guide's table has no row for {sys.platform}")


def defaults(set_first: str | None) -> dict[str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, set_first or "-"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=BOUND,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_default_start_method_is_the_documented_one():
    out = defaults(None)
    assert out["default"] == documented(), out
    assert out["pipepool"] == out["stdlib"] == out["local"] == documented(), out
    assert out["pipepool_recycling"] == out["stdlib_recycling"] == "spawn", out


@pytest.mark.parametrize("method", START_METHODS)
def test_a_default_the_program_sets_is_followed(method):
    """multiprocessing.set_start_method() decides for both pools (3.14's forkserver
    default on Linux is this case with "forkserver")."""
    out = defaults(method)
    assert out["pipepool"] == out["stdlib"] == out["local"] == method, out
    assert out["pipepool_recycling"] == out["stdlib_recycling"] == "spawn", out
