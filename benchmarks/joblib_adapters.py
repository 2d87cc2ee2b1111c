"""The joblib family of measures: joblib's ``Parallel`` as a contender, the "pipepool"
backend against loky, joblib's default, with the same calls (auto-batching on, one pool
reused across calls), at n_jobs=2.

``joblib-tiny`` (no-op calls; joblib's sequential backend too: a backend's overhead is
its time above that), ``joblib-mib`` (1 MiB numpy results) and ``joblib-arrays`` (big
numpy results, then big numpy arguments, memmapped by both). Each adapter's pool
outlives a ``Parallel`` call, as in a program that calls ``Parallel`` repeatedly: the
suite's warm-up call starts it, the timed call reuses it.
"""

from __future__ import annotations

import gc
import time
from typing import TYPE_CHECKING, Any

from .contenders import PIPEPOOL, Adapter, Spec, missing_requirement
from .measures import SampleError, _open, throughput_sample
from .tasks import MIB, noop, sleep_s

if TYPE_CHECKING:
    from .measures import Suite

SEQUENTIAL = "sequential"


def make_mib_array(_x: int) -> Any:
    """A fresh 1 MiB numpy array (the suite's ``mib`` task returns bytes instead)."""
    import numpy as np

    return np.ones(MIB, dtype=np.uint8)


def checksum(a: Any) -> float:
    return float(a[:: 4096 // a.itemsize].sum())  # touch every page, cheaply


def make_array(nbytes: int) -> Any:
    import numpy as np

    return np.ones(nbytes, dtype=np.uint8)


def _pipepool_pool() -> Any:
    """pipepool.joblib's shared pool (None before a call): in its ``_shared`` module since
    the room was split, in the package itself before (an A/B run's other side may be
    older, and both sides run this code)."""
    import pipepool.joblib  # registers the backend

    return getattr(pipepool.joblib, "_shared", pipepool.joblib)._pool


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
            pool = _pipepool_pool()
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

            pool = _pipepool_pool()
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


def _specs(suite: Suite) -> list[Spec]:
    """The joblib contenders that run here (a missing one is noted once)."""
    for note in filter(None, map(missing_requirement, JOBLIB_SPECS)):
        if note not in suite.notes:
            suite.notes.append(note)
    return [s for s in JOBLIB_SPECS if not missing_requirement(s) and suite.runs(s)]


def run_tiny(suite: Suite) -> None:
    specs = _specs(suite)
    if specs and not suite.pipepool_only:
        specs.append(JOBLIB_SEQUENTIAL)
    tiny = list(range(suite.cfg.tiny_tasks))
    suite.interleave(
        "joblib-tiny",
        [2],
        specs,
        suite.cfg.rounds,
        lambda s, p: throughput_sample(s, p, noop, tiny, lambda r: r == tiny),
    )


def run_mib(suite: Suite) -> None:
    mib = list(range(suite.cfg.mib_tasks))
    suite.interleave(
        "joblib-mib",
        [2],
        _specs(suite),
        suite.cfg.rounds,
        lambda s, p: throughput_sample(
            s, p, make_mib_array, mib, lambda r: all(a.nbytes == MIB for a in r), nbytes=MIB
        ),
    )


def run_arrays(suite: Suite) -> None:
    cfg = suite.cfg
    suite.interleave(
        "joblib-arrays",
        [2],
        _specs(suite),
        cfg.rounds,
        lambda s, p: arrays_sample(s, p, cfg.array_mb * 10**6, cfg.array_calls),
    )


def arrays_sample(spec: Spec, parallelism: int, nbytes: int, calls: int) -> dict[str, float]:
    """One Parallel call of ``calls`` tasks each returning a fresh ``nbytes`` array, then
    one of ``calls`` tasks each taking the same such array, on a fresh, warm pool."""
    adapter = _open(spec, parallelism)
    try:
        gc.collect()
        started = time.perf_counter()
        results = adapter.run(make_array, [nbytes] * calls)
        results_s = time.perf_counter() - started
        if not all(a.nbytes == nbytes for a in results):
            raise SampleError(f"{spec.label}: wrong results")
        array = results[0]
        del results
        expected = checksum(array)
        started = time.perf_counter()
        sums = adapter.run(checksum, [array] * calls)
        args_s = time.perf_counter() - started
        if sums != [expected] * calls:
            raise SampleError(f"{spec.label}: wrong checksums")
    except BaseException:
        adapter.abort()
        raise
    adapter.close()
    return {
        "seconds": results_s,
        "mb_s": nbytes * calls / results_s / 1e6,
        "args_seconds": args_s,
        "args_mb_s": nbytes * calls / args_s / 1e6,
    }
