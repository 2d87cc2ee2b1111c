"""``--pin``'s placement by topology, on ten sysfs trees captured from real machines
(``tests/host/topologies``, from hwloc's test data), with hwloc's own ``lstopo``
rendering of each as the oracle: the reader must find the cores, packages, last-level
caches, L2 domains and NUMA nodes hwloc finds, and every plan for ``-j`` 1..N with 1 and
2 CPUs per job must keep the rules, judged by hwloc's units, not by the reader's."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from helpers import TOPOLOGIES, captured_topology
from pipepool.host import parse_cpu_list, parse_cpu_mask, read_topology
from pipepool.measure._placement import RULES, PlacementError, plan

DATA = TOPOLOGIES
WITH_ORACLE = sorted(p.stem for p in DATA.glob("*.console"))
ALL = sorted(p.name[: -len(".tar.gz")] for p in DATA.glob("*.tar.gz"))


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("topologies")
    return {name: captured_topology(base, name) for name in ALL}


def oracle(name: str) -> dict[str, set[frozenset[int]]]:
    """hwloc's units as partitions of the PUs (OS numbers): core, package, l2, llc, node."""
    lines = (DATA / f"{name}.console").read_text().splitlines()
    stack: list[dict] = []
    owner: dict[int, dict[str, object]] = {}
    for line in lines:
        if not line.strip():
            break
        match = re.match(r"(\s*)(\w+)(?:\(\w+\))? L#(\d+)(?: \(P#(\d+))?", line)
        if not match:
            continue  # the Machine line
        indent, kind, logical, physical = match.groups()
        while stack and stack[-1]["indent"] >= len(indent):
            stack.pop()
        if kind == "NUMANode":  # a memory child: its CPUs are its parent's
            if stack:
                stack[-1]["node"] = int(logical)
            continue
        entry = {"indent": len(indent), "kind": kind, "l": int(logical), "node": None}
        stack.append(entry)
        if kind == "PU":
            units: dict[str, object] = {"node": -1}
            caches = {}
            for anc in stack:
                if anc["node"] is not None:
                    units["node"] = anc["node"]
                cache = re.fullmatch(r"L(\d)(d|u)?Cache", str(anc["kind"]))
                if cache:
                    caches[int(cache.group(1))] = anc["l"]
                if anc["kind"] in ("Core", "Package"):
                    units[str(anc["kind"]).lower()] = anc["l"]
            pu = int(physical)
            units.setdefault("core", ("pu", pu))
            units.setdefault("package", 0)
            units["l2"] = ("l2", caches[2]) if 2 in caches else ("core", units["core"])
            top = max(caches, default=0)
            units["llc"] = (top, caches[top]) if caches else ("core", units["core"])
            owner[pu] = units
    partitions: dict[str, set[frozenset[int]]] = {"pus": {frozenset(owner)}}
    for unit in ("core", "package", "l2", "llc", "node"):
        groups: dict[object, set[int]] = {}
        for pu, units in owner.items():
            groups.setdefault(units[unit], set()).add(pu)
        partitions[unit] = {frozenset(g) for g in groups.values()}
    return partitions


def unit_of(partition: set[frozenset[int]], cpu: int) -> frozenset[int]:
    return next(g for g in partition if cpu in g)


def test_cpu_lists_and_masks_parse() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpu_mask("00000000,00000101\n") == {0, 8}
    assert parse_cpu_mask("00000001,00000000") == {32}


@pytest.mark.parametrize("name", WITH_ORACLE)
def test_the_reader_finds_the_units_hwloc_finds(name: str, roots) -> None:
    top = read_topology(str(roots[name]))
    truth = oracle(name)
    assert {frozenset(top.cpus)} == truth["pus"]
    for unit, attr in (
        ("core", "core"),
        ("package", "package"),
        ("l2", "l2"),
        ("llc", "llc"),
        ("node", "node"),
    ):
        mine = {frozenset(cpus) for cpus in top.groups(attr).values()}
        assert mine == truth[unit], unit


@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize("name", WITH_ORACLE)
def test_every_plan_keeps_the_rules_by_hwloc_s_units(name: str, width: int, roots) -> None:
    top = read_topology(str(roots[name]))
    truth = oracle(name)
    cores = truth["core"]
    smt = min(len(c) for c in cores)  # threads of the narrowest core
    for jobs in range(1, len(top.cpus) // width + 1):
        p = plan(top, jobs, width)
        used = [c for slot in p.slots for c in slot]
        assert len(p.slots) == jobs and all(len(s) == width for s in p.slots)
        assert len(used) == len(set(used)) and set(used) <= set(top.cpus)
        cores_per_slot = math.ceil(width / smt)
        siblings_kept = jobs * cores_per_slot <= len(cores)
        slot_cores = [{unit_of(cores, c) for c in slot} for slot in p.slots]
        shared = any(a & b for i, a in enumerate(slot_cores) for b in slot_cores[i + 1 :])
        assert shared == (not siblings_kept), (jobs, p.slots)
        assert any(RULES[3] in g for g in p.given_up) == (not siblings_kept), p.given_up
        if siblings_kept:  # the smallest unit: as few cores as the slot needs
            assert all(len(c) == cores_per_slot for c in slot_cores), (jobs, p.slots)
        if not p.given_up:  # each slot inside one of hwloc's last-level caches
            assert all(len({unit_of(truth["llc"], c) for c in s}) == 1 for s in p.slots)
        llcs = [unit_of(truth["llc"], slot[0]) for slot in p.slots]
        fitting = [g for g in truth["llc"] if len(g) // smt * smt >= width]
        if siblings_kept and jobs <= len(fitting):  # spread: a cache of its own each
            assert len(set(llcs)) == jobs, (jobs, p.slots)
        nodes = [unit_of(truth["node"], slot[0]) for slot in p.slots]
        real_nodes = len(truth["node"])
        if siblings_kept and jobs <= real_nodes and jobs <= len(fitting):
            assert len(set(nodes)) == jobs, (jobs, p.slots)
    with pytest.raises(PlacementError, match="use -j"):
        plan(top, len(top.cpus) // width + 1, width)


def test_hybrid_p_cores_first_then_e_cores(roots) -> None:
    """The hybrid Intel (no hwloc rendering): CPUs 0-11 are six P-cores with two
    threads, 12-19 eight E-cores (max 3.9 GHz against 5.0)."""
    top = read_topology(str(roots["20em64t-hybrid-1p6c2t+2ca4co1t"]))
    assert [c for c in top.cpus if top.efficient(c)] == list(range(12, 20))
    six = plan(top, 6, 1)
    assert six.slots == [(0,), (2,), (4,), (6,), (8,), (10,)] and not six.given_up
    seven = plan(top, 7, 1)
    assert seven.slots[6] == (12,)
    assert seven.given_up == ["P-cores only: slot(s) 7 on E-cores"]
    pairs = plan(top, 6, 2)  # a slot of two: both threads of one P-core
    assert pairs.slots == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11)]
    quads = plan(top, 2, 4)  # wider than a P-core: two P-cores, not an E cluster
    assert quads.slots == [(0, 1, 2, 3), (4, 5, 6, 7)]
    reserved = plan(top, 6, 1, reserve=True)  # the core left for pipepool: an E-core
    assert reserved.reserved == (12,) and not reserved.given_up
    # only as far as needed: E-cores for slots 7 and 8, and the reserve is still kept
    eight = plan(top, 8, 1, reserve=True)
    assert eight.reserved == (12,) and eight.given_up == ["P-cores only: slot(s) 7,8 on E-cores"]


def test_cgroup_cpuset_limits_the_usable_cpus(roots) -> None:
    """A cgroup v2 cpuset (cpuset.cpus.effective 0-5) of a 32-CPU machine."""
    top = read_topology(str(roots["32amd64-4s2n4c-cgroup2"]))
    assert sorted(top.cpus) == [0, 1, 2, 3, 4, 5]
    with pytest.raises(PlacementError, match="needs 8 CPUs, but this process may use 6"):
        plan(top, 4, 2)


def test_the_reserve_gives_way_first(roots) -> None:
    top = read_topology(str(roots["16em64t-4s2c2t"]))
    kept = plan(top, 7, 1, reserve=True)
    assert kept.reserved == (0, 8) and not {0, 8} & {c for s in kept.slots for c in s}
    dropped = plan(top, 8, 1, reserve=True)
    assert dropped.reserved == () and dropped.given_up[0].startswith(RULES[0])
    assert not any(RULES[3] in g for g in dropped.given_up)  # cores still one per slot


def test_a_slot_wider_than_any_last_level_cache_spans_them(roots) -> None:
    top = read_topology(str(roots["16em64t-4s2c2t"]))  # L3s of 4 CPUs
    wide = plan(top, 1, 8)
    assert len({top.cpus[c].llc for c in wide.slots[0]}) == 2
    assert wide.given_up == [f"{RULES[2]}: slot(s) 1 span last-level caches"]


def test_the_plan_text_names_cpus_and_what_slots_share(roots) -> None:
    top = read_topology(str(roots["16em64t-4s2c2t"]))
    text = plan(top, 9, 1).text()
    assert (
        "slot 1: CPU 0 (package 0, NUMA node 0; shares a core with slot 9; its L3 with slots 5,9)"
        in text
    )
    assert "given up: no two slots on the siblings of one core: slot(s) 1,9 share cores" in text
