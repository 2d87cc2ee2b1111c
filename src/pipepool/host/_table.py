"""The process table: every process's parent, group, state and CPU time, and which
processes carry an environment entry; from /proc, or from ps(1) where there is none
(macOS), or None where neither can tell."""

from __future__ import annotations

import os
import subprocess
from typing import NamedTuple

from ._files import ROOT, read_bytes, under

PS_TIMEOUT = 10.0  # s: a ps(1) that takes longer is given up on (where there is no /proc)
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Process(NamedTuple):
    pid: int
    ppid: int
    pgid: int
    state: str  # "R", "S", "Z", ... (ps: the first letter of its STAT)
    cpu: float  # s of CPU: its own and its reaped children's (0.0 from ps)


def processes(root: str = ROOT) -> list[Process] | None:
    """Every process now, from ``/proc/<pid>/stat``; None where there is no /proc."""
    try:
        entries = os.listdir(under(root, "proc"))
    except OSError:
        return None
    found = []
    for name in entries:
        if not name.isdigit():
            continue
        stat = read_bytes(under(root, f"proc/{name}/stat"))
        try:  # the command name may hold spaces and parentheses: split after the last ")"
            rest = stat.rsplit(b")", 1)[1].split() if stat else None
            if rest is None:
                continue  # gone meanwhile
            # state ppid pgrp ... utime stime cutime cstime: fields 3-5 and 14-17 of stat(5)
            cpu = sum(int(x) for x in rest[11:15]) / _TICK
            found.append(Process(int(name), int(rest[1]), int(rest[2]), rest[0].decode(), cpu))
        except (IndexError, ValueError):
            continue
    return found


def processes_from_ps() -> list[Process] | None:
    """Every process now, from ``ps -A`` (no CPU time); None if ps cannot tell."""
    columns = ["-o", "pid=", "-o", "ppid=", "-o", "pgid=", "-o", "stat="]
    try:
        out = subprocess.run(
            ["ps", "-A", *columns], capture_output=True, text=True, timeout=PS_TIMEOUT
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = []
    for line in out.stdout.splitlines():
        fields = line.split()
        if len(fields) == 4:
            try:
                found.append(
                    Process(int(fields[0]), int(fields[1]), int(fields[2]), fields[3][:1], 0.0)
                )
            except ValueError:
                continue
    return found


def holding_environ(entry: bytes, root: str = ROOT) -> list[tuple[int, int]] | None:
    """``(pid, pgid)`` of each process whose environment holds ``entry`` (``NAME=value``):
    from /proc, or from ps(1) where there is none (macOS: ``ps -E``; procps: ``ps e``);
    None if neither can tell."""
    try:
        entries = os.listdir(under(root, "proc"))
    except OSError:
        return _holding_environ_from_ps(entry)
    found = []
    for name in entries:
        if not name.isdigit():
            continue
        environ = read_bytes(under(root, f"proc/{name}/environ"))
        if environ is None or entry not in environ.split(b"\0"):
            continue  # gone, not ours to read, or without it
        stat = read_bytes(under(root, f"proc/{name}/stat"))
        try:
            pgid = int(stat.rsplit(b")", 1)[1].split()[2]) if stat else None
        except (ValueError, IndexError):
            pgid = None
        if pgid is not None:
            found.append((int(name), pgid))
    return found


def _holding_environ_from_ps(entry: bytes) -> list[tuple[int, int]] | None:
    columns = ["-o", "pid=", "-o", "pgid=", "-o", "command="]
    for spelling in (["-E", *columns], [*columns, "e"]):  # each environment after its command
        try:
            out = subprocess.run(
                ["ps", "-A", "-ww", *spelling], capture_output=True, timeout=PS_TIMEOUT
            )
        except (OSError, subprocess.SubprocessError):
            return None
        if out.returncode == 0:
            break
    else:
        return None
    found = []
    for line in out.stdout.splitlines():
        fields = line.split(None, 2)  # pid, pgid, then the command and its environment
        if len(fields) == 3 and entry in fields[2].split():
            try:
                found.append((int(fields[0]), int(fields[1])))
            except ValueError:
                continue
    return found


def children(pid: int, threads: set[int], root: str = ROOT) -> set[int]:
    """The children of process ``pid`` that its ``threads`` forked (Linux lists each
    child under the thread that forked it, an orphan reparented to a subreaper under the
    subreaper's first live thread), from ``/proc/<pid>/task/<tid>/children``: empty
    where there is no such file."""
    found: set[int] = set()
    for tid in threads:
        listed = read_bytes(under(root, f"proc/{pid}/task/{tid}/children"), 65536)
        if listed:
            found.update(int(p) for p in listed.split())
    return found


def tree_cpu_seconds(pid: int | None = None, root: str = ROOT) -> float | None:
    """CPU seconds of every live descendant of ``pid`` (None: this process), their own
    reaped children folded in (the kernel's cutime and cstime); None where there is no
    /proc. (A process's own and its reaped children's time: ``resource.getrusage``.)"""
    table = processes(root)
    if table is None:
        return None
    top = os.getpid() if pid is None else pid
    parent_of = {p.pid: p.ppid for p in table}
    total = 0.0
    for p in table:
        up = parent_of.get(p.pid)
        while up is not None and up > 1:
            if up == top:
                total += p.cpu
                break
            up = parent_of.get(up)
    return total
