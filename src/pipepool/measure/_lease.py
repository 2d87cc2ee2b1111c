"""Leases on CPUs between independent ``pipepool run --pin`` runs on one machine.

One file per CPU (``cpu<N>.lease``) in a directory every user can use; a run holds an
exclusive ``flock`` on the file of each CPU its plan uses, for as long as it runs. The
kernel drops a ``flock`` when the last descriptor of it closes, so a runner that dies
however it dies (SIGKILL included; its pool workers, which inherited the descriptor,
die with it) frees its CPUs: no stale lease, no clean-up. The holder writes its pid,
the time and its command line into the file, for ``--show-plan`` and for the message
of a run that cannot get the CPUs it needs.

Across users: the directory is made with mode 1777 (anyone may create a file, no one
may remove another's: /tmp's own mode) and each file with 0666, set with chmod so the
umask does not narrow them. A container with a private /tmp sees only its own leases;
give it the host's directory (``PIPEPOOL_LEASE_DIR``, or mount the host's
``/tmp/pipepool-cpu-leases``) to coordinate with the host's runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
import time
from dataclasses import dataclass

DIR_ENV = "PIPEPOOL_LEASE_DIR"
DEFAULT_DIR = "/tmp/pipepool-cpu-leases"  # not $TMPDIR: that differs between users


@dataclass(frozen=True, slots=True)
class Holder:
    cpu: int
    pid: int
    since: float  # epoch seconds
    command: str

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"CPU {self.cpu}: pid {self.pid} since {when} ({self.command[:80]})"


def lease_dir() -> str:
    return os.environ.get(DIR_ENV) or DEFAULT_DIR


def _ensure_dir(path: str) -> None:
    try:
        os.mkdir(path, 0o1777)
    except FileExistsError:
        return
    with contextlib.suppress(OSError):  # the umask narrowed mkdir's mode: widen it again
        os.chmod(path, 0o1777 | stat.S_ISVTX)


def _open(directory: str, cpu: int) -> int:
    path = os.path.join(directory, f"cpu{cpu}.lease")
    flags = os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | os.O_RDWR, 0o666)
    except PermissionError:  # another user's file without write access: lock it anyway
        return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    with contextlib.suppress(OSError):
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o666)  # for the next user, whatever our umask
    return fd


class Leases:
    """The CPU leases this run holds."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory or lease_dir()
        _ensure_dir(self.directory)
        self.held: dict[int, int] = {}  # cpu -> descriptor holding its flock

    def take(self, cpus) -> set[int]:
        """Lease each of ``cpus`` that no other run holds; the ones now held."""
        for cpu in cpus:
            if cpu in self.held:
                continue
            fd = _open(self.directory, cpu)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.held[cpu] = fd
        return set(self.held)

    def keep(self, cpus) -> None:
        """Release every lease but those of ``cpus``, and sign the kept ones."""
        wanted = set(cpus)
        for cpu in list(self.held):
            if cpu not in wanted:
                os.close(self.held.pop(cpu))
        line = f"{os.getpid()}\t{time.time():.3f}\t{' '.join(sys.argv)}\n".encode(
            "utf-8", "replace"
        )
        for fd in self.held.values():
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, line, 0)

    def release(self) -> None:
        for fd in self.held.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.held.clear()


def holders(cpus, directory: str | None = None) -> list[Holder]:
    """Who holds the lease of each of ``cpus`` now (free ones are left out)."""
    directory = directory or lease_dir()
    found = []
    for cpu in sorted(cpus):
        path = os.path.join(directory, f"cpu{cpu}.lease")
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                continue  # nobody holds it
            except OSError:
                pass
            text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        finally:
            os.close(fd)
        pid, since, command = [*text.rstrip("\n").split("\t", 2), "0", "0", "?"][:3]
        try:
            found.append(Holder(cpu, int(pid), float(since), command))
        except ValueError:
            found.append(Holder(cpu, 0, 0.0, "(unsigned)"))
    return found
