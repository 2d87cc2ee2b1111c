"""Processes seen from the scheduler: task process groups and memory (Linux's /proc
first; psutil, an Airflow dependency, where there is none). OOM kills are the core's
(``pipepool._oom``): the executor's error says when one ended a worker."""

from __future__ import annotations

import contextlib
import os
import signal

from .. import host


def rss_bytes(pid: int | None = None) -> int:
    """Resident memory of a process now (not its peak)."""
    found = host.rss_bytes(pid)
    if found is not None:
        return found
    import psutil

    return psutil.Process(pid).memory_info().rss


def task_groups(worker_pids: list[int]) -> dict[int, set[int]]:
    """``{worker pid: process groups of its descendants}``, from one pass over the process
    table; our own group is never in it (the workers share it)."""
    import psutil

    wanted = set(worker_pids)
    if not wanted:
        return {}
    own = os.getpgrp()
    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info["ppid"]
        if ppid is not None:
            children.setdefault(ppid, []).append(proc.pid)
    groups: dict[int, set[int]] = {}
    for worker in wanted:
        found: set[int] = set()
        todo = list(children.get(worker, ()))
        while todo:
            pid = todo.pop()
            todo.extend(children.get(pid, ()))
            with contextlib.suppress(OSError):
                found.add(os.getpgid(pid))
        found.discard(own)
        if found:
            groups[worker] = found
    return groups


def signal_groups(groups: set[int], sig: signal.Signals) -> None:
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except OSError:
        return False
    return True


def processes(pids: list[int]) -> list:
    import psutil

    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            found.append(psutil.Process(pid))
    return found
