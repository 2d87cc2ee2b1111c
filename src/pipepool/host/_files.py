"""Reading the kernel's files under a root: the one reader every host fact uses.

``root`` is "/" in use; a test points it at a captured tree (``tests/host/topologies/``
holds sysfs and procfs trees of other machines), so every reader of the room takes it.
A file that cannot be read is None, never an exception: a fact the kernel does not give
here (no /proc on macOS, no cpufreq in many VMs, a process gone meanwhile) is unknown.
"""

from __future__ import annotations

import os

ROOT = "/"  # where this machine's /proc and /sys are


def under(root: str, path: str) -> str:
    """``path`` (absolute or not) as seen from ``root``."""
    return os.path.join(root, path.lstrip("/"))


def read_text(path: str) -> str | None:
    """The file's text, None if it cannot be read (NULs dropped: some sysfs files end
    in one)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().replace("\0", "")
    except (OSError, UnicodeDecodeError):
        return None


def read_bytes(path: str, limit: int = -1) -> bytes | None:
    """The file's bytes (at most ``limit``), None if it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def read_int(path: str, default: int) -> int:
    """The whole number the file holds, ``default`` if it cannot be read or holds none."""
    text = read_text(path)
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def field(data: bytes | None, key: bytes, index: int = 1) -> int | None:
    """The whole number after ``key`` at the start of a line of ``data`` (``procs_running
    3``, ``oom_kill 0``, ``MemFree: 812 kB``): its ``index``-th word, None if absent."""
    if data is None:
        return None
    for line in data.splitlines():
        if line.startswith(key):
            try:
                return int(line.split()[index])
            except (IndexError, ValueError):
                return None
    return None
