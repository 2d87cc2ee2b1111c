"""Where ``--pin`` puts each job slot: a plan made from the machine's topology.

The rules, and the order in which they give way when they cannot all hold (the first
listed gives way first; the plan says which did, and for which slots):

1. **a core left for pipepool** (``--pin-reserve``): the runner and its workers get a
   core of their own (an E-core if there is one, else the core of the lowest CPU);
2. **P-cores only**: efficiency cores (capacity or max frequency below 95% of the top
   CPU's, as BenchExec counts them) are used only when the P-cores are not enough;
3. **each slot inside one last-level-cache domain** (an L3, or the largest shared cache):
   given up for a slot wider than any free domain;
4. **no two slots on the siblings of one core** (SMT threads): given up only when the
   slots need more than the cores (then slots share cores, one thread each, and the
   plan names them).

Always: every slot gets its own CPUs (refused only when the CPUs are too few for
``-j`` x ``--cpus-per-job``), each slot is placed in the smallest unit that holds it
(one core for a slot as wide as a core's threads, then one L2 cluster, then one
last-level-cache domain), and slots are spread: each goes to the last-level-cache
domain that holds the fewest slots so far, and among those to the NUMA node that
holds the fewest.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ..host import Topology

RULES = (
    "a core left for pipepool",
    "P-cores only",
    "each slot inside one last-level cache",
    "no two slots on the siblings of one core",
)


class PlacementError(ValueError):
    """The slots cannot be pinned at all (a message for the user)."""


@dataclass(slots=True)
class Plan:
    topology: Topology
    slots: list[tuple[int, ...]]  # slot s (from 1) -> its CPUs: slots[s - 1]
    given_up: list[str] = field(default_factory=list)  # which rule gave way, and why
    reserved: tuple[int, ...] = ()  # the core left for pipepool

    def shares(self, index: int) -> list[str]:
        """What slot ``index`` (from 0) shares with other slots: its cores, its
        last-level cache, its NUMA node."""
        top = self.topology
        mine = self.slots[index]
        found = []
        for attr, name in (("core", "a core"), ("llc", "its L3"), ("node", "its NUMA node")):
            units = {getattr(top.cpus[c], attr) for c in mine}
            if len(top.groups(attr)) < 2:
                continue  # one L3 or one NUMA node for all: nothing to tell
            others = [
                str(i + 1)
                for i, cpus in enumerate(self.slots)
                if i != index and units & {getattr(top.cpus[c], attr) for c in cpus}
            ]
            if others:
                found.append(f"{name} with slot{'s' if len(others) > 1 else ''} {','.join(others)}")
        return found

    def describe(self, index: int) -> str:
        top = self.topology
        cpus = self.slots[index]
        first = top.cpus[cpus[0]]
        where = [f"package {first.package}"]
        if first.node >= 0:
            where.append(f"NUMA node {first.node}")
        if any(top.efficient(c) for c in cpus):
            where.append("E-core" if len(cpus) == 1 else "E-cores")
        shared = self.shares(index)
        return (
            f"slot {index + 1}: CPU{'s' if len(cpus) > 1 else ''} {cpu_list(cpus)} "
            f"({', '.join(where)}; {'shares ' + '; '.join(shared) if shared else 'shares nothing'})"
        )

    def text(self) -> str:
        top = self.topology
        lines = [
            f"placement of {len(self.slots)} slot(s) on {len(top.cpus)} usable CPU(s), "
            f"{len(top.cores())} core(s), {len(top.groups('llc'))} last-level cache(s), "
            f"{len(set(top.groups('node')) - {-1}) or 1} NUMA node(s) (from {top.source})"
        ]
        lines += [f"  {self.describe(i)}" for i in range(len(self.slots))]
        if self.reserved:
            lines.append(f"  left for pipepool: CPUs {cpu_list(self.reserved)}")
        for note in self.given_up:
            lines.append(f"  given up: {note}")
        for note in top.notes:
            lines.append(f"  note: {note}")
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict[str, object]:
        return {
            "slots": [
                {"slot": i + 1, "cpus": list(cpus), "shares": self.shares(i)}
                for i, cpus in enumerate(self.slots)
            ],
            "reserved": list(self.reserved),
            "given_up": list(self.given_up),
        }


def plan(top: Topology, jobs: int, width: int, *, reserve: bool = False) -> Plan:
    """Place ``jobs`` slots of ``width`` CPUs each on ``top`` by the rules above."""
    total = len(top.cpus)
    if jobs * width > total:
        cpus = cpu_list(sorted(top.cpus)) if top.cpus else "none"
        raise PlacementError(
            f"-j {jobs} with {width} CPU(s) per job needs {jobs * width} CPUs, but this "
            f"process may use {total} (CPUs {cpus}): use -j {max(total // width, 1)} or "
            "fewer" + (", or fewer --cpus-per-job" if width > 1 else "")
        )
    cores = top.cores()
    e_cores = [c for c, cpus in cores.items() if all(top.efficient(x) for x in cpus)]
    p_cores = [c for c in cores if c not in e_cores]
    reserved_core = None
    if reserve and len(cores) > 1:
        reserved_core = e_cores[0] if e_cores else min(cores, key=lambda c: min(cores[c]))
    # Keep the most important rules first: siblings, then containment, then P-cores,
    # then the reserve; the first plan found keeps the most (the product runs through
    # the combinations from all kept to none, the most important rule varying slowest).
    for siblings, contain, p_only, keep_reserve in itertools.product((True, False), repeat=4):
        if keep_reserve and reserved_core is None and reserve:
            continue  # one core only: nothing to leave
        if (not keep_reserve and not reserve) or (not p_only and not e_cores):
            continue  # the rule was not asked for, or has nothing to hold: its "kept" try runs
        pool = p_cores if p_only and p_cores else list(cores)
        if keep_reserve and reserved_core is not None:
            pool = [c for c in pool if c != reserved_core]
        slots = _place(top, cores, pool, jobs, width, contain=contain, whole=siblings)
        if slots is None:
            continue
        kept = (keep_reserve or not reserve, p_only or not e_cores, contain, siblings)
        dropped = [rule for rule, k in zip(RULES, kept, strict=True) if not k]
        given_up = [_why(rule, top, slots, jobs, width) for rule in dropped]
        reserved = cores[reserved_core] if keep_reserve and reserved_core is not None else ()
        return Plan(top, slots, [g for g in given_up if g], tuple(reserved))
    raise PlacementError(f"cannot place -j {jobs} x {width} CPUs")  # pragma: no cover


def _why(rule: str, top: Topology, slots: list[tuple[int, ...]], jobs: int, width: int) -> str:
    if rule == RULES[0]:
        return f"{rule}: {jobs} slot(s) of {width} need every core"
    if rule == RULES[1]:
        on_e = [str(i + 1) for i, s in enumerate(slots) if any(top.efficient(c) for c in s)]
        return f"{rule}: slot(s) {','.join(on_e)} on E-cores" if on_e else ""
    if rule == RULES[2]:
        wide = [str(i + 1) for i, s in enumerate(slots) if len({top.cpus[c].llc for c in s}) > 1]
        return f"{rule}: slot(s) {','.join(wide)} span last-level caches" if wide else ""
    core_of = {c: top.cpus[c].core for s in slots for c in s}
    sharing = [
        str(i + 1)
        for i, s in enumerate(slots)
        if any(
            core_of[c] == core_of[d] for j, t in enumerate(slots) if j != i for c in s for d in t
        )
    ]
    return f"{rule}: slot(s) {','.join(sharing)} share cores (more slots than cores)"


def _place(
    top: Topology,
    cores: dict[int, tuple[int, ...]],
    pool: list[int],
    jobs: int,
    width: int,
    *,
    contain: bool,
    whole: bool,
) -> list[tuple[int, ...]] | None:
    """One try at the plan under the rules kept; None if it does not fit."""
    units = _units(top, cores, pool, whole)
    free = dict(units)
    rank = {u: i for i, u in enumerate(units)}
    used: dict[str, dict[int, int]] = {"llc": {}, "node": {}}  # slots per domain, node
    slots: list[tuple[int, ...]] = []
    for _ in range(jobs):
        candidates = _candidates(top, free, rank, width, used, contain=contain)
        if candidates is None:
            return None
        picked = _smallest(top, cores, free, candidates, width)
        if picked is None:
            return None
        taken: list[int] = []
        for unit in picked:
            taken.extend(free.pop(unit))
        slot = tuple(sorted(_prefer_p(top, taken)[:width]))
        slots.append(slot)
        for attr, counts in used.items():
            for unit in {getattr(top.cpus[c], attr) for c in slot}:
                counts[unit] = counts.get(unit, 0) + 1
    return slots


def _units(
    top: Topology, cores: dict[int, tuple[int, ...]], pool: list[int], whole: bool
) -> dict[int, tuple[int, ...]]:
    """What a slot is made of: whole cores (their unused threads stay idle), or CPUs,
    one thread of each core before any second one, so slots meet on a core last."""
    if whole:
        return {c: cores[c] for c in pool}
    order = sorted(
        (cpu for c in pool for cpu in cores[c]),
        key=lambda cpu: (cores[top.cpus[cpu].core].index(cpu), cpu),
    )
    return {cpu: (cpu,) for cpu in order}


def _candidates(
    top: Topology,
    free: dict[int, tuple[int, ...]],
    rank: dict[int, int],
    width: int,
    used: dict[str, dict[int, int]],
    *,
    contain: bool,
) -> list[int] | None:
    """The units the next slot is taken from: those of the last-level-cache domain that
    holds it with P-cores, then with the fewest slots so far, then on the NUMA node with
    the fewest; a slot wider than any domain's free room fills domains one after
    another (None if ``contain`` forbids it)."""
    domains: dict[int, list[int]] = {}
    for unit, cpus in free.items():
        domains.setdefault(top.cpus[cpus[0]].llc, []).append(unit)
    fitting = [d for d, us in domains.items() if sum(len(free[u]) for u in us) >= width]
    if not fitting:
        if contain:
            return None
        return sorted(free, key=lambda u: (top.cpus[free[u][0]].llc, rank[u]))
    chosen = min(
        fitting,
        key=lambda d: (
            _p_short(top, free, domains[d], width),
            used["llc"].get(d, 0),
            used["node"].get(top.cpus[free[domains[d][0]][0]].node, 0),
            d,
        ),
    )
    return sorted(domains[chosen], key=rank.__getitem__)


def _p_short(top: Topology, free: dict, units: list[int], width: int) -> bool:
    """True if the units cannot give ``width`` CPUs of P-cores (so E-cores come last)."""
    p = sum(1 for u in units for c in free[u] if not top.efficient(c))
    return p < width


def _prefer_p(top: Topology, cpus: list[int]) -> list[int]:
    return sorted(cpus, key=lambda c: (top.efficient(c), c))


def _smallest(
    top: Topology,
    cores: dict[int, tuple[int, ...]],
    free: dict[int, tuple[int, ...]],
    units: list[int],
    width: int,
) -> list[int] | None:
    """The fewest units giving ``width`` CPUs from the smallest group that holds them:
    one core, else one L2 domain, else the units in order (P first); a group none of
    whose cores another slot uses before one whose cores are in use."""
    ordered = sorted(units, key=lambda u: any(top.efficient(c) for c in free[u]))
    free_cpus = {c for cpus in free.values() for c in cpus}

    def busy(group: list[int]) -> bool:
        owned = {top.cpus[c].core for u in group for c in free[u]}
        return any(c not in free_cpus for core in owned for c in cores[core])

    for attr in ("core", "l2"):
        groups: dict[int, list[int]] = {}
        for u in ordered:
            groups.setdefault(getattr(top.cpus[free[u][0]], attr), []).append(u)
        holding = [g for g in groups.values() if sum(len(free[u]) for u in g) >= width]
        if holding:
            best = min(
                holding,
                key=lambda g: (
                    any(top.efficient(c) for u in g for c in free[u]),
                    busy(g),
                    sum(len(free[u]) for u in g),
                    g[0],
                ),
            )
            return _take(free, best, width)
    return _take(free, ordered, width)


def _take(free: dict[int, tuple[int, ...]], units: list[int], width: int) -> list[int] | None:
    taken, count = [], 0
    for u in units:
        if count >= width:
            break
        taken.append(u)
        count += len(free[u])
    return taken if count >= width else None


def cpu_list(cpus) -> str:
    """``0,1,2,3,8`` as ``0-3,8``."""
    out: list[str] = []
    values = sorted(cpus)
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(out)
