"""Helpers for the ``pipepool run`` tests: the real CLI in a subprocess, and /proc
checks that nothing a job started is left running.

Every job that could outlive a test carries a unique marker in its command line (a
``sleep`` duration such as ``1000.4711``); ``survivors(marker)`` finds any process still
carrying it via /proc, so "nothing is left running" is checked, not assumed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# Run against whatever `import pipepool` finds here: the installed package in CI, the
# source tree when the tests run with PYTHONPATH=src.
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
ENV.pop("PIPEPOOL_PROGRESS", None)
_markers = itertools.count(1)


def marker() -> str:
    """Digits unique to this test run, usable as the fraction of a sleep duration."""
    return f"{os.getpid() % 10000:04d}{next(_markers):03d}"


def run_cli(
    *args: str, input: str | None = None, timeout: float = 60, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipepool", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
        cwd=cwd,
    )


def run_cli_impl(
    impl: str, *args: str, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``run_cli`` with the runner's executor on the loop ``impl`` ("python" or
    "cython", as the ``impl`` fixture gives it): ``PIPEPOOL_IMPL`` picks it in the runner
    and in its workers alike."""
    return subprocess.run(
        [sys.executable, "-m", "pipepool", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(ENV, PIPEPOOL_IMPL=impl),
    )


def start_cli(*args: str, cwd: Path | None = None, **kw) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pipepool", *args], env=ENV, cwd=cwd, text=True, **kw
    )


def survivors(mark: str, *, jobs_only: bool = False) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``mark``: the jobs, and
    the runner, its workers and their guardians when the marker is one of its arguments
    (forked processes keep their parent's command line). ``jobs_only``: just the jobs."""
    python = sys.executable.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (
            mark.encode() in cmdline
            and state != "Z"
            and not (jobs_only and cmdline.startswith(python))
        ):
            found.append(int(entry))
    return found


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def kill_survivors(mark: str) -> None:
    for pid in survivors(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def joblog_rows(path: Path) -> list[list[str]]:
    lines = path.read_text().splitlines()
    assert lines[0].split("\t") == [
        "Seq",
        "Host",
        "Starttime",
        "JobRuntime",
        "Send",
        "Receive",
        "Exitval",
        "Signal",
        "Command",
    ]
    return [line.split("\t") for line in lines[1:]]


def marked():
    """The body of a ``mark`` fixture: a fresh marker, then a check that no process
    carrying it is left (each test module wraps it in ``@pytest.fixture``)."""
    m = marker()
    yield m
    # A worker killed by the runner exits a moment later, and its guardian after it.
    wait_for(lambda: not survivors(m), timeout=3)
    left = survivors(m)
    kill_survivors(m)
    assert not left, f"processes left running: {left}"
