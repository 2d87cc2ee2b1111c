"""End to end: Airflow itself runs ``e2e_dag.py`` (~200 tasks: failures, a task that
SIGKILLs itself, one past its execution_timeout, an upstream_failed) with
PipepoolExecutor, in a temporary AIRFLOW_HOME with a sqlite database, on 127.0.0.1 only:

* ``airflow dags test --use-executor``, by default;
* the scheduler, api-server and dag-processor for one triggered run, at the nightly size
  only: by default test_versions_e2e.py's one scheduler session runs the same
  DAG (cut to 5 ``ok_*`` tasks) beside its other DAGs, with the same checks (every state,
  no process outliving the run, our executor named in the scheduler's log), so a second
  start of Airflow's three processes (over a minute here) would test nothing new.

The ``dags test`` run cuts the DAG to 10 ``ok_*`` tasks beside its 9 others: what these
runs can get wrong (a task instance in the wrong state, a slot never given back, a
process left) shows within the first waves through ``[core] parallelism`` = 4.
Reintroduced once (PipepoolExecutor._read_events reporting success with
``remove_running=False``: no slot ever freed), the 10-task ``dags test`` fails. The whole
DAG (190 ``ok_*``, 199 task instances, 205 s) runs in
``test_dags_test_with_the_executor_full`` and the scheduler run in
``test_scheduler_runs_the_dag_with_the_executor`` with PIPEPOOL_SLOW=1 (the nightly
workflow); PIPEPOOL_E2E_SCHEDULER_OK sets the scheduler run's count.

Every task instance must end in the state Airflow should give it, and no process of the
run may outlive it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from . import airflow_env

airflow_env.require_airflow()

import proc_table  # noqa: E402

from . import e2e  # noqa: E402

BOUND = 540.0  # s for one whole run; the test's own timeout is above it
SCHEDULER_OK = int(os.environ.get("PIPEPOOL_E2E_SCHEDULER_OK", "30"))
DAGS_TEST_OK = 10
SLOW = os.environ.get("PIPEPOOL_SLOW") == "1"


@pytest.fixture(scope="module")
def template_db(tmp_path_factory) -> Path:
    """One migrated metadata database, copied into each run's home (saves ~10 s each)."""
    home = e2e.Home(tmp_path_factory.mktemp("template"), e2e.PIPEPOOL)
    home.migrate()
    return home.db


def check(home: e2e.Home, states: dict[str, str | None], n_ok: int) -> None:
    print(f"\n{e2e.state_table(states)}")
    assert len(states) == n_ok + 9, sorted(states)
    wrong = {t: s for t, s in states.items() if s != e2e.expected_state(t)}
    assert not wrong, f"task instances in the wrong state: {wrong}"


def dags_test(tmp_path: Path, template_db: Path, n_ok: int) -> None:
    before = proc_table.children(os.getpid())
    home = e2e.Home(tmp_path / "home", e2e.PIPEPOOL, n_ok=n_ok)
    home.migrate(template_db)
    states = e2e.dags_test(home, bound=BOUND)
    check(home, states, n_ok)
    # Task logs are written by Airflow's supervisor, as with LocalExecutor.
    logs = list((home.root / "logs").rglob("*task_id=fail_1*/*.log"))
    assert logs and "planned failure 1" in logs[0].read_text(), logs
    e2e.no_survivors(before)


@pytest.mark.timeout(BOUND + 60)
def test_dags_test_with_the_executor(tmp_path, template_db):
    dags_test(tmp_path, template_db, DAGS_TEST_OK)


@pytest.mark.slow
@pytest.mark.skipif(
    not SLOW,
    reason="full-size duplicate of test_dags_test_with_the_executor, which runs by "
    "default at CI size; run it with PIPEPOOL_SLOW=1",
)
@pytest.mark.timeout(BOUND + 60)
def test_dags_test_with_the_executor_full(tmp_path, template_db):
    dags_test(tmp_path, template_db, 190)


@pytest.mark.slow
@pytest.mark.skipif(
    not SLOW,
    reason="the same DAG runs by default in test_versions_e2e.py's scheduler "
    "session; this separate run (its own start of Airflow's processes) with PIPEPOOL_SLOW=1",
)
@pytest.mark.timeout(BOUND + 60)
def test_scheduler_runs_the_dag_with_the_executor(tmp_path, template_db):
    before = proc_table.children(os.getpid())
    home = e2e.Home(tmp_path / "home", e2e.PIPEPOOL, n_ok=SCHEDULER_OK)
    home.migrate(template_db)
    states, span = e2e.scheduler_run(home, bound=BOUND)
    check(home, states, SCHEDULER_OK)
    print(f"{len(states)} task instances in {span:.1f} s: {len(states) / span * 60:.0f}/min")
    assert "pipepool.airflow" in home.tail("scheduler", 10**7)  # it really ran ours
    e2e.no_survivors(before)
