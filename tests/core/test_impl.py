"""The one switch: PIPEPOOL_IMPL picks the loop, and a build that should carry the compiled
loop fails here when it did not load."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pipepool
from pipepool import loop as _impl
from pipepool.loop import _pyloop

pytestmark = [pytest.mark.smoke, pytest.mark.timeout(60)]

FORCED = os.environ.get("PIPEPOOL_IMPL", "").strip().lower()


def test_the_requested_implementation_is_the_one_in_use():
    if FORCED == "cython":  # the compiled CI run: a wheel without the extension fails here
        assert pipepool.IMPLEMENTATION == "cython"
    elif FORCED == "python":
        assert pipepool.IMPLEMENTATION == "python"
    else:
        assert pipepool.IMPLEMENTATION in ("python", "cython")
    assert _impl.PipeLoop is _impl.load(pipepool.IMPLEMENTATION)[1].PipeLoop


def test_load_python_is_the_pure_loop():
    assert _impl.load("python") == ("python", _pyloop)


def test_load_cython_is_the_compiled_loop():
    if FORCED == "python":
        pytest.skip("PIPEPOOL_IMPL=python: a pure build has no compiled loop")
    name, module = _impl.load("cython")
    assert name == "cython"
    assert module.__name__ == "pipepool.loop._loop"
    assert module.__file__.endswith((".so", ".pyd"))


@pytest.mark.parametrize("bad", ["pypy", "c", "1", "cython3"])
def test_load_rejects_unknown_choices(bad, monkeypatch):
    with pytest.raises(ValueError, match="PIPEPOOL_IMPL"):
        _impl.load(bad)
    monkeypatch.setenv("PIPEPOOL_IMPL", bad)
    with pytest.raises(ValueError, match="PIPEPOOL_IMPL"):
        _impl.load()


def test_load_reads_the_environment(monkeypatch):
    monkeypatch.setenv("PIPEPOOL_IMPL", " Python ")
    assert _impl.load()[0] == "python"
    monkeypatch.setenv("PIPEPOOL_IMPL", "")
    assert _impl.load()[0] in ("python", "cython")  # unset or empty: compiled when importable


def test_a_missing_extension_is_an_error_only_when_required(monkeypatch):
    # Make the compiled module unimportable, whether or not this build has it.
    monkeypatch.setitem(sys.modules, "pipepool.loop._loop", None)
    monkeypatch.delattr(_impl, "_loop", raising=False)
    with pytest.raises(ImportError, match="PIPEPOOL_IMPL=cython"):
        _impl.load("cython")
    assert _impl.load("auto") == ("python", _pyloop)


@pytest.mark.parametrize("choice", ["python", "cython"])
def test_a_fresh_interpreter_honours_the_variable(choice):
    if choice == "cython" and FORCED == "python":
        pytest.skip("PIPEPOOL_IMPL=python: a pure build has no compiled loop")
    env = dict(os.environ, PIPEPOOL_IMPL=choice)
    out = subprocess.run(
        [sys.executable, "-c", "import pipepool; print(pipepool.IMPLEMENTATION)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.strip() == choice


def test_the_package_is_marked_typed():
    """PEP 561: py.typed ships with the package, so type checkers read its annotations
    (the wheel's tests import the installed package: a wheel without it fails here)."""
    from importlib.resources import files

    assert files("pipepool").joinpath("py.typed").is_file()
