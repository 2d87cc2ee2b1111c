"""Who is running and what is open: /proc on Linux, ps(1) and /dev/fd where there is none.

macOS has no /proc. Rather than skip the leak and parent-death checks there (or let them
pass vacuously: a pid missing from /proc looks dead), the same facts come from one ``ps``
call, a fork and exec of about 10 ms. ps lists itself as our child: it is left out.
"""

from __future__ import annotations

import os
import subprocess

HAVE_PROC = os.path.isdir("/proc/self/fd")


def open_fds() -> set[int]:
    """This process's open fds (macOS: /dev/fd is per process too)."""
    where = "/proc/self/fd" if HAVE_PROC else "/dev/fd"
    return {int(fd) for fd in os.listdir(where)}  # holds the listing's own fd, each time alike


def children(ppid: int) -> set[int]:
    """Pids whose parent is ``ppid``, zombies included."""
    if not HAVE_PROC:
        return {pid for pid, (parent, _, _) in _ps().items() if parent == ppid}
    kids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat and stat[1] == ppid:
                kids.add(int(entry))
    return kids


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie nobody reaped yet counts as dead."""
    if HAVE_PROC:
        stat = _stat(pid)
        return stat is not None and stat[0] not in ("Z", "X")
    row = _ps(pid).get(pid)
    return row is not None and not row[1].startswith("Z")


def state(pid: int) -> str:
    """``pid``'s state letter ("R", "S", "T" stopped, "Z"...); "" once it is gone."""
    if HAVE_PROC:
        stat = _stat(pid)
        return stat[0] if stat else ""
    row = _ps(pid).get(pid)
    return row[1][:1] if row else ""


def cmdline(pid: int) -> bytes:
    """``pid``'s command line, arguments separated by spaces; b"" once it is gone."""
    if not HAVE_PROC:
        row = _ps(pid).get(pid)
        return row[2] if row else b""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").rstrip()
    except OSError:
        return b""


def processes() -> dict[int, tuple[int, bytes]]:
    """Every visible process: ``{pid: (ppid, cmdline)}``."""
    if not HAVE_PROC:
        return {pid: (ppid, cmd) for pid, (ppid, _, cmd) in _ps().items()}
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat:
                table[int(entry)] = (stat[1], cmdline(int(entry)))
    return table


def live_commands() -> dict[int, bytes]:
    """Every live process (zombies left out) but this one: ``{pid: cmdline}``."""
    if not HAVE_PROC:
        return {
            pid: cmd
            for pid, (_, st, cmd) in _ps().items()
            if not st.startswith("Z") and pid != os.getpid()
        }
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            stat = _stat(int(entry))
            command = cmdline(int(entry))
            if stat and stat[0] not in ("Z", "X") and command:
                table[int(entry)] = command
    return table


def with_environ(entry: str) -> set[int]:
    """Live processes (zombies left out) whose environment holds ``entry``, a whole
    ``NAME=value``: found by what a process carries, so a re-parented orphan cannot
    hide. Without /proc, ps appends each environment to the command (macOS: ``-E``;
    procps: ``e``); a ps that can do neither is an error, not an empty answer."""
    needle = entry.encode()
    if HAVE_PROC:
        found = set()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    environ = f.read().split(b"\0")  # empty for a zombie
            except OSError:  # gone, or not ours to read
                continue
            stat = _stat(int(name))
            if needle in environ and stat and stat[0] not in ("Z", "X"):
                found.add(int(name))
        return found
    columns = ["-o", "pid=", "-o", "stat=", "-o", "command="]
    for spelling in (["-E", *columns], [*columns, "e"]):
        out = subprocess.run(["ps", "-A", "-ww", *spelling], capture_output=True, timeout=30)
        if out.returncode == 0:
            break
    else:
        raise RuntimeError(f"ps shows no environments: {out.stderr.decode(errors='replace')}")
    found = set()
    for line in out.stdout.splitlines():
        fields = line.split(None, 2)  # pid, state, then the command and its environment
        if len(fields) == 3 and not fields[1].startswith(b"Z") and needle in fields[2].split():
            found.add(int(fields[0]))
    return found


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, ppid) from /proc/PID/stat; the name field may hold spaces and ')'."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def _ps(pid: int | None = None) -> dict[int, tuple[int, str, bytes]]:
    """``{pid: (ppid, state, command)}`` from ps: every process, or just ``pid``."""
    which = ["-p", str(pid)] if pid is not None else ["-A"]
    # One -o per column: BSD ps (macOS) may read the text after "pid=" up to the end of
    # the argument as that column's header, commas included.
    columns = [arg for name in ("pid", "ppid", "stat", "command") for arg in ("-o", f"{name}=")]
    proc = subprocess.Popen(
        ["ps", *which, "-ww", *columns], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    out, _ = proc.communicate(timeout=30)  # exit 1 with -p: no such process
    rows = {}
    for line in out.splitlines():
        fields = line.split(None, 3)
        if len(fields) >= 3 and int(fields[0]) != proc.pid:
            command = fields[3] if len(fields) == 4 else b""
            rows[int(fields[0])] = (int(fields[1]), fields[2].decode(), command)
    return rows
