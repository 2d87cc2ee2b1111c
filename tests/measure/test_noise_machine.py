"""The noise verdict weighs what a job's record measures of the whole machine, not only
others' CPU on the job's own CPUs: CPU pressure (PSI "some"), runnable processes against
the machine's CPUs, and wall over CPU time. A pinned job whose CPU the kernel kept for it
while a CPU-bound process ran per core is still slowed (the issue measured 2-7%), and its
verdict says so, with the reason.

The rules on fixed samples first (each condition alone, and a quiet machine), then the
issue's case on this machine: a hog per CPU, unpinned, beside a pinned job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ENV, wait_for
from pipepool.measure._noise import Sample, measure


def sample(t: float, busy: float, pressure: float | None, running: int | None) -> Sample:
    return Sample(t, busy, 0.0, pressure, None, running)


def judge(*, pressure: tuple[float, float] = (0.0, 0.0), running=(1, 1), cpu: float = 1.0):
    """A pinned job of 1 s wall time and ``cpu`` s of CPU; others used none of its CPU."""
    before = sample(10.0, 100.0, pressure[0], running[0])
    after = sample(11.0, 100.0 + cpu, pressure[1], running[1])
    return measure(before, after, cpu, 1, machine_cpus=2)


def test_the_issue_s_loaded_machine_is_noisy_with_the_reasons() -> None:
    # cpu_pressure 0.50, procs_running 3-5 on 2 CPUs, wall/CPU 1.05: as the issue measured
    record = judge(pressure=(5.0, 5.5), running=(3, 5), cpu=1 / 1.05)
    assert record["contention"] < 0.1  # nobody else on its CPU: the old verdict's "quiet"
    assert record["noisy"] is True, record
    why = record["why"]
    assert "CPU pressure 50%" in why and "3-5 runnable on 2 CPUs" in why, why
    assert "wall time 1.05x its CPU time" in why, why


def test_each_machine_wide_condition_alone_is_enough() -> None:
    pressure = judge(pressure=(1.0, 1.3))
    assert pressure["noisy"] and "CPU pressure 30%" in pressure["why"], pressure
    crowded = judge(running=(3, 3))
    assert crowded["noisy"] and "3-3 runnable on 2 CPUs" in crowded["why"], crowded


@pytest.mark.parametrize(
    ("pressure", "running"),
    [
        ((1.0, 1.1), (1, 1)),  # 10% pressure: below the bound
        ((0.0, 0.0), (3, 1)),  # crowded at one look only: not the whole time
        ((0.0, 0.0), (2, 2)),  # the reader and one other on 2 CPUs: room left
    ],
)
def test_a_machine_with_room_is_not_noisy(pressure, running) -> None:
    record = judge(pressure=pressure, running=running)
    assert record["noisy"] is False and record["why"] is None, record


def test_a_short_job_is_not_judged_by_the_machine_either() -> None:
    before = sample(10.0, 0.0, 1.0, 5)
    after = sample(10.05, 0.05, 1.05, 5)
    assert measure(before, after, 0.05, 1, machine_cpus=2)["noisy"] is False


HOG = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 60: pass\n"
BURN = (
    "import resource\n"
    "while resource.getrusage(resource.RUSAGE_SELF).ru_utime < 0.4:\n"
    "    sum(range(10000))\n"
)


@pytest.mark.skipif(
    not os.path.exists("/proc/stat") or not hasattr(os, "sched_setaffinity"),
    reason="needs /proc/stat and CPU affinity (Linux)",
)
def test_a_pinned_job_beside_a_hog_per_cpu_is_noisy(tmp_path: Path) -> None:
    burn = tmp_path / "burn.py"
    burn.write_text(BURN)
    cpus = os.cpu_count() or 1
    hogs = [
        subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL) for _ in range(cpus)
    ]
    try:
        assert wait_for(lambda: _runnable() > cpus, timeout=30), "the hogs never ran"
        env = dict(ENV, PIPEPOOL_LEASE_DIR=str(tmp_path / "leases"))
        proc = subprocess.run(
            [sys.executable, "-m", "pipepool", "run", "-j", "1", "--pin", "--json",
             f"{sys.executable} {burn}", ":::", "x"],
            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert proc.returncode == 0, proc.stderr
    (record,) = json.loads(proc.stdout.splitlines()[-1])["records"]
    assert record["noisy"] is True, record["noise"]
    assert "runnable on" in record["noise"]["why"], record["noise"]


def _runnable() -> int:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("procs_running "):
                return int(line.split()[1])
    return 0
