"""The portable mode (``tests/portable/``, run by ``.ci/portable``): this Linux without the
facilities macOS lacks, in the parent and in every worker, and spawn by default.

These tests start their own interpreters in the mode, so they check it wherever the
suite runs: that the mode really hides what it claims (else the portable pass would test
Linux a second time), and the paths that broke without those facilities.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import proc_table

pytestmark = [pytest.mark.portable, pytest.mark.timeout(120)]

MODE = Path(__file__).resolve().parents[1] / "portable"


def python_in_mode(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` with the mode on, and this process's sys.path (the package under
    test, the tests' modules) for the interpreters it starts."""
    path = [str(MODE), *(p for p in sys.path if p)]
    return subprocess.run(
        [sys.executable, *args],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(path)),
        capture_output=True,
        text=True,
        timeout=100,
        cwd=cwd,
    )


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
    out = python_in_mode(str(script), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.splitlines()[-1])
    for where, facilities in report["seen"].items():
        assert facilities, where
        visible = [name for name, there in facilities.items() if there]
        assert not visible, f"{where} still sees {visible}"
    assert set(report["seen"]) == {"parent", "fork", "spawn", "forkserver"}
    assert report["default"] == report["multiprocessing"] == "spawn"  # as on macOS


BURN = "import time; t = time.process_time()\nwhile time.process_time() - t < 0.3: pass"


def run_in_mode(*args: str, cwd: Path) -> dict:
    """``pipepool run --json ARGS`` in the mode: its JSON summary."""
    proc = python_in_mode("-m", "pipepool", "run", "--json", "--no-summary", *args, cwd=cwd)
    assert proc.stdout, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_run_with_a_timeout_waits_without_pidfd_or_waitid(tmp_path):
    """``--timeout`` waits for each job with a bound: by pidfd on Linux, by polling
    waitid elsewhere; without both (macOS before Python 3.13) by polling wait4, which
    reaps, so the job's status and CPU time must come from that wait4."""
    burn = tmp_path / "burn.py"
    burn.write_text(BURN)
    summary = run_in_mode(
        "--timeout", "60", ":::", "sh -c 'exit 3'", f"{sys.executable} {burn}", cwd=tmp_path
    )
    records = {r["seq"]: r for r in summary["records"]}
    assert [records[1][k] for k in ("exitval", "signal", "timed_out", "error")] == [
        3,
        0,
        False,
        None,
    ], records[1]
    assert records[2]["status"] == "ok", records[2]
    cpu = records[2]["user"] + records[2]["sys"]
    assert cpu >= 0.25, records[2]  # its 0.3 s of CPU (process_time), from wait4's rusage


def test_run_kills_a_job_past_its_timeout_without_pidfd_or_waitid(tmp_path):
    mark = f"1000.{os.getpid()}"  # a sleep duration nothing else runs with
    summary = run_in_mode("--timeout", "0.5", "sleep", ":::", mark, cwd=tmp_path)
    (record,) = summary["records"]
    assert [record[k] for k in ("exitval", "signal", "timed_out")] == [-1, 15, True], record
    left = [pid for pid, (_, cmd) in proc_table.processes().items() if mark.encode() in cmd]
    assert not left, f"the timed-out job lives on: {left}"


@pytest.mark.parametrize(
    ("option", "refusal"),
    [
        (["--pin"], "--pin needs CPU affinity (os.sched_setaffinity)"),
        (["--load", "4"], "--load reads /proc/stat, which this system does not have"),
        (["--memfree", "1G"], "--memfree reads /proc/meminfo, which this system does not have"),
    ],
)
def test_run_refuses_what_needs_a_missing_facility_before_it_starts(tmp_path, option, refusal):
    proc = python_in_mode("-m", "pipepool", "run", *option, "touch", ":::", "ran", cwd=tmp_path)
    assert proc.returncode == 255, proc.stderr[-3000:]
    assert refusal in proc.stderr
    assert not (tmp_path / "ran").exists()
