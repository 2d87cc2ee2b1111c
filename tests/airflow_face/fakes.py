"""Stand-ins for Airflow's supervisor entry points, patched in before the workers fork
(Airflow's own executor tests mock ``supervise`` the same way). Each call appends one
JSON line to the file named by PIPEPOOL_FAKE_LOG, so a test reads what ran, where, when.

What a fake does is chosen by the task id's prefix:

* ``ok_*`` returns 0 at once; ``fail_*`` raises RuntimeError("fake failure ...");
* ``block_*`` waits until the file PIPEPOOL_FAKE_GATE exists;
* ``die_*`` kills its own worker with SIGKILL (what the OOM killer does);
* ``oom_*`` moves its worker into a small memory cgroup and fills it: the real OOM killer;
* ``tree_*`` behaves like the real supervisor: forks a task runner into a process group
  of its own, which starts ``sleep`` (a grandchild in that group) and waits forever;
* ``grow_*`` keeps 256 MiB alive in its worker (for the RSS recycling test).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

_KEEP: list[bytes] = []
OOM_CGROUP_ROOT = "/sys/fs/cgroup/memory"


def record(**fields) -> None:
    path = os.environ.get("PIPEPOOL_FAKE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(fields) + "\n")


def read_log(path) -> list[dict]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def run(name: str, **kwargs) -> int:
    """The common body: ``name`` is the task id (or callback / connection id)."""
    began = time.time()
    record(event="start", name=name, pid=os.getpid(), at=began, server=kwargs.get("server"))
    kind = name.split("_", 1)[0]
    if kind == "fail":
        raise RuntimeError(f"fake failure of {name}")
    if kind == "block":
        gate = os.environ["PIPEPOOL_FAKE_GATE"]
        while not os.path.exists(gate):
            time.sleep(0.01)
    elif kind == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "oom":
        _oom()
    elif kind == "tree":
        return _tree(name)
    elif kind == "grow":
        grown = bytearray(256 * 1024 * 1024)  # well past the test's margin, whatever the
        grown[::4096] = b"\x01" * len(grown[::4096])  # parent's size; every page touched
        _KEEP.append(grown)
    record(event="end", name=name, pid=os.getpid(), at=time.time())
    return 0


def supervise_task(ti, **kwargs) -> int:
    return run(ti.task_id, **kwargs)


def supervise_callback(*, id, callback_path, **kwargs) -> int:
    return run(callback_path, **kwargs)


def supervise_connection_test(*, connection_id, **kwargs) -> int:
    return run(connection_id, **kwargs)


def _oom() -> None:
    group = os.path.join(OOM_CGROUP_ROOT, f"pipepool-oom-{os.getpid()}")
    os.mkdir(group)
    with open(os.path.join(group, "memory.limit_in_bytes"), "w") as f:
        f.write(str(96 * 1024 * 1024))
    with open(os.path.join(group, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    hog = []
    for _ in range(64):  # 512 MiB in 8 MiB pieces, every page touched: the kernel kills us
        hog.append(bytearray(8 * 1024 * 1024))
    raise AssertionError("the OOM killer did not act")


def _tree(name: str) -> int:
    pid = os.fork()
    if pid == 0:  # the "task runner": its own group, like Airflow's supervisor makes it
        try:
            os.setpgid(0, 0)
            sleeper = subprocess.Popen(["sleep", "600"])
            record(
                event="tree",
                name=name,
                runner=os.getpid(),
                sleeper=sleeper.pid,
                pgid=os.getpgrp(),
                worker=os.getppid(),
            )
            while True:
                time.sleep(1)
        finally:
            os._exit(1)
    with contextlib.suppress(OSError):  # the runner may have done it first
        os.setpgid(pid, pid)
    _, status = os.waitpid(pid, 0)
    record(event="end", name=name, pid=os.getpid(), at=time.time(), status=status)
    return os.waitstatus_to_exitcode(status)


def oom_cgroup_writable() -> bool:
    return os.geteuid() == 0 and os.access(OOM_CGROUP_ROOT, os.W_OK) and sys.platform == "linux"
