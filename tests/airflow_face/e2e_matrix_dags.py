"""The DAGs of the version matrix (copied into a temporary dags folder by
test_versions_e2e.py, beside e2e_dag.py):

* ``pipepool_fan``: 40 ``leaf_*`` tasks, then ``join`` (41 task instances, all success);
* ``pipepool_worker_killed``: ``kill_worker`` SIGKILLs its own pipepool worker (the task
  SDK supervisor that forked it), so only the executor can say what happened (failed);
  ``bystander`` beside it (success);
* ``pipepool_deadline`` (Airflow 3.2+): a run that misses its 1 s deadline, whose alert
  is a SyncCallback the DAG's executor runs (``pipepool_e2e_callbacks.on_deadline``
  writes a marker file).
"""

from __future__ import annotations

import os
import re
import signal
import time
from datetime import datetime, timedelta

import airflow
from airflow.sdk import dag, task

START = datetime(2026, 1, 1)
ARGS = {"schedule": None, "start_date": START, "catchup": False, "default_args": {"retries": 0}}
_v = re.match(r"(\d+)\.(\d+)", airflow.__version__)
VERSION = (int(_v.group(1)), int(_v.group(2))) if _v else (0, 0)


@dag(dag_id="pipepool_fan", **ARGS)
def pipepool_fan():
    @task
    def leaf(i: int) -> int:
        return i

    @task
    def join() -> None:
        pass

    [leaf.override(task_id=f"leaf_{i:02d}")(i) for i in range(40)] >> join()


pipepool_fan()


@dag(dag_id="pipepool_worker_killed", **ARGS)
def pipepool_worker_killed():
    @task
    def kill_worker() -> None:
        worker = os.getppid()
        with open(f"/proc/{worker}/cmdline", "rb") as f:
            title = f.read().replace(b"\0", b" ").decode()
        if "PipepoolExecutor" not in title:  # never kill anything but our own worker
            raise RuntimeError(f"the parent is not a pipepool worker: {title!r}")
        os.kill(worker, signal.SIGKILL)
        time.sleep(60)  # PR_SET_PDEATHSIG ends this process with its worker

    @task
    def bystander() -> None:
        pass

    kill_worker()
    bystander()


pipepool_worker_killed()


if VERSION >= (3, 2):
    from airflow.sdk import DeadlineAlert, DeadlineReference, SyncCallback

    @dag(
        dag_id="pipepool_deadline",
        deadline=DeadlineAlert(
            reference=DeadlineReference.DAGRUN_QUEUED_AT,
            interval=timedelta(seconds=1),
            callback=SyncCallback(
                "pipepool_e2e_callbacks.on_deadline",
                kwargs={"marker": os.environ.get("PIPEPOOL_E2E_MARKERS", "/nonexistent")},
            ),
        ),
        **ARGS,
    )
    def pipepool_deadline():
        @task
        def slow() -> None:
            time.sleep(15)

        slow()

    pipepool_deadline()
