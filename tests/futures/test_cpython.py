"""CPython's own tests (Lib/test/test_concurrent_futures) against pipepool's
ProcessPoolExecutor.

``test_cancel_futures``, cold and on a warm pool (the adaptive depth grown, so the 50
calls are handed to the workers at once): the interpreter's, loaded from its ``test``
package where it ships one; an interpreter installed without it (pyenv's 3.11 and 3.12
builds here have no test_concurrent_futures) runs ``_CpythonShutdownTest`` below, that
test's text as CPython 3.13 has it, so the check never skips.

Every test of the executor-neutral mixins, ``WaitTests``, ``AsCompletedTests`` and
``ExecutorTest`` (the ``Future`` contract as ``wait()``, ``as_completed()``, ``map`` and
``submit`` see it: a pool's futures are its task records, settled in bulk), loaded from
the interpreter's ``test`` package; an interpreter without it skips them, saying so (pyenv's
3.13 here ships it)."""

from __future__ import annotations

import importlib
import multiprocessing
import time
import unittest
from typing import Any

import pytest

import futures_tasks as ft
import pipepool


def cpython_shutdown_tests() -> type:
    """``ExecutorShutdownTest`` of this interpreter's test suite (3.12+: a package)."""
    for name in ("test.test_concurrent_futures.test_shutdown", "test.test_concurrent_futures"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        cls = getattr(module, "ExecutorShutdownTest", None)
        if cls is not None and hasattr(cls, "test_cancel_futures"):
            return cls
    return _CpythonShutdownTest


class _CpythonShutdownTest:
    """CPython 3.13's ``ExecutorShutdownTest.test_cancel_futures``
    (Lib/test/test_concurrent_futures/test_shutdown.py, PSF license), unchanged but for
    this docstring and its comments, for interpreters installed without their tests."""

    worker_count: int
    executor: Any

    def test_cancel_futures(self):
        assert self.worker_count <= 5, "test needs few workers"
        fs = [self.executor.submit(time.sleep, 0.1) for _ in range(50)]
        self.executor.shutdown(cancel_futures=True)
        cancelled = [fut for fut in fs if fut.cancelled()]
        self.assertGreater(len(cancelled), 20)  # type: ignore[attr-defined]
        others = [fut for fut in fs if not fut.cancelled()]
        for fut in others:
            self.assertTrue(fut.done(), msg=f"{fut._state=}")  # type: ignore[attr-defined]
            self.assertIsNone(fut.exception())  # type: ignore[attr-defined]
        self.assertGreater(len(others), 0)  # type: ignore[attr-defined]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_cpython_test_cancel_futures(start_method, warm):
    base = cpython_shutdown_tests()

    class PipepoolShutdownTest(base, unittest.TestCase):  # type: ignore[misc,valid-type]
        executor_type = pipepool.ProcessPoolExecutor
        worker_count = 5
        ctx = start_method

        def get_context(self):
            return multiprocessing.get_context(self.ctx)

        def setUp(self):
            self.executor = self.executor_type(
                max_workers=self.worker_count, mp_context=self.get_context()
            )
            if warm:
                for _ in range(5):
                    list(self.executor.map(ft.square, range(2000)))

        def tearDown(self):
            self.executor.shutdown(wait=True)

    result = unittest.TestResult()
    PipepoolShutdownTest("test_cancel_futures").run(result)
    problems = [text for _, text in result.failures + result.errors]
    assert result.testsRun == 1 and not problems, "\n".join(problems)


# The mixins CPython runs on every executor (its create_executor_tests), by module (3.12+).
MIXINS = (
    ("test_wait", "WaitTests"),
    ("test_as_completed", "AsCompletedTests"),
    ("executor", "ExecutorTest"),
)


def cpython_cases() -> list[tuple[str, str, str]]:
    """``(module, mixin, test name)`` of every test of ``MIXINS`` this interpreter ships."""
    cases = []
    for module_name, mixin_name in MIXINS:
        try:
            module = importlib.import_module(f"test.test_concurrent_futures.{module_name}")
        except ImportError:
            continue
        mixin = getattr(module, mixin_name, None)
        names = sorted(n for n in dir(mixin) if n.startswith("test_")) if mixin else []
        cases += [(module_name, mixin_name, name) for name in names]
    return cases


CASES = cpython_cases() or [("", "", "")]  # one case that skips, saying why


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=["::".join(c[1:]) or "absent" for c in CASES])
def test_cpython_executor_contract(start_method, case):
    module_name, mixin_name, name = case
    if not name:
        pytest.skip("this interpreter has no test.test_concurrent_futures (its test suite)")
    module = importlib.import_module(f"test.test_concurrent_futures.{module_name}")
    util = importlib.import_module("test.test_concurrent_futures.util")
    mixin = getattr(module, mixin_name)

    class PipepoolCase(mixin, util.ExecutorMixin, util.BaseTestCase):  # type: ignore[misc,valid-type]
        executor_type = pipepool.ProcessPoolExecutor
        ctx = start_method

    result = unittest.TestResult()
    PipepoolCase(name).run(result)
    problems = [text for _, text in result.failures + result.errors]
    assert result.testsRun == 1 and not problems, "\n".join(problems)
    if result.skipped:
        pytest.skip(f"CPython's test skips itself here: {result.skipped[0][1]}")
