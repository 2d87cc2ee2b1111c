"""What changes from one platform or Python version to the next, checked where it runs.

The default start method is not the same everywhere: spawn on macOS (since 3.8), fork on
Linux up to 3.13, forkserver on Linux from 3.14. LocalExecutor(start_method=None) takes
whatever multiprocessing's default is, so a script that never names one must work on each.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.portable, pytest.mark.timeout(120)]

SCRIPT = """
import operator
from pipepool import LocalExecutor, State

if __name__ == "__main__":
    results = {}
    with LocalExecutor(2) as ex:
        for i in range(6):
            ex.queue(i, operator.mul, i, i)
        while ex.has_work():
            ex.sync(timeout=0.1)
            for key, event in ex.get_event_buffer().items():
                if event.state is State.SUCCESS:
                    results[key] = event.result
                elif event.state is State.FAILED:
                    raise SystemExit(f"task {key} failed: {event.exception!r}")
    print(ex.start_method, ex.implementation, sorted(results.values()))
"""


def platform_default() -> str:
    # The portable mode (tests/portable/sitecustomize.py) gives Linux macOS's default.
    if sys.platform == "darwin" or getattr(sys.modules.get("sitecustomize"), "PORTABLE", False):
        return "spawn"
    return "forkserver" if sys.version_info >= (3, 14) else "fork"


def test_default_start_method_runs_tasks_in_a_fresh_interpreter(impl, tmp_path):
    script = tmp_path / "default_start_method.py"  # a real file: spawn re-imports __main__
    script.write_text(SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script)],
        env=dict(os.environ, PIPEPOOL_IMPL=impl),
        capture_output=True,
        text=True,
        timeout=90,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    method, implementation, results = out.stdout.split(" ", 2)
    if sys.platform in ("darwin", "linux"):
        assert method == platform_default()
    assert implementation == impl
    assert results.strip() == str([i * i for i in range(6)])
