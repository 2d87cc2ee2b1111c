"""The frequency of a job's CPUs in its noise record: read from cpufreq's
``scaling_cur_freq`` where the kernel has it, null where it does not, never guessed.

The readable case uses the captured sysfs tree of a hybrid Intel machine
(``topologies/20em64t-hybrid-...``: each ``cpuN/cpufreq`` a link to ``cpufreq/policyN``,
the real shape), with the current frequencies the capture left out written in; the
unreadable case is the same tree as captured, and this machine as it is."""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers import captured_topology, run_cli
from pipepool.measure import _noise

TREE = "20em64t-hybrid-1p6c2t+2ca4co1t"
STAT = "cpu  1 0 1 9 0 0 0 0 0 0\ncpu0 1 0 1 9 0 0 0 0 0 0\ncpu2 1 0 1 9 0 0 0 0 0 0\n"


def _tree(tmp_path: Path) -> Path:
    return captured_topology(tmp_path, TREE)


def _set(root: Path, khz: dict[int, int]) -> None:
    for cpu, value in khz.items():
        # through the link, as the kernel has it: cpuN/cpufreq -> ../cpufreq/policyN
        (root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq").write_text(
            f"{value}\n"
        )


def test_a_frequency_change_between_start_and_end_is_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    stat = tmp_path / "stat"
    stat.write_text(STAT + "procs_running 1\n")
    assert (root / "sys/devices/system/cpu/cpu2/cpufreq").is_symlink()
    _set(root, {0: 2_000_000, 2: 3_000_000})
    before = _noise.sample((0, 2), str(stat), str(root))
    _set(root, {0: 1_000_000, 2: 1_500_000})
    after = _noise.sample((0, 2), str(stat), str(root))
    assert before is not None and after is not None
    assert before.freq == 2500.0 and after.freq == 1250.0
    record = _noise.measure(before, after, 0.0, 2)
    assert record["freq_mhz"] == [2500.0, 1250.0]
    assert record["freq_change"] == -0.5
    assert record["noisy"] is False  # reported, not judged


def test_every_cpu_of_the_stat_when_the_job_is_not_pinned(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    _set(root, {0: 1_000_000, 2: 2_000_000})
    got = _noise.sample(None, str(stat), str(root))
    assert got is not None and got.freq == 1500.0  # the CPUs /proc/stat lists


def test_no_current_frequency_in_the_tree_is_null_not_a_guess(tmp_path: Path) -> None:
    root = _tree(tmp_path)  # as captured: cpuinfo_max_freq, but no scaling_cur_freq
    assert (root / "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").exists()
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    before = _noise.sample((0, 2), str(stat), str(root))
    _set(root, {0: 1_000_000})  # one CPU of two readable: still no mean to give
    after = _noise.sample((0, 2), str(stat), str(root))
    assert before is not None and after is not None
    assert before.freq is None and after.freq is None
    record = _noise.measure(before, after, 0.0, 2)
    assert record["freq_mhz"] is None and record["freq_change"] is None


def test_this_machine_s_records_say_what_its_kernel_exposes() -> None:
    result = run_cli("run", "--repeat", "2", "--json", "true", ":::", "1")
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout.splitlines()[-1])["records"]
    listed = []  # an unpinned job's CPUs: those /proc/stat lists
    if os.path.exists("/proc/stat"):
        with open("/proc/stat") as f:
            listed = [line.split()[0] for line in f if line[:3] == "cpu" and line[3].isdigit()]
    readable = bool(listed) and all(
        os.path.exists(f"/sys/devices/system/cpu/{cpu}/cpufreq/scaling_cur_freq") for cpu in listed
    )
    for record in records:
        if record["noise"] is None:  # no /proc (macOS): nothing sampled
            continue
        freq = record["noise"]["freq_mhz"]
        assert (freq is not None) == readable, record["noise"]
        if freq is not None:
            assert len(freq) == 2 and all(f > 0 for f in freq)
