"""ClusterExecutor: LocalExecutor's scheduler-facing API on a Dask distributed cluster.

Data flow. The Client's IO thread does all the network work; the caller's thread owns
every piece of bookkeeping, and the two meet only at two deques (appends and pops of a
deque are atomic) and a wake-up flag::

    queue(key, fn, *args) ─► _queue ─► dispatch: cloudpickle, Client.map(_run_task) ─► scheduler
                                                                                          │
                                                               Dask worker: log "started",│
                                                               run, pickle the outcome ◄──┘
                                                                      │            │
    get_event_buffer() ◄── _events ◄── collect ◄── _starts ◄── topic handler ◄─────┘
                                           ▲                                         │
                                           └────── _outcomes ◄── gather (IO thread) ◄┘

``sync()`` is one round of named steps, as in LocalExecutor: collect (started messages and
outcomes that the IO thread already received), expire (tasks past their timeout) and
dispatch (one ``Client.map`` for everything queued). None of them waits for the network:
``Client.map`` hands its message to the IO thread, and results are fetched there.

Keys stay the caller's: each queued task gets its own Dask key (``pipepool-<token>-<tid>``),
so a key may be queued again once its terminal event was read (a key takes one task at a
time, as in LocalExecutor), and every task ends with exactly one terminal event however
often Dask runs it. Outcomes map as follows:

* the function returned: SUCCESS; it raised (BaseException included): FAILED with the
  exception, the worker's formatted traceback as its ``__cause__`` (``RemoteTraceback``);
* the worker died: Dask runs the task again elsewhere, up to the scheduler's
  ``distributed.scheduler.allowed-failures`` (3 by default); then it is FAILED with
  ``ClusterWorkerLostError`` (a ``WorkerLostError``) naming the last worker's address;
* ``cancel``: FAILED with ``concurrent.futures.CancelledError``, as in LocalExecutor;
* a timeout or ``kill``: FAILED with ``TaskTimeoutError`` or ``TaskKilledError``. Dask
  cannot stop a running thread, so (``kill_workers=True``, the default) the worker
  process is killed, as LocalExecutor does; a worker under a nanny (``dask worker``, a
  LocalCluster) is restarted by it.

Calls and outcomes are pickled with cloudpickle (what Dask itself uses): functions
defined in ``__main__``, lambdas and closures travel by value. ``pipepool`` must be
installed on every worker (the task wrapper lives in ``_remote``; the IO thread's
side is ``_link``; the steps of a round, the caller's side, are ``_round``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Hashable, Iterable
from concurrent.futures import CancelledError
from typing import Any

from .. import _checks, _signals
from .._api import wait_timeout
from .._cpus import available_cpus
from .._task import Task as _Task
from ..errors import TaskKilledError
from ..events import State
from ._link import CANCEL_SETTLE as CANCEL_SETTLE  # re-exported: the public names
from ._link import CLOSE_TIMEOUT, _import_distributed
from ._link import INSTALL_HINT as INSTALL_HINT
from ._link import KILL_TIMEOUT as KILL_TIMEOUT
from ._link import ClusterWorkerLostError as ClusterWorkerLostError
from ._link import _rebuild_cluster_lost as _rebuild_cluster_lost
from ._remote import STARTED_TOPIC, _ignore_sigint_plugin
from ._round import ClusterRound

CONNECT_TIMEOUT = 30.0  # s start() waits for the scheduler and for its first worker
WORKER_SATURATION = 1.0  # tasks a LocalCluster's scheduler hands a worker per thread: 1.0
# sends the next task only when one ends (LocalExecutor's prefetch=1), so a worker that
# dies takes only the tasks it was running along, not innocent ones queued behind them
# (Dask counts those as suspects too, and fails them after its retries). The price is a
# round trip per task: tiny tasks run ~6x faster with float("inf") (all sent at once)
WAIT_SLICE = 0.25  # s a sync(timeout) waits at most before the steps run again: bounds
# how late a timeout is noticed


class ClusterExecutor(ClusterRound):
    """Run callables on a Dask distributed cluster, scheduler style (LocalExecutor's API).

    ``address=None`` starts a ``LocalCluster`` on 127.0.0.1 (worker processes with one
    thread each, no dashboard) and ``options`` go to it (``n_workers``,
    ``threads_per_worker``, ...); otherwise ``address`` is a scheduler's
    (``tcp://host:8786``) and ``options`` go to ``distributed.Client``.

    ``running_events``: report RUNNING when a task starts (one small message per task
    through the scheduler; tasks with a timeout always send it, their clock starts then).
    ``kill_workers``: on a timeout or ``kill()``, kill the worker process running the task
    (its nanny starts a new one); False only reports and cancels, the call runs on.
    ``max_in_flight``: tasks handed to Dask at once (None: all; Dask queues them itself).
    ``worker_saturation`` (own LocalCluster only; a remote scheduler has its own
    ``distributed.scheduler.worker-saturation``): see ``WORKER_SATURATION``.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        running_events: bool = True,
        kill_workers: bool = True,
        max_in_flight: int | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        worker_saturation: float = WORKER_SATURATION,
        **options: Any,
    ) -> None:
        # Each by the rule of its kind, as on LocalExecutor (``pipepool._checks``).
        max_in_flight = _checks.count(max_in_flight, "max_in_flight", none=True)
        connect_timeout = _checks.seconds(connect_timeout, "connect_timeout", positive=True)
        worker_saturation = _checks.ratio(worker_saturation, "worker_saturation")
        _import_distributed()  # fail here, with the install hint, not at start()
        self.address = address
        self.options = options
        self.connect_timeout = connect_timeout
        self.worker_saturation = worker_saturation
        super().__init__(
            ("done", "failed", "lost", "killed_workers"),
            running_events=running_events,
            kill_workers=kill_workers,
            max_in_flight=max_in_flight,
        )
        self.parallelism = 0  # worker threads in the cluster, known once started

    # -- public API -------------------------------------------------------------------

    def start(self) -> None:
        """Start a LocalCluster (``address=None``) or connect to the scheduler."""
        if self._state != "new":
            raise RuntimeError(f"ClusterExecutor already {self._state}")
        distributed = _import_distributed()
        try:
            if self.address is None:
                options = {
                    "n_workers": available_cpus().workers,  # pipepool._cpus: quota-aware
                    "threads_per_worker": 1,
                    "processes": True,
                    "host": "127.0.0.1",
                    "dashboard_address": None,
                    **self.options,
                }
                import dask

                with dask.config.set(
                    {"distributed.scheduler.worker-saturation": self.worker_saturation}
                ):
                    self._cluster = distributed.LocalCluster(**options)
                self._client = distributed.Client(self._cluster, timeout=self.connect_timeout)
            else:
                self._client = distributed.Client(
                    self.address, timeout=self.connect_timeout, **self.options
                )
            if self._cluster is not None:
                # Its workers are our children, in our process group: a Ctrl-C at the
                # terminal reaches them too. Leave it to this process, as LocalExecutor's
                # workers do, which decides what happens to running work.
                self._client.register_plugin(_ignore_sigint_plugin())
            self._client.wait_for_workers(1, timeout=self.connect_timeout)
            info = self._client.scheduler_info()
            self.parallelism = sum(w.get("nthreads", 1) for w in info["workers"].values())
            self._client.subscribe_topic(STARTED_TOPIC, self._on_started)
        except BaseException:
            self._close_client()
            self._state = "ended"
            raise
        self._state = "started"

    def sync(self, timeout: float = 0.0) -> None:
        """One round: collect what the cluster reported, expire timeouts, dispatch.

        Never waits for the network. With ``timeout`` > 0, first waits up to that long
        for a report from the cluster (a start or an outcome).
        """
        self._require_started()
        timeout = wait_timeout(timeout)  # LocalExecutor's rule
        if timeout > 0 and not (self._starts or self._outcomes):
            self._wakeup.wait(min(timeout, self._wait_bound()))
        self._wakeup.clear()  # before collecting: a report after this sets it again
        deferred = None
        try:
            deferred = _signals.defer()
            self._collect()
            self._expire()
            self._dispatch()
        finally:
            _signals.undefer(deferred)

    def _dispatched(self) -> Iterable[_Task]:
        return self._inflight.values()

    def has_work(self) -> bool:
        """True while any task is queued or handed to Dask and not reported."""
        return bool(self._queue or self._inflight)

    def kill(self, key: Hashable) -> int:
        """Stop the started tasks of ``key``: each fails with ``TaskKilledError`` and (with
        ``kill_workers``) its worker process is killed. Returns how many."""
        self._require_started()
        doomed = [t for t in self._inflight.values() if t.key == key and t.started]
        deferred = None
        try:
            deferred = _signals.defer()
            for t in doomed:
                self._stop_task(
                    t, TaskKilledError(f"task {key!r} was killed on request (worker {t.address})")
                )
        finally:
            _signals.undefer(deferred)
        return len(doomed)

    def cancel(self, key: Hashable) -> int:
        """Cancel every dispatch of ``key`` not known to have started; returns how many
        are cancelled or being cancelled.

        Queued (not handed to Dask): FAILED with ``CancelledError`` now. Handed to Dask
        and no start message seen: Dask's ``Future.cancel()`` is asked (through the
        Client's IO thread); when Dask drops the task, it ends FAILED with
        ``CancelledError``, a round or so later. What this cannot guarantee: Dask's
        cancel is asynchronous (client, scheduler, worker), so a task may start on its
        worker meanwhile. If its start message comes before the cancel is settled, it
        ends with ``TaskKilledError`` (it started; Dask dropped its outcome); if it comes
        after, or start messages are off (``running_events=False`` and no timeout), it
        is reported cancelled though its call ran. Either way a call Dask had started
        runs on in its worker thread (Dask cannot stop one: ``kill`` kills the worker).
        A task that finished first reports as usual. Started dispatches: ``kill``.
        """
        self._require_started()
        deferred = None
        try:
            deferred = _signals.defer()
            count = self._cancel_queued_key(key)
            handed = [
                t
                for t in self._inflight.values()
                if t.key == key and not t.started and not t.cancelling
            ]
            for t in handed:
                t.cancelling = True
            if handed:
                self._control.append(
                    asyncio.run_coroutine_threadsafe(
                        self._cancel_when_known([t.future for t in handed]),
                        self._client.loop.asyncio_loop,
                    )
                )
            return count + len(handed)
        finally:
            _signals.undefer(deferred)

    def _shut_down(self) -> None:
        self._close_client()
        self._state = "ended"

    def terminate(self) -> None:
        """Stop now: unfinished tasks fail, ``TaskKilledError`` if they had started,
        ``CancelledError`` if not (queued, or handed to Dask with no start message seen;
        with start messages off, ``running_events=False`` and no timeout, a task handed
        over cannot be told apart and fails with ``TaskKilledError``); their Dask tasks
        are cancelled and, with ``kill_workers``, the workers running them killed; then
        disconnect."""
        if self._state != "started":
            self._state = "ended"
            return
        futures: list[Any] = []
        addresses: set[str] = set()
        deferred = None
        try:
            deferred = _signals.defer()
            self._collect()  # outcomes that arrived before the stop still count
            doomed = list(self._inflight.values())
            futures = [t.future for t in doomed]  # _finish drops them
            # An own LocalCluster goes down whole a moment later; only a shared one needs
            # its workers picked off.
            addresses = (
                {t.address for t in doomed if t.started and t.address}
                if self.kill_workers and self._cluster is None
                else set()
            )
            self._inflight.clear()
            for t in doomed:
                error: BaseException = TaskKilledError("the executor was terminated")
                if not t.started and (self.running_events or t.timeout is not None):
                    # Its start message would have come: it had not started (or had
                    # only just: the message is asynchronous). One cancellation rule.
                    error = CancelledError(f"task {t.key!r} cancelled: executor terminated")
                self._finish(t, State.FAILED, exception=error)
            self._cancel_queued()
            self._stats["killed_workers"] += len(addresses)
        finally:
            _signals.undefer(deferred)
        try:
            if futures:
                with contextlib.suppress(Exception):
                    self._client.sync(
                        self._cancel_and_kill, futures, addresses, callback_timeout=CLOSE_TIMEOUT
                    )
        finally:
            self._close_client()
            self._state = "ended"

    def stats(self) -> dict[str, Any]:
        """Counters from this executor's own state (no round trip to the scheduler); the
        worker counts are the Client's cached view (refreshed every few seconds)."""
        alive = self._cached_workers()
        running = sum(1 for t in self._inflight.values() if t.started)
        return {
            "workers_alive": alive,
            "workers_busy": min(running, alive),
            "workers_idle": max(alive - running, 0),
            "tasks_queued": len(self._queue),
            "tasks_running": len(self._inflight),
            "tasks_done": self._stats["done"],
            "tasks_failed": self._stats["failed"],
            "tasks_lost": self._stats["lost"],
            "worker_crashes": self._stats["lost"],
            "worker_recycles": 0,
            "workers_started": alive,
            "workers_killed": self._stats["killed_workers"],
            "last_progress": self._last_progress,
        }

    @property
    def client(self) -> Any:
        """The ``distributed.Client`` (None before ``start()`` and after the end)."""
        return self._client

    @property
    def scheduler_address(self) -> str | None:
        """The Dask scheduler's address (``tcp://host:port``) once connected, else None."""
        return self._client.scheduler.address if self._client is not None else None

    def wake(self) -> None:
        """Make a ``sync(timeout=...)`` waiting in another thread return now."""
        self._wakeup.set()

    def _wait_bound(self) -> float:
        return max(self._deadline_bound(WAIT_SLICE), 0.0)
