"""Issue 44.2, imports paid once: ``preload`` imports modules where workers are made from
(this process under fork, the pool's zygote under spawn and forkserver), so no worker
imports them again, a replacement after ``max_tasks_per_child`` or a crash included; and
a module that cannot be preloaded stops the pool's start with a ``PreloadError`` that
names it and says why, leaving nothing running.

Each test writes a module of its own (a fresh name, so no earlier import hides one) that
appends its importer's pid to a log at import: the log is the counter.
"""

from __future__ import annotations

import importlib
import itertools
import multiprocessing
import os
import subprocess
import sys

import pytest

import pipepool
from helpers import ENV, Recorder
from pipepool import PreloadError, WorkerLostError

BOUND = 120.0  # s: a bound on real conditions, never a sleep
_names = itertools.count()

COUNTED = """\
import os

with open({log!r}, "a") as _log:
    _log.write(f"{{os.getpid()}}\\n")


def pid(_=None):
    return os.getpid()


def crash():
    os._exit(3)
"""


def counted_module(tmp_path, monkeypatch) -> tuple[str, str]:
    """A module of a fresh name on ``sys.path`` (spawn and forkserver children get the
    parent's path) that logs each import's pid; its name and the log's path."""
    name = f"preload_counted_{os.getpid()}_{next(_names)}"
    log = tmp_path / f"{name}.log"
    log.touch()
    (tmp_path / f"{name}.py").write_text(COUNTED.format(log=str(log)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)  # (and gone again afterwards)
    return name, str(log)


def importers(log: str) -> list[int]:
    with open(log) as f:
        return [int(line) for line in f.read().split()]


def test_a_preloaded_module_is_not_imported_again(make, start_method, tmp_path, monkeypatch):
    """Three workers in a row on a pool of one (two tasks each, then a recycle; a crash
    ends the second): the module is imported once where workers are made from, by
    this process under fork, by the zygote under spawn and forkserver, and by none of
    the workers, the replacement after the crash included."""
    name, log = counted_module(tmp_path, monkeypatch)
    ex = make(1, max_tasks_per_child=2, preload=[name])
    module = importlib.import_module(name)  # tasks are pickled by reference from here
    plan = [("a", module.pid), ("b", module.pid), ("c", module.pid), ("crash", module.crash)]
    plan += [("d", module.pid), ("e", module.pid)]
    for key, fn in plan:
        ex.queue(key, fn)
    rec = Recorder(ex)
    rec.finish(limit=BOUND)
    error = rec.terminal["crash"].exception
    assert isinstance(error, WorkerLostError) and error.exitcode == 3
    ran = {key: rec.terminal[key].result for key in "abcde"}
    assert ran["a"] == ran["b"] != ran["c"] != ran["d"] == ran["e"], ran  # recycled, crashed
    imported = importers(log)
    assert not set(imported) & set(ran.values()), f"imported by workers: {imported} {ran}"
    assert os.getpid() in imported
    # Once where workers are made from: here under fork, here and the zygote otherwise.
    assert len(imported) == (1 if start_method == "fork" else 2), imported


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_a_pool_with_preload_recycles_without_importing(start_method, tmp_path, monkeypatch):
    """ProcessPoolExecutor's preload, the same rule: max_tasks_per_child=1 and a crash,
    and no worker imports the module."""
    name, log = counted_module(tmp_path, monkeypatch)
    context = multiprocessing.get_context(start_method)
    with pipepool.ProcessPoolExecutor(
        2, mp_context=context, max_tasks_per_child=1, preload=[name]
    ) as pool:
        module = importlib.import_module(name)
        pids = list(pool.map(module.pid, range(8), timeout=BOUND))
        with pytest.raises(WorkerLostError):
            pool.submit(module.crash).result(BOUND)
        pids.append(pool.submit(module.pid).result(BOUND))
    assert len(set(pids)) == 9  # one task per worker
    imported = importers(log)
    assert not set(imported) & set(pids), imported
    assert len(imported) == (1 if start_method == "fork" else 2), imported


BROKEN = 'raise ValueError("boom at import")\n'


@pytest.mark.parametrize("kind", ["missing", "raises"])
def test_a_failing_preload_names_the_module_and_why(
    impl, start_method, kind, tmp_path, monkeypatch, no_leaks
):
    """start() raises PreloadError naming the module and the import's error, and leaves
    nothing running the moment it returns (the strict leak check): the zygote reaped,
    every fd closed. The executor is ended, not half-made."""
    name = f"preload_{kind}_{os.getpid()}_{next(_names)}"
    if kind == "raises":
        (tmp_path / f"{name}.py").write_text(BROKEN)
        monkeypatch.syspath_prepend(str(tmp_path))
        why = "ValueError: boom at import"
    else:
        why = f"ModuleNotFoundError: No module named '{name}'"
    monkeypatch.delitem(sys.modules, name, raising=False)
    ex = pipepool.LocalExecutor(
        2, start_method=start_method, loop_impl=impl, preload=["json", name]
    )
    with pytest.raises(PreloadError) as raised:
        ex.start()
    assert raised.value.name == name
    assert repr(name) in str(raised.value) and why in str(raised.value)
    assert raised.value.__cause__ is not None  # the import's own error, or its traceback
    with pytest.raises(RuntimeError, match="ended"):
        ex.start()


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_a_pool_with_a_failing_preload_fails_at_construction(start_method, no_leaks):
    """ProcessPoolExecutor raises it from its constructor, nothing left running."""
    with pytest.raises(PreloadError, match="pipepool_no_such_module"):
        pipepool.ProcessPoolExecutor(
            2,
            mp_context=multiprocessing.get_context(start_method),
            preload=["pipepool_no_such_module"],
        )


@pytest.mark.parametrize("preload", ["json", ["json", 3], [""]])
def test_preload_takes_module_names(preload):
    """A lone string (its letters are not modules) or a name that is not a string is a
    TypeError at construction, on both faces."""
    with pytest.raises(TypeError, match="preload"):
        pipepool.LocalExecutor(1, preload=preload)
    with pytest.raises(TypeError, match="preload"):
        pipepool.ProcessPoolExecutor(1, preload=preload)


UNGUARDED = """\
import multiprocessing
from pipepool import ProcessPoolExecutor

pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context({method!r}),
                           preload=["__main__"])
print(pool.submit(abs, -1).result())
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_an_unguarded_main_cannot_be_preloaded(method, tmp_path):
    """The zygote imports the main module; one that starts a pool at its top level
    (no ``if __name__ == "__main__":``) cannot be: the pool says so in one line."""
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED.format(method=method))
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=BOUND,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode != 0
    assert "PreloadError" in proc.stderr and 'if __name__ == "__main__":' in proc.stderr
