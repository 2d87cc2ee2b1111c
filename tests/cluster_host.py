"""A Dask LocalCluster in a process of its own: the cluster conftest.py's ``dask_cluster``
shares between the ClusterExecutor tests (two worker processes under nannies, one thread
each, nothing listening beyond 127.0.0.1).

Run as a script (``python cluster_host.py WORKERS ALLOWED_FAILURES``), its stderr a log
file (what the scheduler and each nanny did, and why, at INFO): prints the scheduler's
address, then answers one request per line on stdin until stdin closes
(the test process ended, or died), then closes the cluster:

* ``whole SETTLE SECONDS``: wait SETTLE seconds (a worker told to die a moment ago dies
  in them), then up to SECONDS for every worker to be registered (a killed worker's
  nanny is starting its replacement), then print how many are.

Why a process of its own: the nannies restart the workers that tests kill, and they do it
from this process, which never forks for a test (the test process starts pools by the
thousand, from the main thread, while a nanny would spawn from its IO thread); and all
the test process holds of the cluster is this process and two pipes (the leak check
names them).
"""

from __future__ import annotations

import logging
import sys
import time


def main(workers: int, allowed_failures: int) -> None:
    import dask
    import distributed

    from pipepool.cluster import WORKER_SATURATION

    dask.config.set(  # for this process's whole life: read when a worker is lost, too
        {
            "distributed.scheduler.allowed-failures": allowed_failures,
            "distributed.scheduler.worker-saturation": WORKER_SATURATION,
            # The tests kill workers on purpose. LocalCluster hard-closes the nanny of a
            # worker that is not back under its name within this timeout (15 s by
            # default), leaving the cluster one worker short for good: what failed
            # seven test_contract.py cluster rows in a full run, where a replacement
            # came late. A nanny here always gets to finish restarting its worker.
            "distributed.deploy.lost-worker-timeout": "1 hour",
        }
    )
    cluster = distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.INFO,  # to stderr, the log file
    )
    try:
        print(cluster.scheduler_address, flush=True)
        for line in sys.stdin:
            request, *args = line.split()
            if request == "whole":
                time.sleep(float(args[0]))
                deadline = time.monotonic() + float(args[1])
                while registered(cluster) < workers and time.monotonic() < deadline:
                    time.sleep(0.05)
                print(registered(cluster), flush=True)
    finally:
        cluster.close(timeout=30)


def registered(cluster) -> int:
    return len(cluster.scheduler.workers)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
