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
