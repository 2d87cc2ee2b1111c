"""Children recycled by count and by memory, the pool grown and shrunk by Celery's
autoscaler, and a cold shutdown, each in a worker of its own (Redis, the hub)."""

from __future__ import annotations

import signal
import time

import pytest

from .celery_support import Worker, alive, require, wait_for

require()  # skip without Celery locally; with CI=true, fail

pytestmark = pytest.mark.timeout(240)


def pids_of_runs(w: Worker, names: list[str]) -> list[int]:
    return [w.run("whoami")["pid"] for _ in names]


def test_max_tasks_per_child_and_max_memory_per_child(worker):
    # One child: the order of tasks is the order of children.
    w = worker(
        "recycle",
        concurrency=1,
        args=("--max-tasks-per-child", "3", "--max-memory-per-child", "300000"),
    )
    assert w.pool()["max-tasks-per-child"] == 3
    first = [w.run("whoami")["pid"] for _ in range(4)]
    assert first[0] == first[1] == first[2] != first[3]  # recycled after its third task
    assert wait_for(lambda: w.count("shutdown")[str(first[0])] == 1, 30)  # it exited itself
    bloated = w.run("bloat", 400, limit=120)  # well above 300000 KiB: retired after it
    assert bloated == first[3]
    after = w.run("whoami")["pid"]
    assert after != bloated and not alive(bloated)
    assert "above max_memory_per_child" in w.log()
    stats = w.pool()["pipepool"]["stats"]
    assert stats["worker_recycles"] >= 2 and stats["worker_crashes"] == 0


def test_autoscale_grows_under_load_and_shrinks_when_idle(worker):
    w = worker("autoscale", args=("--autoscale", "3,1"), env={"AUTOSCALE_KEEPALIVE": "1"})
    assert wait_for(lambda: len(w.pool()["processes"]) == 1, 30)
    results = [w.send("sleep", 2.0, f"as{i}") for i in range(3)]
    # All three run at once: the pool grew to three children for them.
    assert wait_for(lambda: sum(w.count("start")[f"as{i}"] for i in range(3)) == 3, 60)
    running = {words[2] for words in w.runs() if words[0] == "start"}
    assert len(running) == 3 and len(w.pool()["processes"]) == 3
    assert [r.get(60) for r in results] == [2.0] * 3
    assert wait_for(lambda: len(w.pool()["processes"]) == 1, 60)
    assert w.pool()["pipepool"]["semaphore"]["initial"] == 1


def test_cold_shutdown_cancels_what_runs_and_the_broker_delivers_it_again(worker):
    # Redis gives an unacknowledged message back once its visibility timeout passes.
    transport = {"visibility_timeout": 2}
    w = worker("cold", transport=transport)
    result = w.send("sleep_late", 30, "cold1")
    assert wait_for(lambda: w.count("start")["cold1"] == 1, 30)
    (child,) = {int(words[2]) for words in w.runs() if words[:2] == ["start", "cold1"]}
    w.send("sleep_late", 30, "cold2")  # reserved, maybe sent to a child: not accepted yet
    began = time.monotonic()
    w.signal(signal.SIGQUIT)
    assert w.wait(30) is not None and time.monotonic() - began < 20  # not the task's 30 s
    assert not alive(child) and w.count("done")["cold1"] == w.count("done")["cold2"] == 0
    assert "succeeded" not in w.log()
    # Not acknowledged: another worker on the same queue gets it again.
    again = worker("cold-again", queue=w.queue, transport=transport)
    for key in ("cold1", "cold2"):
        assert wait_for(lambda k=key: again.count("start")[k] == 1, 60), again.log()[-3000:]
    assert result.state != "SUCCESS"
