"""PipepoolExecutor: Airflow's LocalExecutor on a pool whose parent never blocks on a pipe.

Airflow's LocalExecutor puts every workload on one shared pipe and reads outcomes from
another; a burst larger than both pipes deadlocks the scheduler in ``put()`` while its
workers block writing results (Airflow issue 70526). Here each workload is a task of a
``pipepool.LocalExecutor``: ``_process_workloads`` only appends to its queue, each round
writes what fits and reads what came, and outcomes come back as events. In a worker the
workload runs exactly as in Airflow's LocalExecutor, through ``BaseExecutor.run_workload``
(the task SDK's supervisor), so logs, ``serve_logs`` and task states are Airflow's own.

What this adds to the upstream executor (each cites the Airflow issue it answers):

* exactly ``parallelism`` workers run workloads; a workload holds a slot from hand-over to
  outcome, plus ``queue_ahead`` workloads may wait in the scheduler's memory (never in a
  pipe) so a worker that finishes starts the next one at once (56444, 54830);
* a worker that dies frees its slot and fails only its own workload, with the reason,
  and says when the kernel's OOM killer did it (43448, 55602);
* ``end()`` waits for running workloads, a second signal during that wait kills them;
  ``terminate()`` signals each workload's whole process group (47011);
* the GC is frozen while workers fork (Airflow PR 58365), and workers are recycled after
  ``[pipepool] max_tasks_per_child`` workloads or above ``max_rss_mib`` of memory;
* a workload queued again while its key still runs (or was revoked and has not ended)
  waits in ``queued_tasks`` for that run's end instead of running twice under one key.

Threads: the scheduler's, and a driver that runs a round every ``DRIVE_INTERVAL`` while
workloads wait for a worker (so the next one starts without waiting for the scheduler's
next loop). Every use of the pool holds ``_lock``; only the scheduler's thread touches
BaseExecutor's state (``running``, ``event_buffer``).

This module is what Airflow calls (BaseExecutor's methods, the ``[pipepool]`` options);
the pool's side, rounds, the driver and events into states, is ``_rounds.py``, the base
class; what differs per workload kind and version (keys, states) is ``_workloads.py``.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time
from collections.abc import Hashable, Sequence
from typing import Any

from airflow.configuration import conf as global_conf
from airflow.executors import workloads
from airflow.executors.base_executor import BaseExecutor

from .. import _checks
from ..errors import DuplicateKeyError
from ..executor import LocalExecutor
from . import _procs, _versions
from ._rounds import DRIVE_INTERVAL as DRIVE_INTERVAL  # re-exported: the public names
from ._rounds import GROUP_SCAN as GROUP_SCAN
from ._rounds import PoolRounds
from ._versions import V3_1, V3_2, V3_3
from ._worker import init_worker, run_workload, title_prefix
from ._workloads import _execution_api_server_url, _key
from .provider import OPTIONS, SECTION

_versions.check()  # Airflow 2.x, or no compiled loop: an ImportError that says so

DEPRECATED_IN_3_4 = ("trigger_tasks", "order_queued_tasks_by_priority")
"""BaseExecutor methods Airflow 3.4 turns into deprecation shims (overriding one warns):
PipepoolExecutor overrides none of them (tests/airflow_face assert it), on any version."""
ROUND_WAIT = 0.2  # s end() waits per round for an outcome: short enough to notice signals
TERM_GRACE = 5.0  # s terminate() lets a SIGTERMed workload clean up before SIGKILL


class PipepoolExecutor(PoolRounds):
    """Run workloads in local pipepool workers: Airflow's LocalExecutor, deadlock-free.

    One class for Airflow 3.0 through 3.3 (``_versions`` gates what differs). Every
    argument goes to BaseExecutor as given (``parallelism``; ``team_id`` on 3.0,
    ``team_name`` from 3.1).

    :param parallelism: how many workloads run at once (one worker each), must be > 0
    """

    is_local: bool = True
    # Two team executors in one scheduler each have their own pool, workers, driver and
    # queues; what is process-wide is safe to share (see ``_gc_frozen`` and
    # docs/airflow.md, "Multi-team").
    supports_multi_team: bool = True
    serve_logs: bool = True
    supports_callbacks: bool = V3_2  # ExecuteCallback workloads exist from 3.2
    supports_connection_test: bool = V3_3  # TestConnection workloads exist from 3.3

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # A parallelism given is checked before BaseExecutor sees it: from 3.3 it refuses
        # 0 itself, in words that do not name the setting.
        given = kwargs.get("parallelism", args[0] if args else None)
        if given is not None:
            _checks.count(given, "[core] parallelism")
        super().__init__(*args, **kwargs)
        if not V3_1:  # 3.0's BaseExecutor has no per-team config: the global one
            self.conf = global_conf
        self.team = self.team_name if V3_1 else self.team_id
        self.is_mp_using_fork = multiprocessing.get_start_method() == "fork"
        # Checked here, by the rules the pool checks its own arguments by
        # (``pipepool._checks``), not at start() or in a worker: [core] parallelism is
        # the pool's (one worker a slot: no "0 for unlimited"), the rest [pipepool]'s.
        _checks.count(self.parallelism, "[core] parallelism")
        self.max_tasks_per_child = _checks.count(
            int(self._option("max_tasks_per_child", "getint")),
            "[pipepool] max_tasks_per_child",
            minimum=0,
        )
        self.max_rss_mib = _checks.count(
            int(self._option("max_rss_mib", "getint")), "[pipepool] max_rss_mib", minimum=0
        )
        ahead = self._option("queue_ahead", "get")
        self.queue_ahead = _checks.count(
            self.parallelism if ahead in (None, "") else int(ahead),
            "[pipepool] queue_ahead",
            minimum=0,
        )
        self.gc_freeze = bool(self._option("gc_freeze", "getboolean"))
        self.term_grace = _checks.seconds(
            float(self._option("term_grace", "getfloat")), "[pipepool] term_grace"
        )
        self._deferred: set[Hashable] = set()  # queued again while the pool holds the key

    def _option(self, name: str, kind: str) -> Any:
        """A ``[pipepool]`` option through Airflow's config: this executor's (its team's)
        where that has the typed getter (3.1's has only ``get``/``getboolean``), the
        global one otherwise; the provider's default when unset."""
        conf = self.conf if hasattr(self.conf, kind) else global_conf
        default = OPTIONS[name]["default"]
        return getattr(conf, kind)(SECTION, name, fallback="" if default is None else default)

    def _queues(self) -> tuple[dict[Hashable, Any], ...]:
        """The queues of the workload kinds this Airflow has (tasks first): a queue a
        version lacks is never read."""
        queues: tuple[dict[Hashable, Any], ...] = (self.queued_tasks,)
        if V3_2:
            queues += (self.queued_callbacks,)
        if V3_3:
            queues += (self.queued_connection_tests,)
        return queues

    # -- BaseExecutor -------------------------------------------------------------------

    def start(self) -> None:
        """Start the pool; with fork, all ``parallelism`` workers at once, GC frozen."""
        self._prefix = title_prefix(self.team)
        self._server = _execution_api_server_url(self.conf)
        self.pool = LocalExecutor(
            self.parallelism,
            prefetch=1,  # a workload never waits behind another in a worker's pipe
            max_tasks_per_child=self.max_tasks_per_child or None,
            initializer=init_worker,
            initargs=(self._prefix,),
        )
        self.pool.start()
        if self.is_mp_using_fork:
            # Like Airflow's LocalExecutor: fork every worker now, under one GC freeze.
            with self._gc_frozen(True):
                self.pool.prestart()
        if self.queue_ahead:
            self._stop.clear()
            self._driver = threading.Thread(
                target=self._drive, name="pipepool-airflow-driver", daemon=True
            )
            self._driver.start()

    def queue_workload(self, workload: Any, session: Any = None) -> None:
        """Queue a workload of a kind this Airflow has. Overridden on every version:
        Airflow 3.0's scheduler hands workloads only to executors that override it."""
        if isinstance(workload, workloads.ExecuteTask):
            self.queued_tasks[_key(workload)] = workload
        elif V3_2 and isinstance(workload, workloads.ExecuteCallback):
            self.queued_callbacks[_key(workload)] = workload
        elif V3_3 and isinstance(workload, workloads.TestConnection):
            self.queued_connection_tests[_key(workload)] = workload
        else:
            raise ValueError(
                f"Un-handled workload kind {type(workload).__name__!r} in {type(self).__name__}"
            )

    @property
    def slots_available(self) -> int:
        """Workloads the scheduler may hand over now: ``queue_ahead`` beyond running."""
        return super().slots_available + self.queue_ahead

    @property
    def slots_occupied(self) -> int:
        """What counts against ``[core] parallelism`` in the scheduler: the workloads held,
        less the ``queue_ahead`` that may wait without running (the scheduler caps what it
        queues at parallelism minus this; without it nothing would ever wait ahead)."""
        return max(0, super().slots_occupied - self.queue_ahead)

    def _process_workloads(self, workload_list: Sequence[Any]) -> None:
        """Hand workloads to the pool: appends to its queue, never blocks on a pipe."""
        pool = self._require_pool()
        max_rss = self.max_rss_mib * 1024 * 1024
        for workload in workload_list:
            key = _key(workload)
            queued = next((q for q in self._queues() if key in q), None)
            if queued is None:
                raise KeyError(f"Workload {key} was not found in any queue")
            try:
                with self._lock:
                    pool.queue_call(
                        key,
                        run_workload,
                        (workload, self._server, self._prefix, max_rss),
                        exclusive=True,  # one run per key: refused while it has one
                    )
            except DuplicateKeyError:
                # The pool still holds this key: it runs (or was revoked and its end is not
                # in yet). Two runs under one key would report twice; the new one stays
                # queued here and goes at a later heartbeat, once the first one's outcome is
                # read, as BaseExecutor once did with keys still in ``running``.
                if key not in self._deferred:
                    self._deferred.add(key)
                    self.log.warning(
                        "Workload %s is still running; queued again, it waits for that run's end",
                        key,
                    )
                continue
            self._deferred.discard(key)
            del queued[key]
            self._workloads[key] = workload
            # Its slot is taken from now until its outcome is read (BaseExecutor counts
            # open slots as parallelism - len(running)).
            self.running.add(key)
        self._round()

    def _hand_over_ahead(self) -> None:
        """``queue_ahead``: BaseExecutor's heartbeat hands over what fits in
        ``parallelism``; this hands over up to ``queue_ahead`` more, in the order the
        heartbeat would (callbacks first, then tasks by priority), to wait in the pool's
        queue. Done here, in ``sync()``, rather than by widening ``trigger_tasks``, which
        Airflow 3.4 deprecates."""
        room = self.parallelism + self.queue_ahead - len(self.running)
        if room <= 0 or not any(self._queues()):
            return
        chosen = [w for _, w in self._next_workloads(room) if _key(w) not in self._deferred]
        if chosen:
            self._process_workloads(chosen)

    def _next_workloads(self, n: int) -> list[tuple[Hashable, Any]]:
        """The next ``n`` queued workloads in the heartbeat's own order."""
        if V3_2:
            return list(self._get_workloads_to_schedule(n))
        return BaseExecutor.order_queued_tasks_by_priority(self)[:n]

    def sync(self) -> None:
        """One round: hand over ``queue_ahead``, dispatch what fits, read outcomes into
        the event buffer."""
        if self.pool is not None:
            self._hand_over_ahead()
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
            self._stop_driver()
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
        self._stop_driver()
        import psutil

        workers = _procs.processes(pool.worker_pids())
        groups = set().union(*_procs.task_groups([w.pid for w in workers]).values())
        _procs.signal_groups(groups, signal.SIGTERM)
        # The supervisors (our workers) see their task runner exit and report its state.
        deadline = time.monotonic() + self.term_grace
        while any(_procs.group_alive(g) for g in groups) and time.monotonic() < deadline:
            pool.sync(timeout=0.05)
        _procs.signal_groups(groups, signal.SIGKILL)
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
        if workload is not None and self.pool is not None:
            with self._lock:
                if not self.pool.cancel(key):
                    self.pool.kill(key)
                self.pool.get_event_buffer([key])  # no event for it: the scheduler said so
