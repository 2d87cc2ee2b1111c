"""PipepoolExecutor: Airflow's LocalExecutor on a pool whose parent never blocks on a pipe.

Select it with ``[core] executor = pipepool.airflow.PipepoolExecutor`` (or
``AIRFLOW__CORE__EXECUTOR``); install it with ``pip install 'pipepool[airflow]'``. The
user guide is ``docs/airflow.md``.

Airflow's LocalExecutor puts every workload on one shared pipe and reads outcomes from
another; a burst larger than both pipes deadlocks the scheduler in ``put()`` while its
workers block writing results (Airflow issue 70526). Here each workload is a task of a
``pipepool.LocalExecutor``: ``_process_workloads`` only appends to a queue, ``sync`` runs
one non-blocking round, and outcomes come back as events. Inside a worker the workload
runs exactly as in Airflow's LocalExecutor, through ``BaseExecutor.run_workload`` (the
task SDK's supervisor: ``supervise_task``, ``supervise_callback``,
``supervise_connection_test``), so logs, ``serve_logs`` and task states are Airflow's own.

What this adds to the upstream executor (each cites the Airflow issue it answers):

* a workload holds one of ``parallelism`` slots from the moment it is handed over until
  its outcome is read, and exactly ``parallelism`` workers serve them (56444, 54830);
* a worker that dies frees its slot and fails only its own workload, with the reason,
  and says when the kernel's OOM killer did it (43448, 55602);
* ``end()`` waits for running workloads, a second signal during that wait kills them;
  ``terminate()`` signals each workload's whole process group (47011);
* the GC is frozen while workers fork (Airflow PR 58365), and workers are recycled after
  ``[pipepool] max_tasks_per_child`` workloads or above ``max_rss_mib`` of memory.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import time
from collections.abc import Hashable, Sequence
from typing import Any

from airflow.executors.base_executor import BaseExecutor, get_execution_api_server_url

from . import worker as _worker
from .errors import TaskKilledError, signal_name
from .events import Event, State
from .executor import LocalExecutor

if not hasattr(BaseExecutor, "run_workload"):  # Airflow < 3.3 has no common entry point
    raise ImportError(
        "pipepool.airflow.PipepoolExecutor needs apache-airflow 3.3 or newer "
        "(BaseExecutor.run_workload); install it with: pip install 'pipepool[airflow]'"
    )

SECTION = "pipepool"  # the airflow.cfg section (AIRFLOW__PIPEPOOL__<OPTION> in the environment)
ROUND_WAIT = 0.2  # s end() waits per round for an outcome: short enough to notice signals
TERM_GRACE = 5.0  # s terminate() lets a SIGTERMed workload clean up before SIGKILL
GROUP_SCAN = 1.0  # s between scans for the process groups our workers' task runners lead:
# one pass over the process table, so that a worker's death can take its task's whole
# group along (its task runner sits in a group of its own, out of the worker's reach)


def _title_prefix(team_name: str | None) -> str:
    """The process title of a worker, as Airflow's LocalExecutor names its own."""
    team = f" [{team_name}]" if team_name else ""
    return f"airflow worker -- PipepoolExecutor{team}:"


# -- in the worker -----------------------------------------------------------------------


def _init_worker(title_prefix: str) -> None:
    """Per worker, once: the idle title, and a task runner that dies with its worker."""
    _set_title(f"{title_prefix} <idle>")
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
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != worker_pid:  # the worker died before prctl took effect
            os._exit(1)


def _run_workload(workload: Any, server: str, title_prefix: str, max_rss: int) -> int:
    """Run one workload the way Airflow's LocalExecutor does; in a pipepool worker."""
    try:
        return BaseExecutor.run_workload(
            workload,
            server=server,
            proctitle=f"{title_prefix} {workload.display_name}",
            subprocess_logs_to_stdout=True,
        )
    finally:
        _set_title(f"{title_prefix} <idle>")
        if max_rss and _rss_bytes() > max_rss:
            _worker.retire_after_task()  # exits after this outcome; a fresh one replaces it


def _set_title(title: str) -> None:
    if sys.platform == "darwin":  # Airflow skips it there too (not fork-safe)
        return
    with contextlib.suppress(ImportError):
        from setproctitle import setproctitle

        setproctitle(title)


def _rss_bytes(pid: int | None = None) -> int:
    """Resident memory of a process now (not its peak)."""
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open(f"/proc/{pid or 'self'}/statm") as f,
    ):
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    import psutil  # an Airflow dependency; used where /proc is missing (macOS)

    return psutil.Process(pid).memory_info().rss


# -- in the scheduler --------------------------------------------------------------------


def _oom_kills() -> int | None:
    """The kernel's count of OOM kills (memory cgroups included), or None if unknown."""
    with contextlib.suppress(OSError, ValueError), open("/proc/vmstat") as f:
        for line in f:
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return None


class PipepoolExecutor(BaseExecutor):
    """Run workloads in local pipepool workers: Airflow's LocalExecutor, deadlock-free.

    :param parallelism: how many workloads run at once (one worker each), must be > 0
    """

    is_local: bool = True
    is_mp_using_fork: bool
    supports_multi_team: bool = True
    serve_logs: bool = True
    supports_callbacks: bool = True
    supports_connection_test: bool = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not hasattr(self, "conf"):
            from airflow.configuration import conf

            self.conf = conf
        import multiprocessing

        self.is_mp_using_fork = multiprocessing.get_start_method() == "fork"
        self.max_tasks_per_child = self.conf.getint(SECTION, "max_tasks_per_child", fallback=0)
        self.max_rss_mib = self.conf.getint(SECTION, "max_rss_mib", fallback=0)
        self.gc_freeze = self.conf.getboolean(SECTION, "gc_freeze", fallback=True)
        self.term_grace = float(self.conf.get(SECTION, "term_grace", fallback=str(TERM_GRACE)))
        self.pool: LocalExecutor | None = None
        self._workloads: dict[Hashable, Any] = {}  # key -> workload, handed over to the pool
        self._oom_at: dict[Hashable, int | None] = {}  # key -> OOM-kill count when handed over
        self._groups: dict[int, set[int]] = {}  # worker pid -> process groups it started
        self._next_scan = 0.0

    # -- BaseExecutor -------------------------------------------------------------------

    def start(self) -> None:
        """Start the pool; with fork, all ``parallelism`` workers at once, GC frozen."""
        prefix = _title_prefix(self.team_name)
        self._server = get_execution_api_server_url(self.conf)
        self._prefix = prefix
        self.pool = LocalExecutor(
            self.parallelism,
            prefetch=1,  # a workload never waits behind another in a worker's pipe
            max_tasks_per_child=self.max_tasks_per_child or None,
            initializer=_init_worker,
            initargs=(prefix,),
        )
        self.pool.start()
        if self.is_mp_using_fork:
            # Like Airflow's LocalExecutor: fork every worker now, under one GC freeze.
            with self._gc_frozen(True):
                self.pool.prestart()

    def _process_workloads(self, workload_list: Sequence[Any]) -> None:
        """Hand workloads to the pool: appends to its queue, never blocks on a pipe."""
        pool = self._require_pool()
        max_rss = self.max_rss_mib * 1024 * 1024
        for workload in workload_list:
            key = workload.key
            removed = (
                self.queued_tasks.pop(key, None)
                or self.queued_callbacks.pop(key, None)
                or self.queued_connection_tests.pop(key, None)
            )
            if not removed:
                raise KeyError(f"Workload {key} was not found in any queue")
            self._workloads[key] = workload
            self._oom_at[key] = _oom_kills()
            # Its slot is taken from now until its outcome is read (BaseExecutor counts
            # open slots as parallelism - len(running)).
            self.running.add(key)
            pool.queue_call(key, _run_workload, (workload, self._server, self._prefix, max_rss))
        self._round()

    def sync(self) -> None:
        """One round: dispatch what fits, read outcomes into the event buffer."""
        if self.pool is not None:
            self._round()

    def end(self) -> None:
        """Wait for every running workload, then stop the workers. A signal during the
        wait (the scheduler's SIGINT or SIGTERM handler raising) kills them instead."""
        self.log.info(
            "Shutting down PipepoolExecutor; waiting for running tasks to finish. "
            "Signal again if you don't want to wait."
        )
        pool = self.pool
        if pool is None:
            return
        try:
            while pool.has_work():
                self._round(ROUND_WAIT)
            pool.end()
        except BaseException:
            self.log.warning("PipepoolExecutor: interrupted while ending; killing running tasks")
            self.terminate()
            raise
        self._read_events()
        self.pool = None

    def terminate(self) -> None:
        """Stop now: SIGTERM each running workload's process group, SIGKILL what is left
        after ``term_grace``; the workers go too, unfinished workloads fail."""
        pool = self.pool
        if pool is None:
            return
        import psutil

        workers = [p for p in map(_process, pool.worker_pids()) if p is not None]
        groups = set().union(*_task_groups([w.pid for w in workers]).values())
        _signal_groups(groups, signal.SIGTERM)
        # The supervisors (our workers) see their task runner exit and report its state.
        deadline = time.monotonic() + self.term_grace
        while any(_group_alive(g) for g in groups) and time.monotonic() < deadline:
            pool.sync(timeout=0.05)
        _signal_groups(groups, signal.SIGKILL)
        pool.terminate()
        psutil.wait_procs(workers, timeout=self.term_grace)
        self._read_events()
        self.pool = None

    def revoke_task(self, *, ti: Any) -> None:
        """Drop a workload the scheduler takes back: unqueued, or its worker killed."""
        key = ti.key
        self.queued_tasks.pop(key, None)
        self.running.discard(key)
        workload = self._workloads.pop(key, None)
        self._oom_at.pop(key, None)
        if workload is not None and self.pool is not None:
            if not self.pool.cancel(key):
                self.pool.kill(key)
            self.pool.get_event_buffer([key])  # no event for it: the scheduler said so

    # -- the pool's side ----------------------------------------------------------------

    def _round(self, timeout: float = 0.0) -> None:
        pool = self._require_pool()
        # A worker is forked inside the round when work is waiting and one is missing.
        may_fork = self.is_mp_using_fork and pool.has_work()
        if may_fork:
            stats = pool.stats()
            may_fork = stats["workers_alive"] < self.parallelism
        with self._gc_frozen(may_fork):
            pool.sync(timeout)
        self._read_events()
        now = time.monotonic()
        if now >= self._next_scan and self._workloads:
            self._next_scan = now + GROUP_SCAN
            self._groups = _task_groups(pool.worker_pids())

    def _read_events(self) -> None:
        if self.pool is None:
            return
        for key, event in self.pool.get_event_buffer().items():
            workload = self._workloads.get(key)
            if workload is None:
                continue  # revoked
            if event.state is State.RUNNING:
                if workload.running_state is not None:  # callbacks report RUNNING
                    self.change_state(key, workload.running_state, remove_running=False)
                continue
            del self._workloads[key]
            oom_at = self._oom_at.pop(key, None)
            groups = self._groups.pop(event.pid, set()) if event.pid else set()
            if isinstance(event.exception, _lost_error()):
                # The worker (the task's supervisor) died: its task runner died with it
                # (PR_SET_PDEATHSIG) but what the runner started may live on in its group.
                _signal_groups(groups, signal.SIGKILL)
            if event.state is State.SUCCESS:
                self.change_state(key, workload.success_state)
                continue
            reason = _failure_reason(event, oom_at)
            self.log.error("Workload %s failed: %s", key, reason)
            self.change_state(key, workload.failure_state, info=reason)

    @contextlib.contextmanager
    def _gc_frozen(self, active: bool):
        """Move every tracked object to the permanent generation while forking, so the
        children's GC never writes to (and copies) the pages they share with us."""
        if not (active and self.gc_freeze):
            yield
            return
        gc.freeze()
        try:
            yield
        finally:
            gc.unfreeze()

    def _require_pool(self) -> LocalExecutor:
        if self.pool is None:
            raise RuntimeError("PipepoolExecutor is not running: call start() first")
        return self.pool


def _failure_reason(event: Event, oom_at: int | None) -> str:
    """Why a workload failed, in words the scheduler's log and the event carry."""
    exc = event.exception
    name = type(exc).__name__
    sig = signal_name(getattr(exc, "exitcode", None))
    if sig == "SIGKILL" and not isinstance(exc, TaskKilledError):
        now = _oom_kills()
        if oom_at is not None and now is not None and now > oom_at:
            return (
                f"its worker (pid {event.pid}) was killed by the kernel's OOM killer "
                f"(out of memory: /proc/vmstat oom_kill rose from {oom_at} to {now} while it "
                "ran); only this workload failed. Give it more memory, lower parallelism, "
                "or set [pipepool] max_rss_mib to recycle workers that grow"
            )
        return (
            f"its worker (pid {event.pid}) was killed by SIGKILL from outside (no OOM kill "
            "was recorded by the kernel meanwhile); only this workload failed"
        )
    return f"{name}: {exc}"


def _process(pid: int) -> Any:
    import psutil

    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _lost_error() -> type[BaseException]:
    from .errors import WorkerLostError  # type: ignore[attr-defined]  # lazy, see errors

    return WorkerLostError


def _task_groups(worker_pids: list[int]) -> dict[int, set[int]]:
    """``{worker pid: process groups of its descendants}``, from one pass over the process
    table; our own group is never in it (the workers share it)."""
    import psutil

    own = os.getpgrp()
    wanted = set(worker_pids)
    if not wanted:
        return {}
    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info["ppid"]
        if ppid is not None:
            children.setdefault(ppid, []).append(proc.pid)
    groups: dict[int, set[int]] = {}
    for worker in wanted:
        found: set[int] = set()
        todo = list(children.get(worker, ()))
        while todo:
            pid = todo.pop()
            todo.extend(children.get(pid, ()))
            with contextlib.suppress(OSError):
                found.add(os.getpgid(pid))
        found.discard(own)
        if found:
            groups[worker] = found
    return groups


def _signal_groups(groups: set[int], sig: signal.Signals) -> None:
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except OSError:
        return False
    return True
