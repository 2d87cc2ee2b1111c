"""The recycle measure's task: a module with a heavy import (numpy), as a user's task
module has, so a worker that unpickles the task imports it first (unless the process it
was made from had it). Stamps its start and end on the machine-wide monotonic clock."""

from __future__ import annotations

import os
import time

import numpy  # noqa: F401  # the import a replacement worker pays again, unless preloaded

HEAVY_MODULE = "numpy"


def stamp(_i: int) -> tuple[float, float, int]:
    """``(start, end, pid)``: when this task began and ended, and on which worker."""
    start = time.monotonic()
    return start, time.monotonic(), os.getpid()
