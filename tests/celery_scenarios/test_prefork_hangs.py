"""Issue 43's hang scenarios that Celery 5.7's prefork pool still shows, each run the same
way on prefork and on pipepool's pool by the benchmark harness
(benchmarks/celery_pool/scenarios.py, which says each mechanism): prefork's row observes
the hang within a bounded window (a timeout that sees it, never a test that hangs), and
pipepool's row passes the same scenario.

Prefork's rows assert the bug is still there: when a Celery release fixes one, its row
fails and the scenario leaves this file (docs/celery.md's table says which version).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(150)


@pytest.mark.parametrize("pool", ["prefork", "pipepool"])
def test_an_idle_child_killed_holding_the_queue_lock(run_scenario, pool):
    """billiard#457, celery#2917: the blocking loop (filesystem transport); the idle
    children SIGKILLed, then 4 tasks watched 6 s: prefork runs none. pipepool's pool
    runs them and then shuts down warm within 30 s. (Prefork's warm shutdown hangs too,
    but a healthy one of its blocking pool takes ~5 s under load: the harness watches it
    30 s; here it is cut at 3 s and not judged.)"""
    stop = "3" if pool == "prefork" else "30"
    outcome = run_scenario("lock_holder_killed", pool, 6, 120, "--stop-window", stop)
    if pool == "prefork":
        assert outcome["details"]["done"] == 0, outcome
    else:
        assert outcome["passed"], outcome


@pytest.mark.parametrize("pool", ["prefork", "pipepool"])
def test_a_child_initializer_slower_than_the_up_timeout(run_scenario, pool):
    """celery#1715, #2431: max_tasks_per_child=1 and a worker_process_init of 1.5 s with
    worker_proc_alive_timeout at 1 s: prefork runs the first children's two tasks, then
    kills every replacement; pipepool's pool runs all four."""
    window = 12 if pool == "prefork" else 60  # prefork: the hang is watched this long
    outcome = run_scenario("slow_init_respawn", pool, window, 120)
    if pool == "prefork":
        assert outcome["details"]["done"] < 4, outcome
        assert outcome["details"]["up_timeouts"] >= 1, outcome
    else:
        assert outcome["passed"], outcome


@pytest.mark.parametrize("pool", ["prefork", "pipepool"])
def test_a_child_the_oom_killer_ended(run_scenario, pool, memory_cgroups):
    """celery#1406: the worker in a 512 MiB memory cgroup, a task touching 1 GiB: prefork
    says only 'signal 9 (SIGKILL)'; pipepool's error says the OOM killer ended the child.
    Both go on to run the next task."""
    outcome = run_scenario("oom_named", pool, 60, 120)
    error = outcome["details"]["error"]
    assert "signal 9" in error or "SIGKILL" in error, outcome
    if pool == "prefork":
        assert not outcome["details"]["named"], outcome
        assert "a task after it ran" in outcome["observed"], outcome
    else:
        assert outcome["passed"], outcome
