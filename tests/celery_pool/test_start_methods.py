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
    # Both children run tasks: one of them busy with a sleep, the other answers (one task
    # at a time may always land on the same idle child: a CI run never saw the second).
    seen: set[int] = set()

    def both_children_ran_one() -> bool:
        key = f"occupy-{len(seen)}-{len(w.runs())}"
        occupying = w.send("sleep", 1.0, key)
        assert wait_for(lambda: w.count("start")[key] == 1, 30)
        seen.add(w.run("whoami")["pid"])
        occupying.get(30)
        seen.update(int(words[2]) for words in w.runs() if words[:2] == ["start", key])
        return seen == children

    assert wait_for(both_children_ran_one, 60), (seen, children)
    answer = w.run("whoami")
    assert answer["fast_tracer"] and answer["forked_by_multiprocessing"] == "1"
    inits = {words[1]: words[2] for words in w.runs() if words[0] == "init"}
    assert w.count("init") == {str(pid): 1 for pid in children}, w.runs()
    assert set(inits.values()) == {"1"}  # set before Celery's initializer ran
    assert w.run("soft_limited", 30, "s", soft_time_limit=0.5) == "soft limit"
    assert w.stop() == 0
