"""The machine's CPU topology as ``--pin`` places job slots by it, read from the kernel.

Linux: ``/sys/devices/system/cpu`` (each CPU's core siblings, package, die, caches and
which CPUs share each, ``cpu_capacity`` or ``cpufreq/cpuinfo_max_freq`` for P and E
cores), ``/sys/devices/system/node`` (NUMA nodes). Everything is read under a *root*
(``/`` by default) so that tests, and ``pipepool run --sysfs-root DIR --show-plan``,
read a tree captured from another machine. The CPUs a run may use are its affinity
mask on this machine; under another root, the online CPUs less those its cgroup's
cpuset excludes (v1 ``cpuset.cpus``, v2 ``cpuset.cpus.effective``: ``_cgroup``), as
hwloc does.

macOS has no affinity API and no per-CPU topology: ``sysctl`` gives the counts of
packages, cores and threads and of P and E cores (``hw.perflevel*``), which is what
``read_macos`` reports; nothing can be pinned there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

from ._files import ROOT, read_int, read_text
from ._process import allowed_cpus

EFFICIENT_BELOW = 0.95  # a CPU whose capacity (or max frequency) is below 95% of the top
# one's is an efficiency (E) core: BenchExec's threshold for "slower" cores


class TopologyError(ValueError):
    """The topology cannot be read here (a message for the user)."""


@dataclass(frozen=True, slots=True)
class Cpu:
    """One hardware thread (a Linux "CPU") and the units it belongs to. A unit's id is
    the lowest CPU number in it, so ids are comparable across machines' captures."""

    id: int
    core: int  # the SMT siblings of one core
    package: int
    die: int
    node: int  # NUMA node number (-1: the kernel names none)
    llc: int  # the last-level cache domain (the largest shared data cache)
    l2: int  # the level-2 cache domain (a cluster on arm, an E-core module on Intel)
    capacity: int  # cpu_capacity, else max frequency in kHz, else 0 (unknown)
    llc_level: int = 0  # the last-level cache's level (3 mostly; 2 on small machines)


@dataclass(slots=True)
class Topology:
    cpus: dict[int, Cpu]  # the CPUs this run may use, by number
    source: str = "sysfs"  # where it came from: "sysfs", or "sysctl" (macOS counts only)
    notes: list[str] = field(default_factory=list)  # what could not be read
    top_capacity: int = 0  # the largest CPU capacity (or max frequency): set below

    def __post_init__(self) -> None:
        self.top_capacity = max((c.capacity for c in self.cpus.values()), default=0)

    def restricted(self, cpus) -> Topology:
        """This topology with only ``cpus`` usable (those no other run leases)."""
        keep = set(cpus)
        return Topology(
            {n: c for n, c in self.cpus.items() if n in keep}, self.source, list(self.notes)
        )

    def cores(self) -> dict[int, tuple[int, ...]]:
        """Core id -> its usable CPUs, sorted."""
        found: dict[int, list[int]] = {}
        for cpu in sorted(self.cpus):
            found.setdefault(self.cpus[cpu].core, []).append(cpu)
        return {core: tuple(cpus) for core, cpus in found.items()}

    def groups(self, attr: str) -> dict[int, tuple[int, ...]]:
        """Unit id -> its usable CPUs, for ``attr`` one of Cpu's unit fields."""
        found: dict[int, list[int]] = {}
        for cpu in sorted(self.cpus):
            found.setdefault(getattr(self.cpus[cpu], attr), []).append(cpu)
        return {unit: tuple(cpus) for unit, cpus in found.items()}

    def efficient(self, cpu: int) -> bool:
        """An E-core's CPU: capacity below EFFICIENT_BELOW of the top one's."""
        own = self.cpus[cpu].capacity  # 0: not known (then not called slower)
        return bool(own) and own < EFFICIENT_BELOW * self.top_capacity


def read_topology(root: str = ROOT, allowed: set[int] | None = None) -> Topology:
    """The topology of the CPUs under ``root``, limited to ``allowed`` (default: this
    process's affinity mask when ``root`` is ``/``, else the captured cgroup's cpuset)."""
    from ._cgroup import cgroup_cpuset

    base = os.path.join(root, "sys/devices/system/cpu")
    here = os.path.abspath(root) == "/"
    mask = allowed_cpus() if here else None
    if not os.path.isdir(base):
        if sys.platform == "darwin" and here:
            return read_macos()
        if mask is not None:
            flat = {n: Cpu(n, n, 0, 0, -1, n, n, 0) for n in mask}
            return Topology(flat, notes=[f"no {base}: each CPU taken as a core of its own"])
        raise TopologyError(f"no CPU topology under {base}")
    online = _online(base)
    if allowed is None:
        allowed = mask if mask is not None else cgroup_cpuset(root)
    usable = sorted(online if allowed is None else online & allowed)
    nodes = _nodes(root)
    core_of = _cores(base, usable)
    cpus = {n: _cpu(base, n, core_of.get(n), nodes.get(n, -1)) for n in usable}
    notes: list[str] = []
    if cpus and all(c.llc_level == 0 for c in cpus.values()):
        notes.append("the kernel lists no caches: cache domains are unknown")
    return Topology(cpus, notes=notes)


def _cores(base: str, usable: list[int]) -> dict[int, int]:
    """CPU -> its core's id (the lowest CPU of the core), for the CPUs whose ``core_id``
    the kernel gives. A core is the thread siblings that share one (package, die,
    core_id), as hwloc counts them: AMD's Bulldozer lists a module's two cores as thread
    siblings, each with its own core_id; older kernels repeat a core_id in each die of a
    package."""
    first_of: dict[tuple, int] = {}
    core_of: dict[int, int] = {}
    for n in usable:
        topo = os.path.join(base, f"cpu{n}", "topology")
        core_id = read_int(os.path.join(topo, "core_id"), -1)
        if core_id < 0:
            continue
        package = read_int(os.path.join(topo, "physical_package_id"), 0)
        threads = frozenset(_cpu_set(topo, "thread_siblings_list", "thread_siblings"))
        die = read_int(os.path.join(topo, "die_id"), 0)
        core_of[n] = first_of.setdefault((package, die, core_id, threads), n)
    return core_of


def _cpu(base: str, n: int, core: int | None, node: int) -> Cpu:
    """CPU ``n`` and the units it belongs to (``core``: None where the kernel gives no
    core_id, then its thread siblings make its core)."""
    path = os.path.join(base, f"cpu{n}")
    topo = os.path.join(path, "topology")
    siblings = _cpu_set(topo, "thread_siblings_list", "thread_siblings") or {n}
    caches = _caches(path)
    llc_level = max(caches, default=0)
    capacity = read_int(os.path.join(path, "cpu_capacity"), 0) or read_int(
        os.path.join(path, "cpufreq/cpuinfo_max_freq"), 0
    )
    return Cpu(
        n,
        core=core if core is not None else min(siblings),
        package=max(read_int(os.path.join(topo, "physical_package_id"), 0), 0),
        die=max(read_int(os.path.join(topo, "die_id"), 0), 0),
        node=node,
        llc=min(caches[llc_level]) if caches else min(siblings),
        l2=min(caches[2]) if 2 in caches else min(siblings),
        capacity=capacity,
        llc_level=llc_level,
    )


def read_macos(sysctl_output: str | None = None) -> Topology:
    """What ``sysctl`` tells of this Mac: counts, no per-CPU placement (macOS has no
    affinity API; its scheduler places threads). ``sysctl_output``: the text ``sysctl
    hw`` prints (``name: value`` lines; tests give captured ones), else it is run."""
    if sysctl_output is None:
        try:
            out = subprocess.run(["sysctl", "hw"], capture_output=True, text=True, timeout=5)
            sysctl_output = out.stdout
        except (OSError, subprocess.SubprocessError):
            sysctl_output = ""
    return macos_topology(sysctl_output)


def macos_topology(text: str) -> Topology:
    """The topology ``sysctl hw``'s output tells. CPUs are numbered by performance
    level, P-cores (``hw.perflevel0``) first; ``hw.perflevelN.cpusperl2`` groups each
    level's CPUs into L2 clusters (Apple Silicon, whose last level ``sysctl`` names is
    L2); else one last-level cache for all, as on an Intel Mac (``hw.l3cachesize``).
    SMT siblings: ``hw.logicalcpu`` over ``hw.physicalcpu`` threads per core."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            try:
                values[name.strip()] = int(value.strip())
            except ValueError:
                continue  # a string (hw.perflevel0.name) or a list (hw.cachesize)
    logical = next(
        (values[k] for k in ("hw.logicalcpu", "hw.activecpu", "hw.ncpu") if values.get(k)), 0
    )
    if not logical:
        raise TopologyError("sysctl told no CPU count (hw.logicalcpu)")
    physical = values.get("hw.physicalcpu") or logical
    per_core = max(logical // physical, 1)
    levels = []  # (logical CPUs, CPUs per L2) of each performance level, fastest first
    for n in range(values.get("hw.nperflevels", 8)):
        count = values.get(f"hw.perflevel{n}.logicalcpu")
        if not count:
            break
        levels.append((count, values.get(f"hw.perflevel{n}.cpusperl2") or count))
    notes = [
        "macOS: counts from sysctl only (no NUMA, no per-CPU placement); nothing can be pinned"
    ]
    if sum(c for c, _ in levels) != logical:
        if levels:
            notes.append("sysctl's performance levels do not add up to its CPUs: ignored")
        else:
            notes.append("sysctl names no performance levels: P and E cores not told apart")
        levels = [(logical, logical)]
    clustered = any(per_l2 < count for count, per_l2 in levels)
    cpus: dict[int, Cpu] = {}
    first = 0
    for rank, (count, per_l2) in enumerate(levels):
        for n in range(first, first + count):
            core = n - n % per_core
            l2 = first + (n - first) - (n - first) % per_l2
            cpus[n] = Cpu(
                n,
                core,
                0,
                0,
                -1,
                l2 if clustered else 0,
                l2 if clustered else core,
                len(levels) - rank,  # capacity: P above E, for efficient()
                llc_level=2 if clustered else (3 if values.get("hw.l3cachesize") else 0),
            )
        first += count
    return Topology(cpus, source="sysctl", notes=notes)


# -- reading sysfs ---------------------------------------------------------------------------


def parse_cpu_list(text: str) -> set[int]:
    """``0-3,8,10-11`` -> {0, 1, 2, 3, 8, 10, 11}."""
    found: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def parse_cpu_mask(text: str) -> set[int]:
    """``00000000,00000101`` (32-bit words, most significant first) -> {0, 8}."""
    value = int(text.strip().replace(",", "") or "0", 16)
    return {bit for bit in range(value.bit_length()) if value >> bit & 1}


def _cpu_set(folder: str, listed: str, mask: str) -> set[int]:
    """A CPU set from the file ``mask`` (``00000000,00000300``) in ``folder``, else
    ``listed`` (``8-9``): the mask first, as hwloc reads them (some old kernels wrote
    a ``shared_cpu_list`` that disagrees with its map)."""
    text = read_text(os.path.join(folder, mask))
    if text is not None and text.strip():
        return parse_cpu_mask(text)
    text = read_text(os.path.join(folder, listed))
    return parse_cpu_list(text) if text is not None and text.strip() else set()


def _online(base: str) -> set[int]:
    text = read_text(os.path.join(base, "online"))
    if text is not None and text.strip():
        return parse_cpu_list(text)
    found = set()  # no list: each cpuN folder with a topology, and not marked offline
    for name in os.listdir(base):
        match = re.fullmatch(r"cpu(\d+)", name)
        if not match:
            continue
        if read_text(os.path.join(base, name, "online")) in ("0\n", "0"):
            continue
        if os.path.isdir(os.path.join(base, name, "topology")):
            found.add(int(match.group(1)))
    return found


def _nodes(root: str) -> dict[int, int]:
    base = os.path.join(root, "sys/devices/system/node")
    found: dict[int, int] = {}
    try:
        names = os.listdir(base)
    except OSError:
        return found
    for name in names:
        match = re.fullmatch(r"node(\d+)", name)
        if match:
            for cpu in _cpu_set(os.path.join(base, name), "cpulist", "cpumap"):
                found[cpu] = int(match.group(1))
    return found


def _caches(cpu_path: str) -> dict[int, set[int]]:
    """Level -> the CPUs sharing this CPU's data (or unified) cache of that level."""
    base = os.path.join(cpu_path, "cache")
    found: dict[int, set[int]] = {}
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return found
    for name in names:
        if not name.startswith("index"):
            continue
        folder = os.path.join(base, name)
        if (read_text(os.path.join(folder, "type")) or "").strip() == "Instruction":
            continue
        level = read_int(os.path.join(folder, "level"), 0)
        shared = _cpu_set(folder, "shared_cpu_list", "shared_cpu_map")
        if level and shared:
            found[level] = shared
    return found
