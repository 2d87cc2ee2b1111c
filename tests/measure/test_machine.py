"""The machine a run ran on, in ``--json``'s summary (``machine``) and pyperf's export:
CPU model, topology, kernel, governor; null where the system does not tell. Read under a
root: the captured tree of a hybrid Intel machine (``topologies/``) stands for another
machine, with the files its capture left out written in where a test needs them."""

from __future__ import annotations

import json
import platform
from pathlib import Path

from helpers import captured_topology, run_cli
from pipepool.measure import machine_metadata

TREE = "20em64t-hybrid-1p6c2t+2ca4co1t"


def _tree(tmp_path: Path) -> Path:
    return captured_topology(tmp_path, TREE)


def test_the_topology_of_the_tree_and_null_for_what_it_does_not_tell(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    found = machine_metadata(str(root))
    # hwloc's description of the capture: 6 P-cores x 2 threads, 8 E-cores x 1
    assert found["topology"] == (
        "1 package(s), 14 core(s), 20 CPU(s), 1 last-level cache(s), 1 NUMA node(s)"
    )
    assert found["cpu_model_name"] is None  # no /proc/cpuinfo in the capture
    assert found["cpu_governor"] is None  # cpufreq without scaling_governor
    assert found["kernel"] == platform.release()


def test_the_model_and_governor_where_readable(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc/cpuinfo").write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\n"
        "model name\t: 12th Gen Intel(R) Core(TM) i7-12700H\n"
    )
    # through cpu0/cpufreq -> ../cpufreq/policy0, as the kernel links it
    (root / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").write_text("powersave\n")
    found = machine_metadata(str(root))
    assert found["cpu_model_name"] == "12th Gen Intel(R) Core(TM) i7-12700H"
    assert found["cpu_governor"] == "powersave"


def test_json_summary_holds_the_machine() -> None:
    result = run_cli("run", "--json", "true", ":::", "1")
    assert result.returncode == 0, result.stderr
    machine = json.loads(result.stdout.splitlines()[-1])["machine"]
    assert machine["kernel"] == platform.release()
    assert isinstance(machine["cpu_count"], int) and machine["cpu_count"] >= 1
    assert isinstance(machine["topology"], str) and "CPU(s)" in machine["topology"]
    assert "cpu_model_name" in machine and "cpu_governor" in machine  # null if not told
