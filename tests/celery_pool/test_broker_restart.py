"""Redis restarts in the middle (celery#10346: after a broker reconnect, prefork left a
free child idle behind a long task): the worker reconnects, the hub is reset and the pool
registers with it again, and a new task runs on the free child while the long one goes
on. A Redis of this module's own: restarted, it comes back empty."""

from __future__ import annotations

import gc

import pytest

from .celery_support import require, wait_for

require()  # skip without Celery locally; with CI=true, fail

pytestmark = pytest.mark.timeout(240)


def test_a_new_task_runs_on_the_free_child_after_the_broker_restarts(worker, redis_server):
    w = worker("restart")
    long = w.send("sleep", 8, "long")
    assert wait_for(lambda: w.count("start")["long"] == 1, 30)
    (long_child,) = {words[2] for words in w.runs() if words[:2] == ["start", "long"]}
    redis_server.restart()
    assert wait_for(lambda: w.log().count("Connected to redis") >= 2, 60), w.log()[-3000:]
    quick = w.send("sleep", 0, "quick")
    assert quick.get(60) == 0
    (quick_child,) = {words[2] for words in w.runs() if words[:2] == ["start", "quick"]}
    assert quick_child != long_child
    assert w.count("done")["long"] == 0  # the long one still runs: the free child took it
    assert long.get(60) == 8  # and its result is stored once it ends
    assert w.pool()["pipepool"]["semaphore"] == {"value": 2, "initial": 2}
    del long, quick  # collected while Redis is up: their unsubscribe has a server
    gc.collect()
