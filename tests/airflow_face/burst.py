"""One burst of workloads through an Airflow executor, with Airflow's supervisor mocked
to return at once (as Airflow's own executor tests do). Run as a script, in a process
of its own, by test_deadlock.py and benchmarks; prints one JSON line at the end:

    python burst.py airflow.executors.local_executor.LocalExecutor 1000 [RESULT_BYTES]

Before the burst it prints ``ready <pid>`` and registers SIGUSR1 to dump every thread's
stack (faulthandler writes it from the signal handler, even while the main thread is
blocked in a write), so a caller can show where a hung run is stuck.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import signal
import sys
import time
from unittest import mock

RESULT_BYTES = 0


def fake_supervise_task(ti, **_kwargs):
    """Return at once; a big result when asked (our executor sends it back)."""
    if ti.task_id.startswith("fail_"):
        raise RuntimeError(f"fake failure of {ti.task_id}")
    return b"r" * RESULT_BYTES if RESULT_BYTES else 0


def workload(i: int):
    from airflow._shared.timezones import timezone
    from airflow.executors import workloads
    from uuid6 import uuid7

    ti = workloads.TaskInstance(
        id=uuid7(),
        dag_version_id=uuid7(),
        task_id=f"fail_{i}" if i % 100 == 99 else f"success_{i}",
        dag_id="burst",
        run_id="run1",
        try_number=1,
        state="queued",
        pool_slots=1,
        queue="default",
        priority_weight=1,
        map_index=-1,
        start_date=timezone.utcnow(),
    )
    return workloads.ExecuteTask(
        token="",
        ti=ti,
        dag_rel_path="some/path",
        log_path=None,
        bundle_info=dict(name="hi", version="hi"),
    )


def main() -> None:
    global RESULT_BYTES
    path, n = sys.argv[1], int(sys.argv[2])
    RESULT_BYTES = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    module, _, name = path.rpartition(".")
    executor_class = getattr(importlib.import_module(module), name)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    with mock.patch("airflow.sdk.execution_time.supervisor.supervise_task", fake_supervise_task):
        executor = executor_class(parallelism=2)
        executor.start()
        session = mock.MagicMock()
        for i in range(n):
            executor.queue_workload(workload(i), session=session)
        print("ready", flush=True)
        began = time.monotonic()
        # The burst: every workload in one call, as the scheduler does after a pause.
        executor._process_workloads(list(executor.queued_tasks.values()))
        while len(executor.event_buffer) < n:
            executor.sync()
            time.sleep(0.0002)
        took = time.monotonic() - began
        executor.end()
    states: dict[str, int] = {}
    for state, _info in executor.event_buffer.values():
        states[str(state)] = states.get(str(state), 0) + 1
    print(json.dumps({"executor": name, "workloads": n, "states": states, "seconds": took}))


if __name__ == "__main__":
    main()
