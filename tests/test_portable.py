"""The portable mode (``tests/portable/``, run by ``.ci/portable``): this Linux without the
facilities macOS lacks, in the parent and in every worker, and spawn by default.

These tests start their own interpreters in the mode, so they check it wherever the
suite runs: that the mode really hides what it claims (else the portable pass would test
Linux a second time).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

MODE = Path(__file__).resolve().parent / "portable"


def mode_env() -> dict[str, str]:
    """This environment with the mode on, and this process's sys.path (the package
    under test, the tests' modules) for the interpreters it starts."""
    path = [str(MODE), *(p for p in sys.path if p)]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path))


PROBE = textwrap.dedent("""
    import json, multiprocessing
    import portable_probe
    from pipepool import LocalExecutor

    if __name__ == "__main__":
        seen = {"parent": portable_probe.facilities()}
        for method in ("fork", "spawn", "forkserver"):
            with LocalExecutor(1, start_method=method) as ex:
                ex.queue(method, portable_probe.facilities)
                assert ex.wait_until_done(60), method
                event = ex.get_event_buffer()[method]
                assert event.state.value == "success", event.exception
                seen[method] = event.result
        with LocalExecutor(1) as ex:
            default = ex.start_method
        print(json.dumps({"seen": seen, "default": default,
                          "multiprocessing": multiprocessing.get_start_method()}))
""")


def test_the_mode_hides_each_facility_in_the_parent_and_in_every_worker(tmp_path):
    script = tmp_path / "probe.py"  # a file: spawn's children re-import __main__
    script.write_text(PROBE)
    out = subprocess.run(
        [sys.executable, str(script)],
        env=mode_env(),
        capture_output=True,
        text=True,
        timeout=100,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.splitlines()[-1])
    for where, facilities in report["seen"].items():
        assert facilities, where
        visible = [name for name, there in facilities.items() if there]
        assert not visible, f"{where} still sees {visible}"
    assert set(report["seen"]) == {"parent", "fork", "spawn", "forkserver"}
    assert report["default"] == report["multiprocessing"] == "spawn"  # as on macOS
