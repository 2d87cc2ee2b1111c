"""Host facts: what this machine and this process are, read in one place.

Every read of ``/proc`` and ``/sys`` in the package is in this room (and the answers
of ``sysctl`` and ``ps`` where those files do not exist); the rest of the package asks
it. Each reader takes ``root``, the directory the kernel's files are read under ("/" in
use): a test points it at a captured tree (``tests/host/topologies/``), and a file that
cannot be read is an unknown (None), never an error. Only the standard library.

``_files`` is the one reader under a root; ``_process``: this process and one other
(the CPUs it may use, its threads, another's state and memory) and the machine's
runnable threads; ``_table``: the process table (parents, groups, states, CPU time,
environments); ``_cgroup``: this process's cgroups (where they are, their CPU quota and
cpuset, throttling, OOM kill counts); ``_stat``: ``/proc/stat`` samples, CPU pressure,
frequency, load and free memory, and others' CPU between two samples; ``_topology``:
the CPU topology (sysfs, or macOS's sysctl counts); ``_machine``: the CPU model and
governor.

A worker imports this room (the spin asks for runnable threads): ``_process`` loads
with it, the rest on first use.
"""

from typing import TYPE_CHECKING

from .. import _lazy
from ._files import ROOT
from ._process import (
    allowed_count,
    allowed_cpus,
    load_average,
    process_state,
    rss_bytes,
    runnable_threads,
    thread_count,
    thread_listed,
)

if TYPE_CHECKING:  # what __getattr__ loads at run time, as the type checker sees it
    from ._cgroup import (
        OomCounter,
        cgroup_cpuset,
        cgroup_directory,
        cgroup_path,
        cgroup_quota,
        oom_counters,
        throttled_seconds,
    )
    from ._machine import cpu_governor, cpu_model
    from ._stat import (
        Sample,
        cpu_pressure,
        free_memory,
        frequency,
        meminfo,
        others_cpu,
        proc_stat,
        running_processes,
        sample,
    )
    from ._table import (
        Process,
        children,
        holding_environ,
        processes,
        processes_from_ps,
        tree_cpu_seconds,
    )
    from ._topology import (
        Cpu,
        Topology,
        TopologyError,
        macos_topology,
        parse_cpu_list,
        parse_cpu_mask,
        read_macos,
        read_topology,
    )

_LAZY = {
    **dict.fromkeys(
        (
            "OomCounter",
            "cgroup_cpuset",
            "cgroup_directory",
            "cgroup_path",
            "cgroup_quota",
            "oom_counters",
            "throttled_seconds",
        ),
        "_cgroup",
    ),
    **dict.fromkeys(("cpu_governor", "cpu_model"), "_machine"),
    **dict.fromkeys(
        (
            "Sample",
            "cpu_pressure",
            "free_memory",
            "frequency",
            "meminfo",
            "others_cpu",
            "proc_stat",
            "running_processes",
            "sample",
        ),
        "_stat",
    ),
    **dict.fromkeys(
        (
            "Process",
            "children",
            "holding_environ",
            "processes",
            "processes_from_ps",
            "tree_cpu_seconds",
        ),
        "_table",
    ),
    **dict.fromkeys(
        (
            "Cpu",
            "Topology",
            "TopologyError",
            "macos_topology",
            "parse_cpu_list",
            "parse_cpu_mask",
            "read_macos",
            "read_topology",
        ),
        "_topology",
    ),
}

if not TYPE_CHECKING:  # the type checker reads the names imported above, not this hook
    __getattr__, __dir__ = _lazy.exports(globals(), _LAZY)


__all__ = [
    "ROOT",
    "Cpu",
    "OomCounter",
    "Process",
    "Sample",
    "Topology",
    "TopologyError",
    "allowed_count",
    "allowed_cpus",
    "cgroup_cpuset",
    "cgroup_directory",
    "cgroup_path",
    "cgroup_quota",
    "children",
    "cpu_governor",
    "cpu_model",
    "cpu_pressure",
    "free_memory",
    "frequency",
    "holding_environ",
    "load_average",
    "macos_topology",
    "meminfo",
    "oom_counters",
    "others_cpu",
    "parse_cpu_list",
    "parse_cpu_mask",
    "proc_stat",
    "process_state",
    "processes",
    "processes_from_ps",
    "read_macos",
    "read_topology",
    "rss_bytes",
    "runnable_threads",
    "running_processes",
    "sample",
    "thread_count",
    "thread_listed",
    "throttled_seconds",
    "tree_cpu_seconds",
]
