"""Task functions of test_map_chunks: module level, so spawned workers import them."""

from __future__ import annotations

import os
import time


def square(x):
    return x * x  # raises TypeError for a str: the failing item of a chunk


def slow_square(x, seconds=0.0):
    """Square ``x`` after ``seconds``; raises TypeError for a str ``x`` at once."""
    x * x
    time.sleep(seconds)
    return x * x


def mark_after_gate(gate, mark):
    """Wait (bounded) for ``gate`` to exist, then create ``mark``: which items ran."""
    deadline = time.monotonic() + 30.0
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{gate} never appeared")
        time.sleep(0.005)
    with open(mark, "w"):
        pass
    return mark


def pid(_):
    return os.getpid()
