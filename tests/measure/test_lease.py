"""CPU leases between independent ``pipepool run --pin`` runs: real runs, real flocks,
in a lease directory of the test's own (``PIPEPOOL_LEASE_DIR``) so other runs on this
machine neither see nor disturb them."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import ENV, run_cli, wait_for

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and two usable CPUs",
)

# A job that writes the CPUs it may run on to {1}, then holds them until {2} exists.
HOLD = (
    'python3 -c "import os, sys, time, pathlib; '
    "pathlib.Path(sys.argv[1]).write_text(str(sorted(os.sched_getaffinity(0)))); "
    "t = time.monotonic(); "
    "[time.sleep(0.02) for _ in iter(lambda: os.path.exists(sys.argv[2]) "
    'or time.monotonic() - t > 60, True)]" {1} {2}'
)
AFFINITY = 'python3 -c "import os; print(sorted(os.sched_getaffinity(0)))"'


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return dict(ENV, PIPEPOOL_LEASE_DIR=str(tmp_path / "leases"))


def start(env, *args: str, stderr=subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pipepool", "run", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def test_concurrent_runs_get_disjoint_cpus_and_the_next_waits_or_fails(tmp_path, env) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    go = tmp_path / "go"
    holders = []
    try:
        seen = []
        for i in range(len(cpus)):  # each run pins one CPU and holds it
            out = tmp_path / f"held{i}"
            holders.append(start(env, "-j", "1", "--pin", HOLD, ":::", str(out), ":::", str(go)))
            assert wait_for(out.exists, timeout=60), f"run {i} did not start its job"
            seen.append(json.loads(out.read_text()))
        assert all(len(s) == 1 for s in seen)
        assert sorted(s[0] for s in seen) == cpus, seen  # disjoint: every CPU once

        plan = run_cli("run", "-j", "1", "--pin", "--show-plan", "true", env=env)
        assert plan.stdout.count("pid ") == len(cpus), plan.stdout
        assert f"pid {holders[0].pid} since " in plan.stdout, plan.stdout

        failed = run_cli("run", "-j", "1", "--pin", "--lease", "fail", "true", ":::", "x", env=env)
        assert failed.returncode == 255, failed.stderr
        assert "too few for -j 1 x 1; leased by other runs: CPU" in failed.stderr
        assert f"pid {holders[0].pid}" in failed.stderr

        log = tmp_path / "waiter.err"
        with open(log, "w") as err:
            waiter = start(env, "-j", "1", "--pin", "--json", AFFINITY, ":::", "x", stderr=err)
        assert wait_for(lambda: "waiting for CPUs leased" in log.read_text(), timeout=60)
        assert waiter.poll() is None  # waits while every CPU is leased
        go.touch()  # the holders end; their leases go with them
        out, _ = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, log.read_text()
        record = json.loads(out.splitlines()[-1])["records"][0]
        assert json.loads(out.splitlines()[0]) == record["cpus"]
    finally:
        go.touch()
        for proc in holders:
            proc.communicate(timeout=60)


@contextlib.contextmanager
def every_cpu_held(tmp_path: Path, env) -> Iterator[subprocess.Popen[str]]:
    """A run that pins every usable CPU and holds them until the block ends (or the
    block kills it)."""
    go, out = tmp_path / "go", tmp_path / "held"
    n = len(os.sched_getaffinity(0))
    holder = start(env, "-j", str(n), "--pin", HOLD, ":::", str(out), ":::", str(go))
    try:
        assert wait_for(out.exists, timeout=60), "the holder did not start its jobs"
        yield holder
    finally:
        go.touch()
        if holder.returncode is None:  # not killed and collected by the block
            holder.communicate(timeout=60)


def test_lease_ignore_pins_whatever_is_leased(tmp_path, env) -> None:
    with every_cpu_held(tmp_path, env):
        ignoring = run_cli(
            "run", "-j", "1", "--pin", "--lease", "ignore", "true", ":::", "x", env=env
        )
        assert ignoring.returncode == 0, ignoring.stderr


def test_a_killed_run_frees_its_cpus(tmp_path, env) -> None:
    """The kernel drops a dead holder's flock: no stale lease."""
    n = len(os.sched_getaffinity(0))
    with every_cpu_held(tmp_path, env) as holder:
        holder.kill()  # SIGKILL: no clean-up of its own
        holder.communicate(timeout=60)
        # its workers die with it (the pool's design); then every CPU is free again
        args = ("run", "-j", str(n), "--pin", "--lease", "fail", "true", ":::", "x")
        assert wait_for(lambda: run_cli(*args, env=env).returncode == 0, timeout=30)


def test_lease_files_are_usable_by_every_user(tmp_path, env) -> None:
    """Mode 1777 for the directory and 0666 for each file, whatever the umask."""
    proc = subprocess.run(
        ["sh", "-c", f'umask 077; exec "{sys.executable}" -m pipepool run -j 1 --pin true ::: x'],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    folder = Path(env["PIPEPOOL_LEASE_DIR"])
    assert stat.S_IMODE(folder.stat().st_mode) == 0o1777
    files = list(folder.glob("cpu*.lease"))
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o666 for f in files)
