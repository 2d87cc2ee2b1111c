"""zooparallel's ``ZooPool`` (a Rust core, shared-memory rings) as a contender.

Its API, read from the installed package (2026.2): ``ZooPool(num_workers, buffer_size_mb)``
starts its workers with ``multiprocessing.Process`` (the default context: it takes no
start method), ``submit(fn, *args)`` returns a ``concurrent.futures.Future``, ``map(fn,
iterable)`` is a submit per item then every result (no chunking), ``shutdown(wait)``.
"""

from __future__ import annotations

import multiprocessing
import signal
import time

from ..contenders import Adapter, _wait_futures
from ..tasks import sleep_s


class ZooAdapter(Adapter):
    """``submit`` + ``result`` one by one, or its ``map`` (one item at a time)."""

    def __init__(self, parallelism: int, start_method: str | None, mode: str) -> None:
        from zooparallel import ZooPool

        self.mode = mode  # "submit" or "map"
        previous = multiprocessing.get_start_method(allow_none=True)
        # Its first pool installs SIGINT and SIGTERM handlers in this process for good
        # (zooparallel.pool._register_signal_handlers): every process the suite forks
        # later inherits them, and a multiprocessing.Pool worker then outlived
        # terminate()'s SIGTERM and hung the run (hol, 5-minute sample timeout). Put back.
        handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        if start_method:  # its workers start from the default context: set it meanwhile
            multiprocessing.set_start_method(start_method, force=True)
        try:
            self.pool = ZooPool(parallelism)
        finally:
            if start_method:
                multiprocessing.set_start_method(previous, force=True)
            for signum, handler in handlers.items():
                signal.signal(signum, handler)

    def run(self, fn, args):
        if self.mode == "map":
            return self.pool.map(fn, args)
        futures = [self.pool.submit(fn, a) for a in args]
        return [f.result() for f in futures]

    def call(self, fn, arg):
        return self.pool.submit(fn, arg).result()

    def shorts_done(self, long_s, short_s, count):
        started = time.perf_counter()
        self.pool.submit(sleep_s, long_s)
        _wait_futures([self.pool.submit(sleep_s, short_s) for _ in range(count)])
        return time.perf_counter() - started

    def pids(self):
        return [p.pid for p in self.pool.workers if p.pid is not None]

    def close(self):
        self.pool.shutdown(wait=True)

    def abort(self):
        # Shut down first: its monitor thread restarts a worker it finds dead until then.
        self.pool.shutdown(wait=False)
        workers = list(self.pool.workers)
        for p in workers:
            p.kill()
        for p in workers:
            p.join()
