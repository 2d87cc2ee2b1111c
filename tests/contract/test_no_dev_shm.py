"""No /dev/shm needed (issue 35): pipepool's own faces work where POSIX semaphores cannot
be made (AWS Lambda, some sandboxes), and nothing pipepool starts creates a SemLock.

Each test runs Python in a private mount namespace (``unshare -m``, root) where /dev/shm
is an empty read-only tmpfs: there ``multiprocessing.Lock()`` fails with EROFS, so any
SemLock made by pipepool, in the parent or in a worker, fails the run. Run as root (CI
is); elsewhere the tests skip and say why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HIDE_SHM = 'mount -t tmpfs -o ro,size=4k tmpfs /dev/shm && exec "$@"'


def _why_not() -> str | None:
    if not sys.platform.startswith("linux"):
        return "mount namespaces are Linux's"
    if os.geteuid() != 0:
        return "a private mount namespace needs root (CI runs as root)"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", HIDE_SHM, "sh", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"cannot hide /dev/shm here: {probe.stderr.strip()}"
    return None


WHY_NOT = _why_not()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


def without_shm(*argv: str, timeout: float = 100) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with /dev/shm unusable; stdin closed, output captured."""
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", HIDE_SHM, "sh", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


def test_the_stdlib_pools_cannot_run_there() -> None:
    """The control: with /dev/shm hidden, SemLock and what needs it fail (EROFS)."""
    code = """
import concurrent.futures, errno, multiprocessing
for make in (multiprocessing.Lock, lambda: concurrent.futures.ProcessPoolExecutor(2)):
    try:
        make()
    except OSError as exc:
        assert exc.errno == errno.EROFS, exc
    else:
        raise SystemExit("made a SemLock with /dev/shm hidden")
print("refused")
"""
    proc = without_shm(sys.executable, "-c", code)
    assert proc.returncode == 0 and proc.stdout.strip() == "refused", proc.stderr


FACES = """
import multiprocessing, os, subprocess, sys
from pipepool import LocalExecutor, ProcessPoolExecutor

for method in ("fork", "forkserver", "spawn"):
    with LocalExecutor(2, start_method=method) as ex:
        for i in range(6):
            ex.queue(i, pow, i, 2)
        results = {}
        while ex.has_work():
            ex.sync(timeout=0.1)
            for key, event in ex.get_event_buffer().items():
                if event.state.terminal:
                    results[key] = event.result
        assert results == {i: i * i for i in range(6)}, results
        os.kill(ex.worker_pids()[0], 9)  # a replacement starts without /dev/shm too
        ex.queue("after", pow, 3, 2)
        while ex.has_work():
            ex.sync(timeout=0.1)
    context = multiprocessing.get_context(method)
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        assert list(pool.map(abs, range(-5, 0))) == [5, 4, 3, 2, 1]
        assert pool.submit(pow, 2, 10).result(timeout=60) == 1024
run = subprocess.run(
    [sys.executable, "-m", "pipepool", "run", "echo", "{}", ":::", "a", "b", "c"],
    capture_output=True, text=True, stdin=subprocess.DEVNULL,
)
assert run.returncode == 0 and sorted(run.stdout.split()) == ["a", "b", "c"], run
print("faces ok")
"""


def test_every_face_runs_without_dev_shm() -> None:
    """LocalExecutor (every start method, a killed worker replaced), ProcessPoolExecutor
    and pipepool run: no SemLock anywhere (it would fail with EROFS), no warning at exit
    from the resource tracker about leaked semaphores."""
    proc = without_shm(sys.executable, "-X", "dev", "-c", FACES)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "faces ok"
    assert "leaked semaphore" not in proc.stderr and "resource_tracker" not in proc.stderr, (
        proc.stderr
    )
