"""ClusterExecutor's dealings with Dask beyond the caller's bookkeeping: the coroutines
the Client's IO thread runs (fetch outcomes as tasks finish, hear start messages, cancel
and kill), closing the connection, and turning what Dask raised into the task's error.

``DaskLink`` is the base of ``ClusterExecutor`` (through ``ClusterRound``, the round's
steps): it declares the state the two threads share (the connection, two deques and a
wake-up flag, see ``pipepool.cluster``), and its methods are the IO thread's side of
that, kept apart from the caller's side that owns every piece of bookkeeping.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import uuid
from collections import deque
from collections.abc import Iterable
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING, Any

from .._api import SchedulerAPI
from ..errors import WorkerLostError
from ._remote import STARTED_TOPIC, _exit_worker

if TYPE_CHECKING:
    from .._task import Task as _Task

INSTALL_HINT = (
    "ClusterExecutor needs Dask's distributed package: "
    "pip install 'pipepool[dask]' (or pip install distributed)"
)
CANCEL_SETTLE = 0.1  # s between cancelling a task and killing its worker: the cancel
# travels on the client's batched stream (flushed every few ms), the kill on an RPC; were
# the kill first, the scheduler would run the killed task again on another worker
KILL_TIMEOUT = 5.0  # s a kill request to a worker may take (a live one answers in ms)
CLOSE_TIMEOUT = 10.0  # s end()/terminate() give the client and an own cluster to close
KNOWN_TIMEOUT = 5.0  # s cancel() waits for the scheduler to know a task before cancelling it


class ClusterWorkerLostError(WorkerLostError):
    """A Dask worker died while running the task, after the cluster's own retries.

    ``address`` is the last worker's address (``tcp://host:port``) and ``pid`` its pid on
    that machine, where known; ``exitcode`` is None (the scheduler does not learn it).
    """

    def __init__(self, message: str, *, address: str | None = None, pid: int | None = None) -> None:
        super().__init__(message, pid=pid, exitcode=None)
        self.address = address

    def __reduce__(self):
        return (_rebuild_cluster_lost, (str(self), self.address, self.pid))


def _rebuild_cluster_lost(
    message: str, address: str | None, pid: int | None
) -> ClusterWorkerLostError:
    return ClusterWorkerLostError(message, address=address, pid=pid)


class DaskLink(SchedulerAPI):
    """Base of ``ClusterExecutor``: the connection, the IO thread's side, and its end."""

    def __init__(self, counters: Iterable[str]) -> None:
        super().__init__(counters)
        self._client: Any = None  # distributed.Client, from start() to the end
        self._cluster: Any = None  # the LocalCluster we started, if any
        self._token = uuid.uuid4().hex[:12]  # this executor's Dask keys and start topic
        # Written by the Client's IO thread, read by the caller's: (tid, address, pid) of
        # each started message, (tid, ok, value) of each outcome, and the wake-up flag.
        self._starts: deque[tuple[int, str, int]] = deque()
        self._outcomes: deque[tuple[int, bool, Any]] = deque()
        self._wakeup = threading.Event()
        # Cancels and kills under way on the IO thread: the client closes only after them,
        # or a timed-out task would run on in a worker nobody killed.
        self._control: list[concurrent.futures.Future] = []

    def _lost_error(self, t: _Task, error: BaseException) -> BaseException:
        distributed = _import_distributed()
        if isinstance(error, distributed.KilledWorker):
            last = error.last_worker
            address = getattr(last, "address", None) or t.address
            pid = getattr(last, "pid", None) or t.pid
            lost = ClusterWorkerLostError(
                f"task {t.key!r}: {error.allowed_failures + 1} Dask workers died while "
                f"running it, the last {address} (pid {pid}); the task may crash its "
                "interpreter (segfault, os._exit) or need more memory than a worker may "
                "use (see the workers' logs)",
                address=address,
                pid=pid,
            )
        elif isinstance(error, CancelledError):
            lost = ClusterWorkerLostError(
                f"task {t.key!r} was cancelled by the cluster ({error}); was the scheduler "
                "restarted or the connection to it lost?",
                address=t.address,
                pid=t.pid,
            )
        else:
            lost = ClusterWorkerLostError(
                f"task {t.key!r}: its outcome could not be fetched from the cluster "
                f"({type(error).__name__}: {error})",
                address=t.address,
                pid=t.pid,
            )
        lost.__cause__ = error
        return lost

    async def _track(self, tids: list[int], futures: list[Any]) -> None:
        """Fetch outcomes as tasks finish, those ready together in one gather; hand them
        to the caller's thread."""
        distributed = _import_distributed()
        tid_of = {f.key: tid for tid, f in zip(tids, futures, strict=True)}
        done = distributed.as_completed(futures, loop=self._client.loop)
        # From here on only as_completed holds a future, until it yields it: the key is
        # released as soon as its outcome is here, so a worker that dies later holds no
        # result that Dask would compute again (running the task twice).
        futures.clear()
        async for first in done:
            ready = [first]
            while done.has_ready():
                ready.append(next(done))  # returns at once: it is ready
            await self._fetch(ready, tid_of)

    async def _fetch(self, ready: list[Any], tid_of: dict) -> None:
        finished = [f for f in ready if f.status == "finished"]
        if len(finished) > 1:
            try:
                values = await self._client.gather(finished, asynchronous=True)
            except BaseException:
                pass  # one of them went missing meanwhile: one by one below
            else:
                for f, value in zip(finished, values, strict=True):
                    self._outcomes.append((tid_of[f.key], True, value))
                self._wakeup.set()
                gathered = {f.key for f in finished}
                ready = [f for f in ready if f.key not in gathered]
        for f in ready:
            try:
                (value,) = await self._client.gather([f], asynchronous=True)
                outcome = (tid_of[f.key], True, value)
            except BaseException as exc:  # KilledWorker, a cancel, a lost connection
                outcome = (tid_of[f.key], False, exc)
            self._outcomes.append(outcome)
            self._wakeup.set()

    def _on_started(self, event: tuple[float, Any]) -> None:
        _timestamp, (token, tid, address, pid) = event
        if token == self._token:  # not another executor's on the same cluster
            self._starts.append((tid, address, pid))
            self._wakeup.set()

    async def _cancel_and_kill(self, futures: list[Any], addresses: Iterable[str]) -> None:
        await self._client.cancel(futures, asynchronous=True)
        addresses = list(addresses)
        if addresses:
            await asyncio.sleep(CANCEL_SETTLE)
            # Bounded: a worker that is gone already (its task was being retried elsewhere)
            # is retried by distributed's connect() up to its 30 s connect timeout.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(
                    self._client.run(
                        _exit_worker, workers=addresses, on_error="ignore", asynchronous=True
                    ),
                    KILL_TIMEOUT,
                )

    async def _cancel_when_known(self, futures: list[Any]) -> None:
        """Dask's cancel of ``futures``, once the scheduler knows their keys: it ignores
        a key it has not seen, and it handles a cancel at once but a new graph after
        deserializing it, so a cancel sent right after ``Client.map`` can overtake the
        graph and the task would run. Bounded: a key never seen is cancelled anyway."""
        keys = [f.key for f in futures]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + KNOWN_TIMEOUT
        with contextlib.suppress(Exception):  # a lost connection: cancel regardless
            while loop.time() < deadline:
                states = await self._client.scheduler.get_task_status(keys=keys)
                if all(states.get(key) is not None for key in keys):
                    break
                await asyncio.sleep(0.005)
        await self._client.cancel(futures, asynchronous=True)

    def _cached_workers(self) -> int:
        client = self._client
        if client is None:
            return 0
        identity = getattr(client, "_scheduler_identity", None) or {}
        workers = identity.get("workers")
        if workers:
            return len(workers)
        return int(identity.get("n_workers", 0) or 0)

    def _close_client(self) -> None:
        client, cluster = self._client, self._cluster
        try:
            if self._control:
                concurrent.futures.wait(self._control, timeout=CLOSE_TIMEOUT)
                self._control.clear()
            if client is not None:
                with contextlib.suppress(Exception):
                    client.unsubscribe_topic(STARTED_TOPIC)
                client.close(timeout=CLOSE_TIMEOUT)
        finally:
            if cluster is not None:
                cluster.close(timeout=CLOSE_TIMEOUT)
            self._client = self._cluster = None


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return distributed
