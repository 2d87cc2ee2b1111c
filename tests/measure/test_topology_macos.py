"""The macOS topology reader, fed what ``sysctl`` printed on real Macs (the reader
takes the text; ``read_macos`` runs ``sysctl hw`` only when given none). Each capture
is quoted as published, with its source:

* Apple M1 Pro, 8 P + 2 E cores, macOS 12: ``sysctl -a`` in Dr-Noob/cpufetch issue 139
  (https://github.com/Dr-Noob/cpufetch/issues/139);
* Apple M1, macOS 11 (before ``hw.perflevel*``): ``sysctl -a | grep -i cpu`` in
  kimwalisch/primesieve issue 96 (https://github.com/kimwalisch/primesieve/issues/96);
* an Intel Mac, 4 cores x 2 threads: ``sysctl hw | grep cpu`` in hyrise/hyrise pull
  request 2405 (https://github.com/hyrise/hyrise/pull/2405), with the cache lines of
  an Intel Mac in apache/arrow pull request 7408
  (https://github.com/apache/arrow/pull/7408)."""

from __future__ import annotations

import pytest

from pipepool.host import TopologyError, macos_topology, read_macos
from pipepool.measure._placement import plan

M1_PRO = """\
hw.ncpu: 10
hw.byteorder: 1234
hw.activecpu: 10
hw.perflevel1.cpusperl2: 2
hw.perflevel1.l1dcachesize: 65536
hw.perflevel1.l1icachesize: 131072
hw.perflevel1.l2cachesize: 4194304
hw.perflevel1.logicalcpu: 2
hw.perflevel1.logicalcpu_max: 2
hw.perflevel1.physicalcpu: 2
hw.perflevel1.physicalcpu_max: 2
hw.perflevel0.cpusperl2: 4
hw.perflevel0.l1dcachesize: 131072
hw.perflevel0.l1icachesize: 196608
hw.perflevel0.l2cachesize: 12582912
hw.perflevel0.logicalcpu: 8
hw.perflevel0.logicalcpu_max: 8
hw.perflevel0.physicalcpu: 8
hw.perflevel0.physicalcpu_max: 8
hw.features.allows_security_research: 0
"""

M1_MACOS_11 = """\
kern.cpu_checkin_interval: 4000
hw.ncpu: 8
hw.activecpu: 8
hw.physicalcpu: 8
hw.physicalcpu_max: 8
hw.logicalcpu: 8
hw.logicalcpu_max: 8
hw.cputype: 16777228
hw.cpusubtype: 2
hw.cpu64bit_capable: 1
"""

INTEL = """\
hw.ncpu: 8
hw.activecpu: 8
hw.cpu64bit_capable: 1
hw.cpufamily: 943936839
hw.cpufrequency: 2000000000
hw.cpufrequency_max: 2000000000
hw.cpufrequency_min: 2000000000
hw.cpusubfamily: 0
hw.cpusubtype: 8
hw.cputype: 7
hw.logicalcpu: 8
hw.logicalcpu_max: 8
hw.physicalcpu: 4
hw.physicalcpu_max: 4
hw.cachesize: 68719476736 32768 262144 16777216 0 0 0 0 0 0
hw.l1dcachesize: 32768
hw.l2cachesize: 262144
hw.l3cachesize: 12582912
"""


def test_apple_silicon_p_cores_first_in_their_l2_clusters() -> None:
    top = macos_topology(M1_PRO)
    assert top.source == "sysctl" and sorted(top.cpus) == list(range(10))
    assert [n for n in top.cpus if top.efficient(n)] == [8, 9]  # perflevel1: E
    assert sorted(top.groups("l2").values()) == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9)]
    assert len(top.cores()) == 10  # no SMT
    # the plan --show-plan would print: P-cores first, spread over the P clusters
    slots = plan(top, 2, 1).slots
    assert not any(top.efficient(c) for s in slots for c in s)
    assert top.cpus[slots[0][0]].l2 != top.cpus[slots[1][0]].l2


def test_without_performance_levels_no_cpu_is_called_an_e_core() -> None:
    top = macos_topology(M1_MACOS_11)
    assert sorted(top.cpus) == list(range(8)) and len(top.cores()) == 8
    assert not any(top.efficient(n) for n in top.cpus)
    assert any("P and E cores not told apart" in note for note in top.notes)


def test_intel_mac_smt_siblings_and_one_l3() -> None:
    top = macos_topology(INTEL)  # hw.cachesize, a list, is passed over
    assert top.cores() == {0: (0, 1), 2: (2, 3), 4: (4, 5), 6: (6, 7)}
    assert list(top.groups("llc")) == [0] and top.cpus[0].llc_level == 3
    assert not any(top.efficient(n) for n in top.cpus)
    slots = plan(top, 4, 1).slots  # one slot per core: no two on one core's siblings
    assert len({top.cpus[s[0]].core for s in slots}) == 4


def test_no_cpu_count_is_an_error_not_a_guess() -> None:
    with pytest.raises(TopologyError, match="no CPU count"):
        macos_topology("kern.ostype: Darwin\n")
    with pytest.raises(TopologyError):
        read_macos("")  # given text: sysctl is not run
