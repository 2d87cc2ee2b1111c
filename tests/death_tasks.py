"""Tasks for tests/worker/test_death.py: workers that die of one cause each. Importable by
module name, so spawn and forkserver workers find them."""

from __future__ import annotations

import os
import signal

CGROUP_V1_MEMORY = "/sys/fs/cgroup/memory"


def count_then_die(counter: str) -> None:
    """Raise a (fake) count of OOM kills by one, then SIGKILL this worker: what the
    kernel's OOM killer does, in that order (it counts, then kills)."""
    with open(counter) as f:
        count = int(f.read().split()[1])
    with open(counter, "w") as f:
        f.write(f"oom_kill {count + 1}\n")
    os.kill(os.getpid(), signal.SIGKILL)


def fill_own_cgroup(group: str, limit: int) -> None:
    """Move this worker into a new cgroup v1 memory group of ``limit`` bytes and fill it:
    the real OOM killer, confined to that group (nothing else lives in it)."""
    os.mkdir(group)
    with open(os.path.join(group, "memory.limit_in_bytes"), "w") as f:
        f.write(str(limit))
    memsw = os.path.join(group, "memory.memsw.limit_in_bytes")
    if os.path.exists(memsw):  # swap accounting: no swap to escape to either
        with open(memsw, "w") as f:
            f.write(str(limit))
    with open(os.path.join(group, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    hog = []
    for _ in range(8 * limit // (8 << 20)):  # 8x the limit, 8 MiB at a time, all touched
        hog.append(bytearray(8 << 20))
    raise AssertionError("the OOM killer did not act")
