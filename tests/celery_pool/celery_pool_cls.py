"""The third route to the pool: a worker started from Python with ``pool_cls=TaskPool``
(``app.Worker``, what ``celery worker`` builds), the command line's options mapped to
its arguments. Run by ``celery_support.Worker(route="pool_cls")``."""

from __future__ import annotations

import argparse

from celery_proj import app

from pipepool.celery.prefork import TaskPool

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", type=int, dest="concurrency")
    parser.add_argument("-n", dest="hostname")
    parser.add_argument("-Q", dest="queues")
    parser.add_argument("-l", dest="loglevel")
    parser.add_argument("--without-mingle", action="store_true")
    parser.add_argument("--without-gossip", action="store_true")
    options, extra = parser.parse_known_args()
    assert not extra, extra
    app.Worker(
        pool_cls=TaskPool,
        concurrency=options.concurrency,
        hostname=options.hostname,
        queues=options.queues.split(","),
        loglevel=options.loglevel.upper(),
        without_mingle=options.without_mingle,
        without_gossip=options.without_gossip,
    ).start()
