"""What runs in a pool worker on Celery's behalf: the worker's set-up (Celery's own
``process_initializer``, then the signals a prefork child has), and each job.

A prefork child, as billiard sets it up and as this one is set up too:

* ``process_initializer(app, hostname)`` runs once per child, under every start method:
  Celery's own function, so ``worker_process_init`` fires, logging is set up, the task
  registry is the app's and each task's tracer is built (the fast tracer's registry too:
  under spawn and forkserver the child is a fresh interpreter, which Celery recognises by
  ``FORKED_BY_MULTIPROCESSING``, set here first as billiard's spawn children have it);
* SIGUSR1 raises ``SoftTimeLimitExceeded`` in the running task: the parent sends it at the
  soft time limit. Only in a task, and only once that task has run for its limit: a
  signal the parent sent for a task that ended since cannot land in the next one;
* SIGTERM, SIGHUP and SIGQUIT end the process as they would by default, after a running
  task has unwound (``SystemExit`` raised in it, so its ``finally`` blocks and context
  managers run); its outcome is not sent, so the parent sees the worker killed by that
  signal (``revoke(terminate=True)`` then reports ``Terminated``);
* ``worker_process_shutdown`` fires when the child exits on its own (recycled, stopped).

After each job, with ``max_memory_per_child`` (KiB), the child retires once the job's
outcome is sent if its resident memory is above it, as billiard's children do (its
``mem_rss``: the same measure as prefork's).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from ..worker import retire_after_task

log = logging.getLogger("pipepool.celery")

# The signals that end a child, running task unwound first (billiard's default set: its
# ``TERMSIGS_DEFAULT`` but SIGUSR1, which is the soft time limit's here as there).
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
SOFT_LIMIT_SIGNAL = signal.SIGUSR1  # billiard's SIG_SOFT_TIMEOUT
EARLY = 0.001  # s: a soft-limit signal this close before the limit still counts (clocks)


class _Running:
    """The job this child runs now, as the signal handlers need it."""

    __slots__ = ("began", "ending", "soft")

    def __init__(self) -> None:
        self.began = 0.0  # time.monotonic() when it began; 0.0 between jobs
        self.soft: float | None = None  # its soft time limit, in s
        self.ending = 0  # the ending signal that unwinds it (0: none)


_running = _Running()


def init(app: Any, hostname: str | None, start_method: str) -> None:
    """The pool's initializer: a prefork child's set-up (see the module docstring)."""
    if start_method != "fork":
        # A fresh interpreter: Celery sets the trace optimisations up again where this
        # says so, and binds tasks as billiard's spawn children do (both before the task
        # modules are imported, which process_initializer does).
        os.environ["FORKED_BY_MULTIPROCESSING"] = "1"
        from celery.app import base

        base.USING_EXECV = True
    from celery.concurrency.prefork import process_destructor, process_initializer

    process_initializer(app, hostname)
    # process_initializer resets these to their defaults: the pool's meaning, after it.
    signal.signal(SOFT_LIMIT_SIGNAL, _on_soft_limit)
    for signum in ENDING_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # billiard leaves ignored ones
            signal.signal(signum, _on_ending)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the Celery worker's
    import multiprocessing.util

    # A worker that exits on its own (recycled, stopped) runs multiprocessing's exit
    # function, which runs this: worker_process_shutdown, as billiard's children send it.
    multiprocessing.util.Finalize(None, process_destructor, args=(os.getpid(), 0), exitpriority=10)


def _on_soft_limit(signum: int, frame: Any) -> None:
    """SIGUSR1: the running task's soft time limit is up (nothing between jobs)."""
    soft, began = _running.soft, _running.began
    if soft is not None and began and time.monotonic() - began >= soft - EARLY:
        from celery.exceptions import SoftTimeLimitExceeded

        _running.soft = None  # once per job, as billiard sends it once
        raise SoftTimeLimitExceeded()


def _on_ending(signum: int, frame: Any) -> None:
    """SIGTERM, SIGHUP, SIGQUIT: unwind the running task, then end by the signal."""
    if not _running.began or _running.ending:
        _die_by(signum)  # between jobs, or a second time: at once
    _running.ending = signum
    raise SystemExit(128 + signum)


def _die_by(signum: int) -> None:
    """End this process by ``signum``'s default action: its parent sees that signal."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # (not reached: the default action of each ends the process)


def run(
    target: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    soft_limit: float | None,
    max_memory: int | None,
) -> tuple[bool, Any]:
    """Run one job: ``(True, what target returned)``, or ``(False, ExceptionInfo)`` for a
    ``BaseException`` it raised (Celery's tracer returns its own outcome, so this is what
    got past it). A ``SystemExit`` or ``KeyboardInterrupt`` of the task's own is its
    outcome too, and the child then exits, as billiard's does (#427)."""
    from billiard.einfo import ExceptionInfo

    _running.soft = soft_limit
    _running.began = time.monotonic()
    try:
        outcome = (True, target(*args, **kwargs))
    except BaseException as exc:
        if _running.ending:
            _die_by(_running.ending)  # unwound for an ending signal: no outcome is sent
        outcome = (False, ExceptionInfo())
        if isinstance(exc, SystemExit | KeyboardInterrupt):
            retire_after_task()
    finally:
        _running.began = 0.0
        _running.soft = None
    if max_memory:
        _check_memory(max_memory)
    return outcome


def _check_memory(limit_kib: int) -> None:
    """Retire after this job if resident memory is above ``limit_kib`` (billiard's test)."""
    from billiard.compat import mem_rss

    used = mem_rss()
    if used > limit_kib:
        log.warning(
            "pipepool: child process %d uses %d KiB of memory, above max_memory_per_child "
            "(%d KiB): it exits once this task's result is sent, and is replaced",
            os.getpid(),
            used,
            limit_kib,
        )
        retire_after_task()
