"""The work every contender runs: module-level functions, so they pickle by name and
spawned workers import them from here (the parent's ``sys.path`` travels with them)."""

from __future__ import annotations

import time

MIB = 1 << 20
KIB64 = 64 << 10


def noop(x: int) -> int:
    """Return the argument: the pool's own overhead, both ways, and nothing else."""
    return x


def first(x: int, _y: int) -> int:
    """Two arguments, return the first: a map over several iterables (zip semantics)."""
    return x


def make_mib(_x: int) -> bytes:
    """Return 1 MiB (a fresh buffer each call; calloc'd, so making it costs ~nothing)."""
    return bytes(MIB)


def take(data: bytes) -> int:
    """Receive a payload, return its length (the result frame is tiny)."""
    return len(data)


def sleep_s(seconds: float) -> float:
    """Sleep, then return the argument: long and short tasks for head-of-line blocking."""
    time.sleep(seconds)
    return seconds
