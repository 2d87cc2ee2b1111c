"""A workload as the installed Airflow makes it: the key it is queued, run and reported
under, the states it reports, where its task runner reaches the api-server, and the words
a failed one's event carries. Each answer is gated by version (``_versions``).
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from typing import Any

from airflow.executors import workloads

from ..errors import DeathCause
from ..events import Event
from ._versions import V3_2, V3_3


class _CallbackId(str):
    """Airflow 3.2's callback key (the callback's UUID as a string) that its scheduler
    can look up: 3.2 passes the event's key to ``session.get(Callback, key)``, and
    SQLAlchemy binds a UUID column on sqlite with ``key.hex``, which a plain string
    lacks (the scheduler dies on the first callback event; 3.3 converts the key first).
    Equal to, and hashed as, the string Airflow queued it under."""

    @property
    def hex(self) -> str:
        return uuid.UUID(self).hex


def _key(workload: Any) -> Hashable:
    """The key a workload is queued, run and reported under, as this Airflow keys it."""
    if V3_3:
        return workload.key
    if V3_2 and isinstance(workload, workloads.ExecuteCallback):
        return _CallbackId(workload.callback.id)
    return workload.ti.key


def _states(workload: Any) -> tuple[Any, Any, Any]:
    """(running, success, failure) states to report for a workload: only callbacks
    report RUNNING (as Airflow's LocalExecutor does)."""
    if V3_3:
        return workload.running_state, workload.success_state, workload.failure_state
    from airflow.utils.state import TaskInstanceState

    if V3_2 and isinstance(workload, workloads.ExecuteCallback):
        from airflow.utils.state import CallbackState

        return CallbackState.RUNNING, CallbackState.SUCCESS, CallbackState.FAILED
    return None, TaskInstanceState.SUCCESS, TaskInstanceState.FAILED


def _execution_api_server_url(conf: Any) -> str:
    """Where task runners reach the api-server: Airflow's own answer from 3.3, before it
    what that version's LocalExecutor computes (``[core] execution_api_server_url``, else
    ``[api] base_url`` + ``/execution/``, a relative one on localhost:8080)."""
    if V3_3:
        from airflow.executors.base_executor import get_execution_api_server_url

        return get_execution_api_server_url(conf)
    base_url = conf.get("api", "base_url", fallback="/")
    if base_url.startswith("/"):
        base_url = f"http://localhost:8080{base_url}"
    default = f"{base_url.rstrip('/')}/execution/"
    return conf.get("core", "execution_api_server_url", fallback=default)


def _is_lost(exc: BaseException | None) -> bool:
    from ..errors import WorkerLostError  # lazy, see errors

    return isinstance(exc, WorkerLostError)


def _failure_reason(event: Event) -> str:
    """Why a workload failed, in words the scheduler's log and the event carry. A lost
    worker's error already says why it died (the OOM killer, a crash, a signal from
    outside: ``executor._death``, with the OOM kill counts of ``_oom``)."""
    exc = event.exception
    if not _is_lost(exc):
        return f"{type(exc).__name__}: {exc}"
    reason = f"{exc}; only this workload failed"
    if getattr(exc, "cause", "") == DeathCause.OOM:
        reason += ". Or set [pipepool] max_rss_mib to recycle workers that grow"
    return reason
