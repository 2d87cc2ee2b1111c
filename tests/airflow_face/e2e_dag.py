"""The end-to-end DAG (copied into a temporary dags folder by e2e.py): ~200 tasks.

Every task instance has one state Airflow must give it:

* ``ok_000`` .. ``ok_N``: return at once (success);
* ``fail_0`` .. ``fail_4``: raise (failed; retries=0);
* ``after_fail``: downstream of ``fail_0`` (upstream_failed);
* ``sigkill``: its task process SIGKILLs itself (failed);
* ``timeout``: sleeps past its 2 s execution_timeout (failed);
* ``last``: runs after every ``ok_*`` (success).
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta

from airflow.sdk import dag, task

N_OK = int(os.environ.get("PIPEPOOL_E2E_OK", "190"))


@dag(
    dag_id=os.environ.get("PIPEPOOL_E2E_DAG_ID", "pipepool_e2e"),
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args={"retries": 0},
)
def pipepool_e2e():
    @task
    def ok(i: int) -> int:
        return i

    @task
    def fail(i: int) -> None:
        raise RuntimeError(f"planned failure {i}")

    @task
    def sigkill() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    @task(execution_timeout=timedelta(seconds=2))
    def timeout() -> None:
        time.sleep(120)

    @task
    def after_fail() -> None:
        pass

    @task
    def last() -> None:
        pass

    oks = [ok.override(task_id=f"ok_{i:03d}")(i) for i in range(N_OK)]
    fails = [fail.override(task_id=f"fail_{i}")(i) for i in range(5)]
    fails[0] >> after_fail()
    sigkill()
    timeout()
    oks >> last()


pipepool_e2e()
