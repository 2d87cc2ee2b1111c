"""CPython 3.14's ``concurrent.futures.InterpreterPoolExecutor`` as a contender: worker
threads, each running its own sub-interpreter (tasks and results are pickled between
interpreters). No processes, so no start method, and its workers' CPU is the parent's
(the ``tiny`` rows' parent CPU counts both). Absent before 3.14: the suite notes it."""

from __future__ import annotations

import concurrent.futures

from ..contenders import FuturesAdapter


class InterpreterAdapter(FuturesAdapter):
    """``submit`` + ``result`` one by one, or ``map(chunksize=1)``."""

    def __init__(self, parallelism: int, start_method: str | None, mode: str) -> None:
        executor = getattr(concurrent.futures, "InterpreterPoolExecutor")  # noqa: B009
        super().__init__(executor(parallelism), parallelism, mode)

    def pids(self):
        return []
