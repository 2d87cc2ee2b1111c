"""A worker's process tree: each worker leads a process group, and is killed as one.

A task may start processes of its own (a shell command, a compiler, a benchmark binary).
Signalling only the worker's pid would leave them running after their task was killed or
timed out. So every worker moves into a new process group as it starts (its pid is the
group's id), every process its tasks start joins that group, and the parent signals the
whole group wherever it kills a worker: ``kill()``, a task's timeout, ``terminate()``,
a worker that lingers at ``end()``; and a worker that died while running a task (a
segfault, ``os._exit``) has what it left in its group killed when it is reaped. A worker
whose parent died takes its group down with it before it exits (the lifeline).

Only processes that leave the group on purpose escape: ``setsid``, ``setpgid``,
``subprocess.Popen(start_new_session=True)`` or ``process_group=...``, daemons. A worker
that exits normally (``end()``, ``max_tasks_per_child``) leaves its group alone: what a
finished task left running in the background was its choice.

Pools in tasks (docs/containment.md, "Pools inside tasks"): a worker may start processes
through ``multiprocessing`` as the stdlib's workers may (``may_have_children``), and they
are in its group like any other. A nested pipepool pool's workers lead groups of their
own, and end with their lifeline, which is this worker: killed, it takes them along. A
worker that exits normally ends the multiprocessing children its tasks left running
(``end_children``): multiprocessing's own exit would wait for them for ever.

The terminal (docs/containment.md says more): the terminal sends Ctrl-C (SIGINT), Ctrl-\\
and Ctrl-Z to its foreground process group, which no longer holds the workers. Workers
ignored SIGINT before already, and so did the processes tasks start (an ignored signal
stays ignored across fork and exec); now Ctrl-C reaches the parent alone, which decides
(``terminate()`` kills every tree). Ctrl-Z stops the parent, not the running tasks. A
process of a background group that reads the terminal is stopped (SIGTTIN), so a worker
whose stdin is a terminal gets ``/dev/null`` as its stdin instead: a task's subprocess
reading stdin sees EOF, as Python code in a worker always did (multiprocessing's
``sys.stdin``), rather than hanging stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any


def lead_own_group() -> bool:
    """In a worker, first thing: become the leader of a new process group. True if it
    is one now (False where the platform refuses, e.g. a session leader)."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    if os.getpgrp() != os.getpid():
        return False
    with contextlib.suppress(OSError):
        if os.isatty(0):  # reading it from a background group would stop us (SIGTTIN)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
    return True


def signal_group(pid: int | None, sig: int) -> None:
    """Send ``sig`` to the process group that worker ``pid`` leads, if it exists.

    Safe even after the worker was reaped: a group id stays reserved while any member
    lives (the kernel gives no new process a pid that is still a group's id), so the
    signal reaches the worker's leftovers or, once there are none, nobody (ESRCH).
    """
    if not pid:
        return
    # ESRCH: no such group (the worker never made one, or it is empty); EPERM: only a
    # zombie left in it, or (macOS) a member that changed its credentials.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def kill_own_group() -> None:
    """In a worker whose parent died: SIGKILL its group, itself included, if it leads one."""
    if os.getpgrp() == os.getpid():
        with contextlib.suppress(OSError):
            os.killpg(0, signal.SIGKILL)


def may_have_children() -> None:
    """In a worker: let its tasks start processes through ``multiprocessing`` (a pool of
    their own), as the stdlib's workers may.

    The parent starts its workers daemonic, for its own sake: at its exit multiprocessing
    terminates daemonic children and only joins the others, and a worker never exits on
    its own while its parent lives. But a daemonic process may not start children. The
    flag is a per-process setting, so the worker clears its own copy; the parent still
    sees a daemon, and terminates it at exit as before.

    A forked worker also inherits the parent's fork server (``_forget_fork_server``).
    """
    import multiprocessing

    multiprocessing.current_process().daemon = False
    _forget_fork_server()


def _forget_fork_server() -> None:
    """Forget a fork server this process inherited by fork: it is not its own. Asking
    whether it still runs fails (``waitpid`` of a process that is not its child), and the
    workers it would fork for a task's forkserver pool would be the parent's server's
    children, outside this worker's group, left running when the worker is killed. So
    such a pool starts a server of its own, in the group, as under spawn."""
    # Not imported here: a process that never loaded the module inherited no server
    # (and a worker's start-up does not pay for the import).
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server: Any = getattr(forkserver, "_forkserver", None)
    if getattr(server, "_forkserver_pid", None) is None:
        return  # none inherited: a spawn or forkserver worker, or a parent that had none
    alive = server._forkserver_alive_fd  # the parent's server ends when its users close it
    server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
    if isinstance(alive, int):
        with contextlib.suppress(OSError):
            os.close(alive)


CHILD_GRACE = 1.0  # s a worker that exits gives its non-daemonic multiprocessing children
# to end after their SIGTERM before it SIGKILLs them: one that handles SIGTERM must not
# hold the worker (and so its replacement, or end()) up for ever


def end_children() -> None:
    """In a worker leaving its task loop (``end()``, ``max_tasks_per_child``): end what its
    tasks started through ``multiprocessing`` and left running (a pool kept in a global,
    a library's cached pool) before multiprocessing's own exit handling joins it.

    That handling first runs the finalizers (a ``multiprocessing.Pool`` terminates
    itself), then terminates the daemonic children (a pipepool pool's workers) and joins
    every child. A non-daemonic child (a ``concurrent.futures`` pool's worker, a
    ``Process``) is joined without being asked to end, and a pool's worker waits for work
    for ever: the worker would never exit, and the parent could neither replace it nor
    end. So those get SIGTERM here, then SIGKILL after ``CHILD_GRACE`` (their pool finds
    them gone and stops). A child that leads a process group (a nested pipepool worker)
    has its group signalled too: its running task's processes go with it. Processes
    started otherwise (``subprocess``) are left alone, as a finished task's background
    processes always were.
    """
    import multiprocessing
    import time

    children = multiprocessing.active_children()
    ending = [child for child in children if not child.daemon]
    for child in children:
        signal_group(child.pid, signal.SIGTERM)
    for child in ending:
        with contextlib.suppress(OSError):
            child.terminate()
    # Polled, not join(timeout): that waits on a pipe the child's own children may hold.
    deadline = time.monotonic() + CHILD_GRACE
    while any(child.exitcode is None for child in ending) and time.monotonic() < deadline:
        time.sleep(0.005)
    for child in ending:
        if child.exitcode is None:
            signal_group(child.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                child.kill()
