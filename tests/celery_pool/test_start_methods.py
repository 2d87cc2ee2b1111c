"""The pool under spawn and forkserver (fork: test_worker.py), each started by
another of Celery's routes to a custom pool: the ``worker_pool`` setting with no ``-P``,
and ``pool_cls=`` from Python. Every child runs Celery's ``process_initializer`` once
(``worker_process_init``), as a fresh interpreter: the fast tracer's registry is set up
there, and a task's soft limit still reaches it."""

from __future__ import annotations

import pytest

from .celery_support import POOL, require, wait_for

require()  # skip without Celery locally; with CI=true, fail

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize(
    ("start_method", "route"), [("spawn", "setting"), ("forkserver", "pool_cls")]
)
def test_children_of_a_fresh_interpreter_are_celery_children(worker, start_method, route):
    w = worker(f"{start_method}-{route}", start_method=start_method, route=route)
    pool = w.pool()
    assert pool["implementation"] == POOL
    assert pool["pipepool"]["start-method"] == start_method
    children = set(pool["processes"])
    assert len(children) == 2
    seen = set()
    assert wait_for(
        lambda: seen.update(w.run("whoami")["pid"] for _ in range(4)) or seen == children, 60
    )
    answer = w.run("whoami")
    assert answer["fast_tracer"] and answer["forked_by_multiprocessing"] == "1"
    inits = {words[1]: words[2] for words in w.runs() if words[0] == "init"}
    assert w.count("init") == {str(pid): 1 for pid in children}, w.runs()
    assert set(inits.values()) == {"1"}  # set before Celery's initializer ran
    assert w.run("soft_limited", 30, "s", soft_time_limit=0.5) == "soft limit"
    assert w.stop() == 0
