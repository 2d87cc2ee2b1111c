"""Python-level calls per task in the parent: how much interpreted work a pool costs.

A count, not a time, so load does not move it: the suite's ``calls`` measure installs a
profile function in every thread of the parent (``sys.setprofile`` here,
``threading.setprofile`` for the threads a pool starts: its driver, manager or feeder
threads) before it builds the pool, and counts only while the measured batch runs.
``py_calls`` are calls of Python functions (a generator resumed counts as one);
``c_calls`` are calls of builtins and compiled methods (the compiled loop's included).
"""

from __future__ import annotations

import sys
import threading
from typing import Any


class CallCounter:
    """A profile function that counts calls while ``on`` (threads share the totals: an
    increment lost to a thread switch is rare enough not to matter at thousands)."""

    def __init__(self) -> None:
        self.on = False
        self.py_calls = 0
        self.c_calls = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if self.on:
            if event == "call":
                self.py_calls += 1
            elif event == "c_call":
                self.c_calls += 1

    def install(self) -> None:
        """Count in this thread and in every thread started from now on."""
        threading.setprofile(self)
        sys.setprofile(self)

    def uninstall(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]  # None clears it
