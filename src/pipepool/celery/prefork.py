"""``TaskPool``: a Celery worker pool that runs tasks in pipepool's LocalExecutor.

Select it as any pool Celery does not ship (docs/celery.md)::

    CELERY_CUSTOM_WORKER_POOL=pipepool.celery.prefork:TaskPool celery -A proj worker -P custom
    app.conf.worker_pool = "pipepool.celery.prefork:TaskPool"
    app.Worker(pool_cls=TaskPool)

The module's name holds "prefork" on purpose: Celery's Django fix-up closes Django's
database connections in each child only for a pool whose module name contains it
(``celery/fixups/django.py``), as it does for Celery's own prefork pool, which this one
replaces row by row (Celery's ``BasePool`` contract, and prefork's behaviour: every child
runs Celery's ``process_initializer``; soft and hard time limits from the accept;
``max_tasks_per_child``, ``max_memory_per_child``; revoke with terminate; grow, shrink,
autoscale and ``pool_restart``; warm and cold shutdown; the worker's semaphore).

Importing this module imports Celery; ``import pipepool`` never does.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.concurrency.base import BasePool

from .. import __version__
from ._drive import HubDriver, Slots, ThreadDriver
from ._jobs import Job
from ._pool import PoolCore, signal_number
from ._versions import require_supported_celery

__all__ = ["TaskPool"]

require_supported_celery()
log = logging.getLogger("pipepool.celery")

START_METHOD_SETTING = "pipepool_start_method"
"""The Celery setting that picks the children's start method ("fork", "forkserver" or
"spawn"); unset, it is "fork", or "spawn" where Celery asks for no forking (Celery 5.7's
``worker_pool_start_method = "spawn"``), as for Celery's prefork pool."""


class TaskPool(BasePool):
    """Celery's prefork pool, on pipepool: a parent that never blocks on a pipe.

    Celery builds it (``limit``: the concurrency; ``options``: what the worker's Pool
    step passes: time limits, ``maxtasksperchild``, ``max_memory_per_child``, the
    semaphore, ``threads``); ``TaskPool.info`` is what ``celery inspect stats`` shows
    under ``pool``, its ``implementation`` naming this class.
    """

    uses_semaphore = True  # the worker's semaphore: released once per job that ends
    task_join_will_block = True
    is_green = False

    app: Any  # set by BasePool.__init__ (the worker's app)
    _core: PoolCore | None = None
    _driver: HubDriver | ThreadDriver | None = None

    # -- starting ----------------------------------------------------------------------

    def on_start(self) -> None:
        """Start the executor and its children (before any task, as prefork does), and,
        for Celery's blocking loop, the thread that drives it."""
        options = self.options
        app = self.app
        if app is None:
            from celery import current_app

            app = self.app = current_app
        initargs = options.get("initargs") or (app, None)
        threads = options.get("threads", True)
        semaphore = options.get("semaphore")
        if threads and self.putlocks:
            semaphore = Slots(self.limit)  # billiard's put lock: apply waits for a child
        self.start_method = self._start_method()
        core = self._core = PoolCore(
            self.limit,
            app=app,
            hostname=initargs[1],
            start_method=self.start_method,
            max_tasks_per_child=options.get("maxtasksperchild"),
            max_memory_per_child=options.get("max_memory_per_child"),
            soft_timeout=options.get("soft_timeout"),
            timeout=options.get("timeout"),
            semaphore=semaphore,
        )
        core.executor.start()
        core.executor.sync()  # the children start now
        if threads:
            driver = ThreadDriver(core)
            self._driver = driver
            driver.start()
        else:
            self._driver = HubDriver(core)  # registered with the hub by the worker

    def _start_method(self) -> str:
        chosen = None
        if self.app is not None:
            chosen = self.app.conf.get(START_METHOD_SETTING)
        if chosen:
            if chosen not in ("fork", "forkserver", "spawn"):
                raise ValueError(
                    f"{START_METHOD_SETTING} must be 'fork', 'forkserver' or 'spawn', "
                    f"not {chosen!r}"
                )
            return str(chosen)
        return "fork" if self.forking_enable else "spawn"

    def did_start_ok(self) -> bool:
        """False once the children's set-up kept failing (the pool is broken)."""
        core = self._core
        return core is not None and core.executor.broken is None

    def register_with_event_loop(self, loop: Any) -> None:
        """Watch the pool's pipes from the hub, and time its deadlines there (called
        again after a lost connection: the hub was reset)."""
        if isinstance(self._driver, HubDriver):
            self._driver.register(loop)

    # -- work ----------------------------------------------------------------------------

    def on_apply(
        self,
        target: Any,
        args: Any = None,
        kwargs: Any = None,
        waitforslot: bool | None = None,
        **options: Any,
    ) -> Job | None:
        """Queue one job (Celery's ``apply_async``): ``callback``, ``accept_callback``,
        ``timeout_callback``, ``error_callback``, ``soft_timeout``, ``timeout``,
        ``correlation_id`` and ``callbacks_propagate`` as Celery passes them. Returns the
        job (Celery keeps a weak reference to revoke it), or None once the pool closes."""
        core, driver = self._core, self._driver
        if core is None or driver is None or core.closing:
            return None
        if waitforslot and isinstance(core.semaphore, Slots):
            core.semaphore.acquire(lambda: not core.closing)
        job = core.make_job(args, self._terminate_unaccepted, **options)
        driver.apply(job, target, args, kwargs)
        return job

    def _terminate_unaccepted(self, job: Job) -> None:
        core, driver = self._core, self._driver
        if core is not None and driver is not None:
            driver.call(lambda: core.cancel(job))
            driver.ask_step()

    def terminate_job(self, pid: int, signal: int | str | None = None) -> None:
        """Revoke with terminate, once accepted: signal (SIGTERM unless told) the child
        ``pid`` if it still runs that job; the job ends with ``Terminated``."""
        core, driver = self._core, self._driver
        if core is None or driver is None:
            return
        signum = signal_number(signal)
        driver.call(lambda: core.terminate_job(pid, signum))

    def flush(self) -> None:
        """Celery's connection is gone, or the worker stops: take back every job not
        accepted yet (the broker delivers them again)."""
        core, driver = self._core, self._driver
        if core is not None and driver is not None:
            driver.call(core.flush)
            driver.ask_step()

    def maintain_pool(self, *args: Any, **kwargs: Any) -> None:
        """A step now: children the pool wants are started (the autoscaler calls this)."""
        core, driver = self._core, self._driver
        if core is not None and driver is not None and not core.closing:
            driver.call(core.step)
            if isinstance(driver, HubDriver):
                driver.update()

    def grow(self, n: int = 1) -> None:
        """``n`` more children (autoscale, ``pool_grow``); the semaphore grows with it."""
        core, driver = self._core, self._driver
        if core is None or driver is None:
            return

        def grow() -> None:
            core.executor.grow(n)
            if core.semaphore is not None:
                core.semaphore.grow(n)
            core.step()

        driver.call(grow)
        if isinstance(driver, HubDriver):
            driver.update()

    def shrink(self, n: int = 1) -> None:
        """Stop up to ``n`` idle children (autoscale, ``pool_shrink``); ValueError when
        every child is busy, as billiard raises (the autoscaler tries again later)."""
        core, driver = self._core, self._driver
        if core is None or driver is None:
            return

        def shrink() -> int:
            stopped = core.executor.shrink(n)
            if stopped and core.semaphore is not None:
                core.semaphore.shrink(stopped)
            return stopped

        if not driver.call(shrink):
            raise ValueError("Can't shrink pool. All processes busy!")
        driver.ask_step()

    def restart(self) -> None:
        """``pool_restart``: every child is replaced, a busy one once its task ends."""
        core, driver = self._core, self._driver
        if core is None or driver is None:
            return
        driver.call(core.executor.recycle)
        driver.ask_step()

    # -- the end -------------------------------------------------------------------------

    def on_close(self) -> None:
        """No more applies (the worker is stopping)."""
        core = self._core
        if core is not None:
            core.closing = True

    def on_stop(self) -> None:
        """Warm shutdown: every job that was accepted ends and is delivered, then the
        children stop. On the hub, its timers (heartbeats) keep firing meanwhile."""
        core, driver = self._core, self._driver
        if core is None or driver is None:
            return
        core.closing = True
        if isinstance(driver, ThreadDriver):
            driver.stop("warm")
        else:
            hub = driver.hub
            driver.unregister()
            core.drain(0.5, running=lambda: _fire_hub(hub))
            _fire_hub(hub)
        core.end()
        self._core = self._driver = None

    def on_terminate(self) -> None:
        """Cold shutdown: the children end now; jobs still running get no callback (their
        messages are not acknowledged: the broker delivers them again)."""
        core, driver = self._core, self._driver
        if core is None:
            return
        if isinstance(driver, ThreadDriver):
            driver.stop("cold", 10.0)
        elif isinstance(driver, HubDriver):
            driver.unregister()
        core.terminate()
        self._core = self._driver = None

    # -- what the worker shows -----------------------------------------------------------

    def _get_info(self) -> dict[str, Any]:
        info = super()._get_info()
        core, driver = self._core, self._driver
        if core is None or driver is None:
            return info
        ex = core.executor

        def read() -> dict[str, Any]:
            stats = ex.stats()
            stats.pop("last_progress", None)  # a monotonic time: nothing to a reader
            semaphore = core.semaphore
            return {
                "max-concurrency": self.limit,
                "processes": ex.worker_pids(),
                "max-tasks-per-child": ex.max_tasks_per_child or "N/A",
                "put-guarded-by-semaphore": self.putlocks,
                "timeouts": (core.soft_timeout or 0, core.timeout or 0),
                "writes": "N/A",
                "pipepool": {
                    "version": __version__,
                    "loop": ex.implementation,
                    "start-method": ex.start_method,
                    "driven-by": "hub" if isinstance(driver, HubDriver) else "thread",
                    "semaphore": (
                        None
                        if semaphore is None
                        else {"value": semaphore.value, "initial": semaphore.initial_value}
                    ),
                    "jobs": len(core.jobs),
                    "stats": stats,
                },
            }

        info.update(driver.call(read))
        return info

    @property
    def num_processes(self) -> int:
        """The children the pool runs (its concurrency, as grow and shrink change it)."""
        core = self._core
        return core.executor.parallelism if core is not None else self.limit


def _fire_hub(hub: Any) -> bool:
    """While the pool drains on the hub's thread: the hub's timers (heartbeats), and the
    acknowledgements the callbacks queued (Celery 5.7's own helper, where it has it)."""
    if hub is None:
        return True
    try:
        hub.fire_timers()
        from celery.concurrency import prefork

        run_acks = getattr(prefork, "_run_ready_callbacks", None)
        if run_acks is not None:
            run_acks(hub)
    except Exception:
        log.warning("pipepool: a hub timer failed while the pool drained", exc_info=True)
    return True
