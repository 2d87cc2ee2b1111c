"""What runs inside a pipepool worker on Airflow's behalf (pickled by reference)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any

from airflow.executors import workloads
from airflow.executors.base_executor import BaseExecutor

from .. import worker as _pool_worker
from ._procs import rss_bytes
from ._versions import V3_2, V3_3


def title_prefix(team_name: str | None) -> str:
    """The process title of a worker, as Airflow's LocalExecutor names its own."""
    team = f" [{team_name}]" if team_name else ""
    return f"airflow worker -- PipepoolExecutor{team}:"


def init_worker(prefix: str) -> None:
    """Per worker, once: the idle title, and a task runner that dies with its worker."""
    set_title(f"{prefix} <idle>")
    if sys.platform.startswith("linux"):
        worker_pid = os.getpid()
        # The supervisor (this worker) forks the task runner into a process group of
        # its own. Should the worker die (OOM killer, SIGKILL), the runner would live on
        # as an orphan; PR_SET_PDEATHSIG makes the kernel kill it with its worker. Only
        # the worker's direct children get it: the task's own forks keep their semantics.
        os.register_at_fork(after_in_child=lambda: _die_with_parent(worker_pid))


def _die_with_parent(worker_pid: int) -> None:
    if os.getppid() != worker_pid:
        return
    import ctypes

    with contextlib.suppress(Exception):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != worker_pid:  # the worker died before prctl took effect
            os._exit(1)


def run_workload(workload: Any, server: str, prefix: str, max_rss: int) -> int:
    """Run one workload the way this Airflow's LocalExecutor does (``_run_worker``)."""
    try:
        if V3_3:  # one entry point for every kind, the supervisor's
            return BaseExecutor.run_workload(
                workload,
                server=server,
                proctitle=f"{prefix} {workload.display_name}",
                subprocess_logs_to_stdout=True,
            )
        if V3_2 and isinstance(workload, workloads.ExecuteCallback):
            return _run_callback(workload, prefix)
        return _supervise_task(workload, server, prefix)
    finally:
        set_title(f"{prefix} <idle>")
        if max_rss and rss_bytes() > max_rss:
            _pool_worker.retire_after_task()  # exits after this outcome; a fresh one follows


def _supervise_task(workload: Any, server: str, prefix: str) -> int:
    """3.0-3.2: the task SDK's supervisor, called as that version's LocalExecutor does."""
    from airflow.sdk.execution_time import supervisor

    set_title(f"{prefix} {workload.ti.id}")
    return supervisor.supervise(
        ti=workload.ti,
        dag_rel_path=workload.dag_rel_path,
        bundle_info=workload.bundle_info,
        token=workload.token,
        server=server,
        log_path=workload.log_path,
        subprocess_logs_to_stdout=V3_2,  # 3.2's LocalExecutor sends them there too
    )


def _run_callback(workload: Any, prefix: str) -> int:
    """3.2: a callback (a deadline alert) runs in the worker itself, as 3.2's
    LocalExecutor runs it; a failure raises, so the workload fails with the reason."""
    import structlog
    from airflow.executors.workloads import callback

    set_title(f"{prefix} {workload.callback.id}")
    success, error = callback.execute_callback_workload(
        workload.callback, structlog.get_logger(__name__)
    )
    if not success:
        raise RuntimeError(error or "Callback execution failed")
    return 0


def set_title(title: str) -> None:
    if sys.platform == "darwin":  # Airflow skips it there too (not fork-safe)
        return
    with contextlib.suppress(ImportError):
        from setproctitle import setproctitle

        setproctitle(title)
