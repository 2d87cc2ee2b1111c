"""The contenders: one adapter per pool and calling style, all with the same methods.

An adapter's constructor builds the pool (``parallelism`` workers, a start method or the
platform default). Then:

- ``run(fn, args)``: the measured pattern, one call per argument, submitted one by one
  and all collected (results in any order);
- ``call(fn, arg)``: one round trip, for latency and start-up;
- ``shorts_done(long_s, short_s, count)``: one long task, then ``count`` short ones;
  the seconds until every short one is done (head-of-line blocking);
- ``pids()`` (live workers, for their CPU time), ``close()`` (graceful), ``abort()``
  (kill now: the head-of-line measure does not wait out its long task).

``SPECS`` lists every contender; ``missing_requirement`` says why an optional peer is left
out (its package is not installed, or the interpreter lacks it), and the suite skips it
with that note. Peers that live in a module of their own (``peers/``) are imported when a
sample builds them, so benchmarks/ imports without any optional package.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import itertools
import math
import mmap
import multiprocessing
import pickle
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pipepool

from .peers.airflow_style import AirflowStylePool
from .tasks import MIB, first, sleep_s

PIPEPOOL = "pipepool"
BOUND = "bound"  # the family of the bounds (no pool): copy bound, serialization floor
COPY_BOUND = "copy"
MAP_FLOOR = "map-floor"
MAP_CHUNK = 10_000  # items per chunk of the chunked-map rows (the "10,000")


def auto_chunksize(tasks: int, parallelism: int) -> int:
    """multiprocessing.Pool.map's own rule: about four chunks per worker."""
    return max(1, math.ceil(tasks / (4 * parallelism)))


def pipepool_map_auto() -> tuple[bool, Any, str]:
    """``(native, chunksize, note)``: how pipepool's 'auto' map chunk size is chosen.

    If ``ProcessPoolExecutor.map`` has grown an automatic chunk size (a ``chunksize``
    default of None or a string such as "auto"), that default is passed (native);
    else the same rule as multiprocessing.Pool.map, computed per run.
    """
    default = inspect.signature(pipepool.ProcessPoolExecutor.map).parameters["chunksize"].default
    if default is None or isinstance(default, str):
        return True, default, f"pipepool's own map(chunksize={default!r})"
    return False, None, "ceil(tasks / (4 x workers)), multiprocessing.Pool.map's rule"


NO_ADAPTIVE = object()  # LocalExecutor has no adaptive prefetch (yet)


def local_adaptive_prefetch() -> Any:
    """The ``prefetch`` value that makes LocalExecutor adapt its dispatch depth, if any.

    An adaptive default (None or a string such as "auto") is returned as "default"
    (pass nothing); else an accepted None or "auto" option; else ``NO_ADAPTIVE``.
    Building an executor without starting it costs no process.
    """
    default = inspect.signature(pipepool.LocalExecutor).parameters["prefetch"].default
    if default is None or isinstance(default, str):
        return "default"
    candidates: tuple[Any, ...] = (None, "auto")  # probed: either may be refused
    for candidate in candidates:
        try:
            pipepool.LocalExecutor(1, prefetch=candidate)
        except (TypeError, ValueError):
            continue
        return candidate
    return NO_ADAPTIVE


def _wait_futures(futures: list[concurrent.futures.Future]) -> None:
    done, not_done = concurrent.futures.wait(futures)
    assert not not_done
    for f in done:
        f.result()  # raise a task's error here, not silently


def _expect_timeouts(futures: list[Any]) -> None:
    """Every future failed with a timeout (pebble raises the builtin TimeoutError,
    pipepool its subclass TaskTimeoutError, mpire its TimeoutError)."""
    for f in futures:
        exc = f.exception()
        if not isinstance(exc, TimeoutError):
            raise AssertionError(f"expected a timeout, got {exc!r}")


class Adapter:
    def run(self, fn: Callable[[Any], Any], args: list[Any]) -> list[Any]:
        raise NotImplementedError

    def warm_items(self, parallelism: int) -> int:
        """Items of the warm-up ``run`` before a sample: four calls per worker, so a pool
        that starts its workers on demand (pipepool does) has every one up before the
        clock starts. A call of the chunked rows is a chunk of ``MAP_CHUNK`` items: eight
        items made one chunk, which one worker ran, and the timed map then started the
        second one (about 9% of pipepool's chunked rate, 2026-12-07)."""
        chunked = getattr(self, "mode", None) in ("chunks", "chunks2")
        return 4 * parallelism * (MAP_CHUNK if chunked else 1)

    def call(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        raise NotImplementedError

    def shorts_done(self, long_s: float, short_s: float, count: int) -> float:
        raise NotImplementedError

    def pids(self) -> list[int]:
        raise NotImplementedError

    def timeouts(self, count: int, limit: float, sleep: float) -> float:
        """Seconds until a burst of ``count`` tasks of ``sleep`` s, each limited to
        ``limit`` s, have all failed with their timeout (pools with per-task timeouts)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        self.close()


# -- pipepool ------------------------------------------------------------------------------


class LocalAdapter(Adapter):
    """pipepool.LocalExecutor driven scheduler style: queue everything, then sync until
    every event is in (``wait_until_done``), then read the event buffer."""

    def __init__(
        self, parallelism: int, start_method: str | None, prefetch: Any, rounds: bool = False
    ) -> None:
        kwargs = {} if prefetch == "default" else {"prefetch": prefetch}
        self.ex = pipepool.LocalExecutor(parallelism, start_method=start_method, **kwargs)
        self.ex.start()
        self.keys = 0
        self.rounds = rounds  # drive it as the README does: sync(timeout) rounds

    def _wait(self) -> None:
        ex = self.ex
        if not self.rounds:
            ex.wait_until_done()
            return
        while ex.has_work():
            ex.sync(timeout=SYNC_ROUND)

    def _next_keys(self, n: int) -> range:
        keys = range(self.keys, self.keys + n)
        self.keys += n
        return keys

    def run(self, fn, args):
        ex = self.ex
        keys = self._next_keys(len(args))
        for key, arg in zip(keys, args, strict=True):
            ex.queue(key, fn, arg)
        self._wait()
        events = ex.get_event_buffer()
        out = []
        for key in keys:
            e = events[key]
            if e.exception is not None:
                raise e.exception
            out.append(e.result)
        return out

    def call(self, fn, arg):
        ex = self.ex
        (key,) = self._next_keys(1)
        ex.queue(key, fn, arg)
        ex.sync()  # dispatch now; a sync(timeout) would first wait for something to happen
        while True:
            e = ex.get_event_buffer((key,)).get(key)
            if e is not None and e.state.terminal:
                if e.exception is not None:
                    raise e.exception
                return e.result
            ex.sync(timeout=1.0)

    def shorts_done(self, long_s, short_s, count):
        ex = self.ex
        started = time.perf_counter()
        ex.queue("long", sleep_s, long_s)
        keys = self._next_keys(count)
        for key in keys:
            ex.queue(key, sleep_s, short_s)
        left = set(keys)
        ex.sync()
        while left:
            ex.sync(timeout=0.05)
            for key, e in ex.get_event_buffer().items():
                if e.state.terminal and key in left:
                    if e.exception is not None:
                        raise e.exception
                    left.discard(key)
        return time.perf_counter() - started

    def pids(self):
        return self.ex.worker_pids()

    def close(self):
        self.ex.end()

    def abort(self):
        self.ex.terminate()


class FuturesAdapter(Adapter):
    """A ``concurrent.futures`` executor (pipepool's, the stdlib's, loky's): ``submit`` +
    ``result`` one by one, or ``map`` with a given chunk size."""

    def __init__(
        self, pool: Any, parallelism: int, mode: str, auto: Callable[[int], Any] | None = None
    ) -> None:
        self.pool = pool
        self.parallelism = parallelism
        self.mode = mode  # "submit", "submit-wait", "map1", "map-auto", "chunks", "chunks2"
        # map-auto: the chunksize to pass for a run of n calls (default: Pool.map's rule)
        self.auto = auto or (lambda n: auto_chunksize(n, parallelism))

    def run(self, fn, args):
        pool = self.pool
        if self.mode == "submit":
            futures = [pool.submit(fn, a) for a in args]
            return [f.result() for f in futures]
        if self.mode == "submit-wait":  # submit all, then concurrent.futures.wait(fs)
            futures = [pool.submit(fn, a) for a in args]
            concurrent.futures.wait(futures)
            return [f.result() for f in futures]
        if self.mode == "map1":
            return list(pool.map(fn, args, chunksize=1))
        if self.mode == "chunks":
            return list(pool.map(fn, args, chunksize=MAP_CHUNK))
        if self.mode == "chunks2":  # several iterables: fn(x, y), zip semantics
            return list(pool.map(first, args, args, chunksize=MAP_CHUNK))
        return list(pool.map(fn, args, chunksize=self.auto(len(args))))

    def timeouts(self, count: int, limit: float, sleep: float) -> float:
        """Seconds until ``count`` tasks of ``sleep`` s, each limited to ``limit`` s,
        have all failed with their timeout (pipepool's ``with_options(timeout=)``)."""
        view = self.pool.with_options(timeout=limit)
        started = time.perf_counter()
        futures = [view.submit(sleep_s, sleep) for _ in range(count)]
        _expect_timeouts(futures)
        return time.perf_counter() - started

    def call(self, fn, arg):
        return self.pool.submit(fn, arg).result()

    def shorts_done(self, long_s, short_s, count):
        started = time.perf_counter()
        self.pool.submit(sleep_s, long_s)
        _wait_futures([self.pool.submit(sleep_s, short_s) for _ in range(count)])
        return time.perf_counter() - started

    def close(self):
        self.pool.shutdown(wait=True)


class PipepoolFuturesAdapter(FuturesAdapter):
    def __init__(self, parallelism: int, start_method: str | None, mode: str) -> None:
        ctx = multiprocessing.get_context(start_method) if start_method else None
        native, value, _ = pipepool_map_auto()
        auto = (lambda _n: value) if native else None
        super().__init__(
            pipepool.ProcessPoolExecutor(parallelism, mp_context=ctx), parallelism, mode, auto
        )

    def pids(self):
        return self.pool.worker_pids()

    def abort(self):
        self.pool.terminate_workers()


# -- peers ---------------------------------------------------------------------------------


class StdlibAdapter(FuturesAdapter):
    def __init__(self, parallelism: int, start_method: str | None, mode: str) -> None:
        ctx = multiprocessing.get_context(start_method) if start_method else None
        super().__init__(
            concurrent.futures.ProcessPoolExecutor(parallelism, mp_context=ctx), parallelism, mode
        )

    def pids(self):
        return list(self.pool._processes or {})

    def abort(self):
        procs = list((self.pool._processes or {}).values())
        for p in procs:
            p.kill()
        self.pool.shutdown(wait=True, cancel_futures=True)
        for p in procs:
            p.join()


class LokyAdapter(FuturesAdapter):
    def __init__(self, parallelism: int, start_method: str | None, mode: str) -> None:
        import loky
        from loky.backend.context import get_context

        # Without a start method: loky's own default ("loky", a spawn variant).
        ctx = get_context(start_method) if start_method else None
        # loky warns (when it starts a worker) that fork "does not respect POSIX"; the
        # start-up measure runs it with fork all the same, like every other pool.
        warnings.filterwarnings(
            "ignore", message=".*start method should not be used with", category=UserWarning
        )
        super().__init__(loky.ProcessPoolExecutor(parallelism, context=ctx), parallelism, mode)

    def pids(self):
        return list(self.pool._processes or {})

    def abort(self):
        procs = list((self.pool._processes or {}).values())
        self.pool.shutdown(wait=True, kill_workers=True)
        for p in procs:
            p.join()


class MpPoolAdapter(Adapter):
    """multiprocessing.Pool: ``imap_unordered(chunksize=1)`` or ``apply_async`` + ``get``."""

    def __init__(self, parallelism: int, start_method: str | None, mode: str) -> None:
        self.pool = multiprocessing.get_context(start_method).Pool(parallelism)
        self.mode = mode  # "imap1", "apply", "map1", "chunks", "chunks2" or "map-default"

    def run(self, fn, args):
        pool = self.pool
        if self.mode == "imap1":
            return list(pool.imap_unordered(fn, args, chunksize=1))
        if self.mode == "map1":
            return pool.map(fn, args, chunksize=1)
        if self.mode == "chunks":
            return pool.map(fn, args, chunksize=MAP_CHUNK)
        if self.mode == "chunks2":
            return pool.starmap(first, zip(args, args, strict=False), chunksize=MAP_CHUNK)
        if self.mode == "map-default":
            return pool.map(fn, args)
        results = [pool.apply_async(fn, (a,)) for a in args]
        return [r.get() for r in results]

    def call(self, fn, arg):
        return self.pool.apply(fn, (arg,))

    def shorts_done(self, long_s, short_s, count):
        pool = self.pool
        started = time.perf_counter()
        if self.mode == "imap1":
            left = count
            for seconds in pool.imap_unordered(sleep_s, [long_s] + [short_s] * count, chunksize=1):
                if seconds == short_s:
                    left -= 1
                    if not left:
                        break
        else:
            pool.apply_async(sleep_s, (long_s,))
            for r in [pool.apply_async(sleep_s, (short_s,)) for _ in range(count)]:
                r.get()
        return time.perf_counter() - started

    def pids(self):
        return [p.pid for p in self.pool._pool if p.pid is not None]

    def close(self):
        self.pool.close()
        self.pool.join()

    def abort(self):
        self.pool.terminate()
        self.pool.join()


class MpireAdapter(Adapter):
    """mpire's WorkerPool, workers kept alive between calls: ``map`` (chunk size 1,
    10,000 or its default) or ``apply_async`` + ``get``."""

    def __init__(self, parallelism: int, start_method: str | None, mode: str) -> None:
        from mpire import WorkerPool

        self.pool = WorkerPool(parallelism, start_method=start_method or "fork", keep_alive=True)
        self.mode = mode  # "apply", "map1", "chunks", "chunks2" or "map-default"

    def run(self, fn, args):
        pool = self.pool
        if self.mode == "apply":
            results = [pool.apply_async(fn, (a,)) for a in args]
            return [r.get() for r in results]
        if self.mode == "chunks2":
            pairs = list(zip(args, args, strict=False))  # mpire unpacks a tuple's items
            return pool.map(first, pairs, chunk_size=MAP_CHUNK)
        chunk = {"map1": 1, "chunks": MAP_CHUNK}.get(self.mode)
        return pool.map(fn, args, chunk_size=chunk)

    def call(self, fn, arg):
        return self.pool.apply(fn, (arg,))

    def shorts_done(self, long_s, short_s, count):
        started = time.perf_counter()
        self.pool.apply_async(sleep_s, (long_s,))
        for r in [self.pool.apply_async(sleep_s, (short_s,)) for _ in range(count)]:
            r.get()
        return time.perf_counter() - started

    def timeouts(self, count: int, limit: float, sleep: float) -> float:
        started = time.perf_counter()
        results = [
            self.pool.apply_async(sleep_s, (sleep,), task_timeout=limit) for _ in range(count)
        ]
        for r in results:
            r.wait()
            if r.successful():
                raise AssertionError("expected a timeout")
        return time.perf_counter() - started

    def pids(self):
        return [w.pid for w in self.pool._workers if w is not None and w.pid is not None]

    def close(self):
        self.pool.stop_and_join()

    def abort(self):
        self.pool.terminate()


class PebbleAdapter(Adapter):
    """pebble's ProcessPool: ``schedule`` + ``result``, or ``map`` (its chunksize 1 or
    10,000), whose futures' ``timeout`` kills the worker of a task that overruns."""

    def __init__(self, parallelism: int, start_method: str | None, mode: str) -> None:
        from pebble import ProcessPool

        ctx = multiprocessing.get_context(start_method) if start_method else multiprocessing
        self.pool = ProcessPool(parallelism, context=ctx)
        self.mode = mode  # "schedule", "map1", "chunks" or "chunks2"

    def run(self, fn, args):
        pool = self.pool
        if self.mode == "schedule":
            futures = [pool.schedule(fn, (a,)) for a in args]
            return [f.result() for f in futures]
        if self.mode == "chunks2":
            return list(pool.map(first, args, args, chunksize=MAP_CHUNK).result())
        chunk = MAP_CHUNK if self.mode == "chunks" else 1
        return list(pool.map(fn, args, chunksize=chunk).result())

    def call(self, fn, arg):
        return self.pool.schedule(fn, (arg,)).result()

    def shorts_done(self, long_s, short_s, count):
        started = time.perf_counter()
        self.pool.schedule(sleep_s, (long_s,))
        _wait_futures([self.pool.schedule(sleep_s, (short_s,)) for _ in range(count)])
        return time.perf_counter() - started

    def timeouts(self, count: int, limit: float, sleep: float) -> float:
        started = time.perf_counter()
        _expect_timeouts(
            [self.pool.schedule(sleep_s, (sleep,), timeout=limit) for _ in range(count)]
        )
        return time.perf_counter() - started

    def pids(self):
        return list(self.pool._pool_manager.worker_manager.workers)

    def close(self):
        self.pool.close()
        self.pool.join()

    def abort(self):
        self.pool.stop()
        self.pool.join()


class BareFuturesAdapter(Adapter):
    """No pool: ``concurrent.futures.Future`` objects a second thread completes, waited
    for by ``wait(fs)`` or by ``result()`` one by one. The CPU per future of the two,
    beside a pool's submit+wait and submit+result, tells what the stdlib's own ``wait()``
    costs per future, apart from any pool."""

    def __init__(self, parallelism: int, start_method: str | None, mode: str) -> None:
        self.mode = mode  # "wait" or "result"

    def run(self, fn, args):
        import threading

        futures = [concurrent.futures.Future() for _ in args]
        go = threading.Event()

        def complete() -> None:
            go.wait()
            for f, a in zip(futures, args, strict=True):
                f.set_result(fn(a))

        setter = threading.Thread(target=complete)
        setter.start()
        go.set()
        if self.mode == "wait":
            concurrent.futures.wait(futures)
        results = [f.result() for f in futures]
        setter.join()
        return results

    def call(self, fn, arg):
        return self.run(fn, [arg])[0]

    def pids(self):
        return []

    def close(self):
        pass


class CopyBound(Adapter):
    """Not a pool: what the parent cannot avoid for a big result, one copy of it into
    fresh pages (a new anonymous mmap per result, written once from a payload made
    before the clock), in this process. ``mib``'s pools are held to a share of it."""

    def __init__(self) -> None:
        self.payload = bytes(range(256)) * (MIB // 256)  # real bytes, not the zero page

    def run(self, fn, args):
        out = []
        for _ in args:
            fresh = mmap.mmap(-1, MIB)
            fresh[:] = self.payload  # faults each page in and fills it: the one copy
            out.append(fresh)
        return out

    def pids(self):
        return []

    def close(self):
        pass


class MapFloor(Adapter):
    """Not a pool: what any pool that pickles spends in the parent on a chunked map
    (issue 32's floor): each chunk sliced and pickled, the same bytes unpickled as its
    results and handed out into one list, in this process; the call itself not made."""

    def run(self, fn, args):
        return list(
            itertools.chain.from_iterable(
                pickle.loads(pickle.dumps(args[i : i + MAP_CHUNK], pickle.HIGHEST_PROTOCOL))
                for i in range(0, len(args), MAP_CHUNK)
            )
        )

    def pids(self):
        return []

    def close(self):
        pass


class AirflowAdapter(Adapter):
    def __init__(self, parallelism: int, start_method: str | None) -> None:
        self.pool = AirflowStylePool(parallelism, start_method)

    def run(self, fn, args):
        return self.pool.run(fn, [(a,) for a in args])

    def call(self, fn, arg):
        return self.pool.call(fn, arg)

    def shorts_done(self, long_s, short_s, count):
        started = time.perf_counter()
        left = count
        for key, _ in self.pool.outcomes(sleep_s, [(long_s,)] + [(short_s,)] * count):
            if key != 0:
                left -= 1
                if not left:
                    break
        return time.perf_counter() - started

    def pids(self):
        return self.pool.pids()

    def close(self):
        self.pool.close()

    def abort(self):
        self.pool.terminate()


# -- the registry ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One contender: a stable key (JSON), a label (tables) and how to build it."""

    key: str
    label: str
    family: str  # "pipepool", or the peer: "stdlib", "multiprocessing", "loky", "airflow"
    make: Callable[[int, str | None], Adapter] = field(repr=False)
    requires: str | None = None  # the optional module it needs
    absent: Callable[[], str | None] | None = None  # why this interpreter cannot run it

    @property
    def is_pipepool(self) -> bool:
        return self.family == PIPEPOOL


SYNC_ROUND = 0.05  # s: the sync(timeout) a scheduler's loop passes (the README's example)


def local_rounds_spec() -> Spec:
    """LocalExecutor as constructed with no arguments, driven by ``sync(timeout)`` rounds:
    what a scheduler that copies the README gets."""
    return Spec(
        "local-default-sync",
        f"pipepool LocalExecutor (defaults, sync({SYNC_ROUND:g}) rounds)",
        PIPEPOOL,
        lambda p, m: LocalAdapter(p, m, "default", rounds=True),
    )


def local_spec(prefetch: Any) -> Spec:
    """LocalExecutor with a fixed ``prefetch``, or an adaptive one (see above)."""
    if isinstance(prefetch, int):
        key, label = f"local-p{prefetch}", f"pipepool LocalExecutor (prefetch {prefetch})"
    else:
        shown = "default" if prefetch == "default" else f"prefetch={prefetch!r}"
        key, label = "local-adaptive", f"pipepool LocalExecutor (adaptive, {shown})"
    return Spec(key, label, PIPEPOOL, lambda p, m: LocalAdapter(p, m, prefetch))


ZOO = "zooparallel"


def peer_specs() -> list[Spec]:
    """The peers in a module of their own (``peers/``), imported when a sample builds
    one: ZooPool (zooparallel) and CPython 3.14's InterpreterPoolExecutor."""

    def zoo(mode: str) -> Callable[[int, str | None], Adapter]:
        def make(p: int, m: str | None) -> Adapter:
            from .peers.zoo import ZooAdapter

            return ZooAdapter(p, m, mode)

        return make

    def interp(mode: str) -> Callable[[int, str | None], Adapter]:
        def make(p: int, m: str | None) -> Adapter:
            from .peers.interpreters import InterpreterAdapter

            return InterpreterAdapter(p, m, mode)

        return make

    def no_interpreters() -> str | None:
        if hasattr(concurrent.futures, "InterpreterPoolExecutor"):
            return None
        return "absent (needs Python 3.14)"

    return [
        Spec("zoo-submit", "ZooPool submit+result", "zooparallel", zoo("submit"), "zooparallel"),
        Spec(
            "zoo-map", "ZooPool map (one item at a time)", "zooparallel", zoo("map"), "zooparallel"
        ),
        Spec(
            "interp-submit",
            "stdlib InterpreterPoolExecutor submit+result",
            "interpreters",
            interp("submit"),
            absent=no_interpreters,
        ),
        Spec(
            "interp-map1",
            "stdlib InterpreterPoolExecutor map(chunksize=1)",
            "interpreters",
            interp("map1"),
            absent=no_interpreters,
        ),
    ]


def _ppe(mode: str) -> Callable[[int, str | None], Adapter]:
    return lambda p, m: PipepoolFuturesAdapter(p, m, mode)


def _chunk_specs() -> list[Spec]:
    """``<family>-chunks`` (10,000 per chunk), ``<family>-chunks2`` (two iterables) and
    ``<family>-map-default`` (the pool's own chunking) of every pool with a map."""
    makers: dict[
        str, tuple[str, str, Callable[[str], Callable[[int, str | None], Adapter]], str | None]
    ] = {
        "ppe": ("pipepool ProcessPoolExecutor", PIPEPOOL, _ppe, None),
        "std": (
            "stdlib ProcessPoolExecutor",
            "stdlib",
            lambda mode: lambda p, m: StdlibAdapter(p, m, mode),
            None,
        ),
        "mp": (
            "multiprocessing.Pool",
            "multiprocessing",
            lambda mode: lambda p, m: MpPoolAdapter(p, m, mode),
            None,
        ),
        "loky": (
            "loky ProcessPoolExecutor",
            "loky",
            lambda mode: lambda p, m: LokyAdapter(p, m, mode),
            "loky",
        ),
        "mpire": (
            "mpire WorkerPool",
            "mpire",
            lambda mode: lambda p, m: MpireAdapter(p, m, mode),
            "mpire",
        ),
        "pebble": (
            "pebble ProcessPool",
            "pebble",
            lambda mode: lambda p, m: PebbleAdapter(p, m, mode),
            "pebble",
        ),
    }
    out = []
    for key, (label, family, make, requires) in makers.items():
        out.append(
            Spec(
                f"{key}-chunks",
                f"{label} map, {MAP_CHUNK:,} per chunk",
                family,
                make("chunks"),
                requires,
            )
        )
        out.append(
            Spec(
                f"{key}-chunks2",
                f"{label} map of 2 iterables, {MAP_CHUNK:,} per chunk",
                family,
                make("chunks2"),
                requires,
            )
        )
        if key in ("mp", "mpire"):
            out.append(
                Spec(
                    f"{key}-map-default",
                    f"{label} map, its default chunking",
                    family,
                    make("map-default"),
                    requires,
                )
            )
    return out


SPECS: dict[str, Spec] = {
    s.key: s
    for s in [
        # LocalExecutor rows are added by the suite: one per prefetch it tries.
        Spec("ppe-submit", "pipepool ProcessPoolExecutor submit+result", PIPEPOOL, _ppe("submit")),
        Spec(
            "ppe-submit-wait",
            "pipepool ProcessPoolExecutor submit, then wait(fs)",
            PIPEPOOL,
            _ppe("submit-wait"),
        ),
        Spec("ppe-map1", "pipepool ProcessPoolExecutor map(chunksize=1)", PIPEPOOL, _ppe("map1")),
        Spec(
            "ppe-map-auto",
            "pipepool ProcessPoolExecutor map(chunksize=auto)",
            PIPEPOOL,
            _ppe("map-auto"),
        ),
        Spec(
            "std-submit",
            "stdlib ProcessPoolExecutor submit+result",
            "stdlib",
            lambda p, m: StdlibAdapter(p, m, "submit"),
        ),
        Spec(
            "std-submit-wait",
            "stdlib ProcessPoolExecutor submit, then wait(fs)",
            "stdlib",
            lambda p, m: StdlibAdapter(p, m, "submit-wait"),
        ),
        Spec(
            "bare-wait",
            "stdlib wait(fs) on bare Futures a thread completes (no pool)",
            "stdlib",
            lambda p, m: BareFuturesAdapter(p, m, "wait"),
        ),
        Spec(
            "bare-result",
            "stdlib result() on bare Futures a thread completes (no pool)",
            "stdlib",
            lambda p, m: BareFuturesAdapter(p, m, "result"),
        ),
        Spec(
            "std-map1",
            "stdlib ProcessPoolExecutor map(chunksize=1)",
            "stdlib",
            lambda p, m: StdlibAdapter(p, m, "map1"),
        ),
        Spec(
            "std-map-auto",
            "stdlib ProcessPoolExecutor map(chunksize=auto)",
            "stdlib",
            lambda p, m: StdlibAdapter(p, m, "map-auto"),
        ),
        Spec(
            "mp-imap1",
            "multiprocessing.Pool imap_unordered(chunksize=1)",
            "multiprocessing",
            lambda p, m: MpPoolAdapter(p, m, "imap1"),
        ),
        Spec(
            "mp-apply",
            "multiprocessing.Pool apply_async+get",
            "multiprocessing",
            lambda p, m: MpPoolAdapter(p, m, "apply"),
        ),
        Spec(
            "mp-map1",
            "multiprocessing.Pool map(chunksize=1)",
            "multiprocessing",
            lambda p, m: MpPoolAdapter(p, m, "map1"),
        ),
        Spec(
            "mpire-apply",
            "mpire WorkerPool apply_async+get",
            "mpire",
            lambda p, m: MpireAdapter(p, m, "apply"),
            requires="mpire",
        ),
        Spec(
            "mpire-map1",
            "mpire WorkerPool map(chunk_size=1)",
            "mpire",
            lambda p, m: MpireAdapter(p, m, "map1"),
            requires="mpire",
        ),
        Spec(
            "pebble-schedule",
            "pebble ProcessPool schedule+result",
            "pebble",
            lambda p, m: PebbleAdapter(p, m, "schedule"),
            requires="pebble",
        ),
        Spec(
            "pebble-map1",
            "pebble ProcessPool map(chunksize=1)",
            "pebble",
            lambda p, m: PebbleAdapter(p, m, "map1"),
            requires="pebble",
        ),
        # The chunked map of many tiny calls: 10,000 per chunk, or the pool's default
        # where it has an automatic one (multiprocessing.Pool, mpire).
        *_chunk_specs(),
        Spec(
            "loky-submit",
            "loky ProcessPoolExecutor submit+result",
            "loky",
            lambda p, m: LokyAdapter(p, m, "submit"),
            requires="loky",
        ),
        Spec(
            "airflow",
            "Airflow-style shared SimpleQueues",
            "airflow",
            lambda p, m: AirflowAdapter(p, m),
        ),
        # Not pools: the bounds a pool's figure is held to, measured in the same run.
        Spec(
            COPY_BOUND,
            "copy bound: one copy of each 1 MiB result into fresh pages (no pool)",
            BOUND,
            lambda p, m: CopyBound(),
        ),
        Spec(
            MAP_FLOOR,
            f"serialization floor: the chunks pickled and unpickled in this process, "
            f"{MAP_CHUNK:,} per chunk (no pool)",
            BOUND,
            lambda p, m: MapFloor(),
        ),
        *peer_specs(),
    ]
}

# The peer each table compares against, one column per peer (its headline contender).
PEER_COLUMNS = {
    "std-submit": "stdlib PPE",
    "mp-imap1": "mp.Pool imap",
    "loky-submit": "loky",
    "mpire-apply": "mpire",
    "pebble-schedule": "pebble",
    "airflow": "Airflow-style",
    "zoo-submit": "ZooPool",
    "interp-submit": "InterpreterPool",
    COPY_BOUND: "copy bound",
    "joblib-loky": "joblib loky",  # only in the joblib tables (benchmarks/joblib_adapters.py)
}


def missing_requirement(spec: Spec) -> str | None:
    """A note if the contender cannot run here (its optional package is not installed,
    or ``spec.absent`` says the interpreter lacks it), else None."""
    if spec.absent is not None:
        why = spec.absent()
        if why:
            return f"{spec.label}: {why}"
    if spec.requires is None:
        return None
    try:
        __import__(spec.requires)
    except ImportError:
        return (
            f"{spec.label}: skipped, {spec.requires} is not installed "
            f"(pip install '.[bench]' or pip install {spec.requires})"
        )
    return None
