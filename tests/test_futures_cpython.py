"""CPython's own ``test_cancel_futures`` (Lib/test/test_concurrent_futures) against
pipepool's ProcessPoolExecutor, cold and on a warm pool (the adaptive depth grown, so the
50 calls are handed to the workers at once). The test is the interpreter's: loaded from
its ``test`` package, never copied here; an interpreter installed without that package
skips it, saying so."""

from __future__ import annotations

import importlib
import multiprocessing
import unittest

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
    pytest.skip("this interpreter has no test.test_concurrent_futures (its test suite)")


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
