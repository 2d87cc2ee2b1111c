"""The executor's own tests pass with /dev/shm unusable (issue 35; see test_no_dev_shm.py
for the namespace). The futures and run faces' files pass there too (226 tests, measured
by hand: minutes, so not in every run); this one keeps the executor's in the suite."""

from __future__ import annotations

import sys

import pytest

from .test_no_dev_shm import ROOT, WHY_NOT, without_shm

pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


@pytest.mark.timeout(300)
def test_executor_tests_pass_without_dev_shm() -> None:
    executor_tests = ROOT / "tests" / "executor" / "test_executor.py"
    proc = without_shm(
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-n",
        "0",  # one process: the outer run's workers are busy enough
        "-q",
        str(executor_tests),
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout
