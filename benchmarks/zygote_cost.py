"""What the fork pool's zygote costs (issue 35, item 2): a pool's start, a worker's start
while the parent has a thread (each task on a new worker: max_tasks_per_child=1), and
the zygote's memory once the parent has rewritten a heap it had at the pool's start.

CPU times (the parent's own; the workers' and the zygote's, counted when reaped) are
what a loaded machine distorts least; wall times need a quiet one.

    python -m benchmarks.zygote_cost                 # fork, with the zygote
    python -m benchmarks.zygote_cost --no-zygote     # fork as before: from the parent
    python -m benchmarks.zygote_cost --method spawn  # spawn: no zygote, unchanged
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import threading
import time

from pipepool import LocalExecutor
from pipepool.executor._lifecycle import WorkerLifecycle


def _no_zygote(self: WorkerLifecycle) -> None:
    """``--no-zygote``: a fork pool as before the zygote, every worker forked here."""


def _noop() -> None:
    return None


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def pool_start(method: str, pools: int, workers: int) -> dict[str, float]:
    """start() and prestart() of ``pools`` pools, each ended; per pool."""
    cpu = wall = 0.0
    for _ in range(pools):
        ex = LocalExecutor(workers, start_method=method)
        c0, w0 = time.process_time(), time.perf_counter()
        ex.start()
        ex.prestart()
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        ex.end()
    return {"start_cpu_ms": 1e3 * cpu / pools, "start_wall_ms": 1e3 * wall / pools}


def worker_starts(method: str, tasks: int) -> dict[str, float]:
    """``tasks`` tasks, each on a new worker, while a thread runs in the parent."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        ex = LocalExecutor(1, start_method=method, max_tasks_per_child=1)
        ex.start()
        kids0 = _children_cpu()
        c0, w0 = time.thread_time(), time.perf_counter()
        for i in range(tasks):
            ex.queue(i, _noop)
        while ex.has_work():
            ex.sync(timeout=0.01)
        cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
        started = ex.stats()["workers_started"]
        ex.end()
        kids = _children_cpu() - kids0
    finally:
        stop.set()
        thread.join()
    return {
        "workers_started": started,
        "per_worker_parent_cpu_ms": 1e3 * cpu / started,
        "per_worker_wall_ms": 1e3 * wall / started,
        "per_worker_children_cpu_ms": 1e3 * kids / started,
    }


def _smaps(pid: int) -> dict[str, int]:
    """kB from /proc/<pid>/smaps_rollup (Linux)."""
    found = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in ("Rss", "Pss", "Private_Dirty", "Shared_Clean", "Shared_Dirty"):
                    found[name] = int(rest.split()[0])
    except OSError:
        pass
    return found


def memory(method: str, heap_mb: int) -> dict[str, object]:
    """A ``heap_mb`` heap made before the pool's start, rewritten after it: what the
    zygote (which keeps the old pages) and a worker hold."""
    heap = bytearray(os.urandom(1 << 20) * heap_mb)
    ex = LocalExecutor(1, start_method=method)
    ex.start()
    ex.prestart()
    heap[::4096] = b"\1" * len(heap[::4096])  # one write per page: each one copied
    ex.queue("pid", os.getpid)
    while ex.has_work():
        ex.sync(timeout=0.01)
    (worker,) = [e.result for e in ex.get_event_buffer().values()]
    zygote = getattr(ex, "_zygote", None)
    out = {
        "heap_mb": heap_mb,
        "parent_kb": _smaps(os.getpid()),
        "worker_kb": _smaps(worker),
        "zygote_kb": _smaps(zygote.process.pid) if zygote is not None else None,
    }
    ex.end()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="fork")
    parser.add_argument("--no-zygote", action="store_true", help="fork from the parent")
    parser.add_argument("--pools", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--heap-mb", type=int, default=200)
    args = parser.parse_args()
    if args.no_zygote:
        type.__setattr__(WorkerLifecycle, "_fork_zygote", _no_zygote)
    result = {
        "method": args.method,
        "zygote": not args.no_zygote and args.method == "fork",
        **pool_start(args.method, args.pools, args.workers),
        **worker_starts(args.method, args.tasks),
        "memory": memory(args.method, args.heap_mb),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
