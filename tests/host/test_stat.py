"""The kernel's running counts as ``pipepool.host`` reads them, from files the test
writes under a root: a ``/proc/stat`` sample of some CPUs or all, CPU pressure, the
CPUs' frequency, GNU parallel's load and free memory; and others' CPU between two
samples, the one computation ``pipepool run``'s noise, its ``--wait-quiet`` and the
benchmark suite's noise all make."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipepool import host

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
STAT = (
    "cpu  900 0 300 5000 0 0 0 0 0 0\n"
    # user nice system idle iowait irq softirq steal
    f"cpu0 {TICK} 0 {TICK} 500 7 0 0 0 0 0\n"
    f"cpu1 {4 * TICK} {TICK} 0 500 0 {TICK} {TICK} {TICK} 0 0\n"
    "intr 1 2 3\n"
    "procs_running 5\n"
    "procs_blocked 2\n"
)


def write(root: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return str(root)


def test_a_sample_of_some_cpus_or_all(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "proc/stat": STAT,
            "proc/pressure/cpu": "some avg10=1.00 avg60=0 avg300=0 total=2500000\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq": "2000000\n",
            "sys/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq": "3000000\n",
        },
    )
    one = host.sample([0], root=root)
    assert one is not None
    assert (one.busy, one.steal, one.running, one.freq) == (2.0, 0.0, 5, 2000.0)
    assert one.pressure == 2.5 and one.throttled is None  # no cgroup in this tree
    every = host.sample(None, root=root)  # the per-CPU lines, not the "cpu" sum line
    assert every is not None and (every.busy, every.steal, every.freq) == (10.0, 1.0, 2500.0)


def test_a_file_in_place_of_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    found = host.sample([1], str(stat), root=str(tmp_path / "nothing"))
    assert found is not None and found.busy == 8.0 and found.freq is None
    assert host.running_processes(str(stat)) == 6  # running + blocked, less the one asking
    assert host.sample([1], root=str(tmp_path / "nothing")) is None  # no /proc: unknown
    assert host.running_processes(root=str(tmp_path / "nothing")) is None


def test_no_frequency_unless_every_cpu_tells(tmp_path: Path) -> None:
    root = write(tmp_path, {"sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq": "1000\n"})
    assert host.frequency([0], root) == 1.0
    assert host.frequency([0, 1], root) is None
    assert host.frequency([], root) is None


def test_free_memory_as_gnu_parallel_counts_it(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "proc/meminfo": "MemTotal: 8000 kB\nMemFree: 100 kB\nMemAvailable: 900 kB\n"
            "Buffers: 20 kB\nCached: 300 kB\nSwapCached: 4 kB\nSwapTotal: 0 kB\n"
        },
    )
    assert host.free_memory(root=root) == (100 + 20 + 300 + 4) * 1024
    assert host.free_memory(root=str(tmp_path / "nothing")) is None


@pytest.mark.parametrize(
    ("busy", "ours", "seconds", "cpus", "expected"),
    [
        (3.0, 1.0, 2.0, 2, (2.0, 0.5)),  # others used 2 of the 4 CPU seconds there were
        (1.0, 1.5, 2.0, 2, (0.0, 0.0)),  # our own count ran ahead of the kernel's: no less than 0
        (0.5, 0.0, 1.0, 0, (0.5, 0.5)),  # no CPUs named: one
    ],
)
def test_others_cpu_between_two_samples(busy, ours, seconds, cpus, expected) -> None:
    assert host.others_cpu(busy, ours, seconds, cpus) == pytest.approx(expected)
