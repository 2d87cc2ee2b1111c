"""PipepoolExecutor's side of its pool: a round (dispatch, read outcomes into Airflow's
states), the driver thread that runs rounds while workloads wait, and the GC frozen
while workers fork.

``PoolRounds`` is the base of ``PipepoolExecutor``: it declares the state that the pool's
side shares with the executor's BaseExecutor methods (the pool, its lock, the workloads
handed over), and its methods are the steps those methods call.
"""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
import time
from collections.abc import Hashable
from typing import Any

from airflow.executors.base_executor import BaseExecutor

from ..events import Event, State
from ..executor import LocalExecutor
from . import _procs
from ._workloads import _failure_reason, _is_lost, _key, _states

DRIVE_INTERVAL = 0.02  # s between the driver's rounds while workloads wait: the longest a
# free worker idles with work waiting, for ~100 µs of scheduler CPU per round
GROUP_SCAN = 1.0  # s between scans for the process groups our workers' task runners lead:
# one pass over the process table, so that a worker's death can take its task's whole
# group along (its task runner sits in a group of its own, out of the worker's reach)


class _SharedFreeze:
    """One ``gc.freeze()`` for the whole process, held while any executor forks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0

    def enter(self) -> None:
        with self._lock:
            if not self._holders:
                gc.freeze()
            self._holders += 1

    def exit(self) -> None:
        with self._lock:
            self._holders -= 1
            if not self._holders:
                gc.unfreeze()


_FREEZE = _SharedFreeze()


class PoolRounds(BaseExecutor):
    """Base of ``PipepoolExecutor``: its pool's side, and the state it shares."""

    # Set by PipepoolExecutor.__init__, from the start method and from the options:
    is_mp_using_fork: bool  # workers are forked from this process (Airflow's name)
    gc_freeze: bool  # [pipepool] gc_freeze: freeze the GC while forking

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pool: LocalExecutor | None = None
        self._lock = threading.Lock()  # held for every use of the pool
        self._stop = threading.Event()
        self._driver: threading.Thread | None = None
        self._workloads: dict[Hashable, Any] = {}  # key -> workload, handed over to the pool
        self._groups: dict[int, set[int]] = {}  # worker pid -> process groups it started
        self._next_scan = 0.0

    def _round(self, timeout: float = 0.0) -> None:
        pool = self._require_pool()
        with self._lock:
            self._pool_round(pool, timeout)
            events = pool.get_event_buffer()
            pids = pool.worker_pids()
        self._read_events(events)
        now = time.monotonic()
        if now >= self._next_scan and self._workloads:
            self._next_scan = now + GROUP_SCAN
            self._groups = _procs.task_groups(pids)

    def _pool_round(self, pool: LocalExecutor, timeout: float = 0.0) -> None:
        # A worker is forked inside the round when work is waiting and one is missing.
        may_fork = self.is_mp_using_fork and pool.has_work()
        if may_fork:
            may_fork = pool.stats()["workers_alive"] < self.parallelism
        with self._gc_frozen(may_fork):
            pool.sync(timeout)

    def _drive(self) -> None:
        """The driver thread: a round whenever workloads wait in the queue, so a worker
        that finishes gets the next one now, not at the scheduler's next heartbeat. It
        leaves the events in the pool for the scheduler's thread."""
        while not self._stop.wait(DRIVE_INTERVAL):
            with self._lock:
                pool = self.pool
                if pool is None:
                    return
                if pool.queued:
                    self._pool_round(pool)

    def _stop_driver(self) -> None:
        if self._driver is not None:
            self._stop.set()
            self._driver.join()
            self._driver = None

    def _read_events(self, events: dict[Hashable, Event] | None = None) -> None:
        if events is None:
            if self.pool is None:
                return
            events = self.pool.get_event_buffer()
        for pool_key, event in events.items():
            workload = self._workloads.get(pool_key)
            if workload is None:
                continue  # revoked
            key = _key(workload)  # as Airflow reads it (3.2's callbacks: _CallbackId)
            running_state, success_state, failure_state = _states(workload)
            if event.state is State.RUNNING:
                if running_state is not None:  # callbacks report RUNNING
                    self.change_state(key, running_state, remove_running=False)
                continue
            del self._workloads[key]
            groups = self._groups.pop(event.pid, set()) if event.pid else set()
            if _is_lost(event.exception):
                # The worker (the task's supervisor) died: its task runner died with it
                # (PR_SET_PDEATHSIG) but what the runner started may live on in its group.
                _procs.signal_groups(groups, signal.SIGKILL)
            if event.state is State.SUCCESS:
                self.change_state(key, success_state)
                continue
            reason = _failure_reason(event)
            self.log.error("Workload %s failed: %s", key, reason)
            self.change_state(key, failure_state, info=reason)

    @contextlib.contextmanager
    def _gc_frozen(self, active: bool):
        """Move every tracked object to the permanent generation while forking, so the
        children's GC never writes to (and copies) the pages they share with us.
        ``gc.freeze()`` is process-wide: with two team executors in one scheduler, the
        first to fork freezes and the last to finish unfreezes (``_FREEZE``)."""
        if not (active and self.gc_freeze):
            yield
            return
        _FREEZE.enter()
        try:
            yield
        finally:
            _FREEZE.exit()

    def _require_pool(self) -> LocalExecutor:
        if self.pool is None:
            raise RuntimeError("PipepoolExecutor is not running: call start() first")
        return self.pool
