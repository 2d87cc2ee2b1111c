"""joblib's ``Parallel`` as a contender: the "pipepool" backend against loky, joblib's
default, with the same calls (auto-batching on, one pool reused across calls).

The suite's ``joblib-tiny`` and ``joblib-mib`` measures use these (``joblib-tiny`` also
runs joblib's sequential backend: a backend's overhead is its time above that); ``joblib_arrays.py``
measures large numpy arguments and results. Each adapter's pool outlives a ``Parallel``
call, as in a program that calls ``Parallel`` repeatedly: the suite's warm-up call
starts it, the timed call reuses it.
"""

from __future__ import annotations

from typing import Any

from .contenders import PIPEPOOL, Adapter, Spec
from .tasks import MIB, sleep_s

SEQUENTIAL = "sequential"


def make_mib_array(_x: int) -> Any:
    """A fresh 1 MiB numpy array (the suite's ``mib`` task returns bytes instead)."""
    import numpy as np

    return np.ones(MIB, dtype=np.uint8)


class JoblibAdapter(Adapter):
    def __init__(self, parallelism: int, start_method: str | None, backend: str) -> None:
        import joblib

        if backend == PIPEPOOL:
            import pipepool.joblib  # registers the backend

            pipepool.joblib.shutdown_pool()  # each sample starts its own pool
        self.joblib = joblib
        self.backend = backend
        self.parallelism = parallelism
        self.kwargs = {"start_method": start_method} if backend == PIPEPOOL and start_method else {}

    def _parallel(self, **kwargs: Any) -> Any:
        return self.joblib.Parallel(
            n_jobs=self.parallelism, backend=self.backend, **self.kwargs, **kwargs
        )

    def run(self, fn, args):
        delayed = self.joblib.delayed
        return self._parallel()(delayed(fn)(a) for a in args)

    def call(self, fn, arg):
        return self._parallel()([self.joblib.delayed(fn)(arg)])[0]

    def shorts_done(self, long_s, short_s, count):
        import time

        started = time.perf_counter()
        out = self._parallel(return_as="generator_unordered")(
            self.joblib.delayed(sleep_s)(s) for s in [long_s] + [short_s] * count
        )
        left = count
        for seconds in out:
            if seconds == short_s:
                left -= 1
                if not left:
                    break
        return time.perf_counter() - started

    def pids(self):
        if self.backend == SEQUENTIAL:
            return []
        if self.backend == PIPEPOOL:
            import pipepool.joblib  # registers the backend

            pool = pipepool.joblib._pool
            return pool.worker_pids() if pool is not None else []
        from joblib.externals.loky import get_reusable_executor

        executor = get_reusable_executor(reuse=True)
        return [p.pid for p in executor._processes.values()]

    def close(self):
        if self.backend == SEQUENTIAL:
            return
        if self.backend == PIPEPOOL:
            import pipepool.joblib  # registers the backend

            pipepool.joblib.shutdown_pool()
        else:
            from joblib.externals.loky import get_reusable_executor

            get_reusable_executor(reuse=True).shutdown(wait=True)

    def abort(self):
        if self.backend == SEQUENTIAL:
            return
        if self.backend == PIPEPOOL:
            import pipepool.joblib  # registers the backend

            pool = pipepool.joblib._pool
            if pool is not None:
                pool.terminate_workers()
            pipepool.joblib.shutdown_pool(wait=False)
        else:
            from joblib.externals.loky import get_reusable_executor

            get_reusable_executor(reuse=True).shutdown(wait=True, kill_workers=True)


JOBLIB_SPECS = [
    Spec(
        "joblib-pipepool",
        'joblib Parallel(backend="pipepool")',
        PIPEPOOL,
        lambda p, m: JoblibAdapter(p, m, PIPEPOOL),
        requires="joblib",
    ),
    Spec(
        "joblib-loky",
        'joblib Parallel(backend="loky")',
        "loky",
        lambda p, m: JoblibAdapter(p, m, "loky"),
        requires="joblib",
    ),
]

# The calls run one by one in the parent, through the same Parallel machinery: what the
# process backends' overhead (``joblib overhead`` in the targets) is counted above.
JOBLIB_SEQUENTIAL = Spec(
    "joblib-sequential",
    'joblib Parallel(backend="sequential")',
    "joblib",
    lambda p, m: JoblibAdapter(p, m, SEQUENTIAL),
    requires="joblib",
)
