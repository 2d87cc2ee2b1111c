"""The leak check every test runs under (conftest.py's autouse ``leak_check``), the way
loky's test teardown checks for leftover workers: a test that leaves a child process,
an open fd or a thread behind fails.

What lives on purpose is accounted for by name, each from its owner's own record (never
by what a process or fd looks like):

* process-wide helpers that outlive every test by design (``HELPERS``): multiprocessing's
  fork server and resource tracker, loky's resource tracker and reusable executor (the
  pool joblib keeps between calls), the queue feeder threads loky leaves blocked and
  (``COSTLY_HELPERS``, asked only when something is left) the queues of a loky executor
  whose manager thread died, pipepool.joblib's clean-up thread, Dask's offload and
  callback threads;
* what a module- or session-scoped fixture keeps between the tests that share it: the
  fixture says so with ``keep(name, held)`` for as long as it lives.

A leak is reported after a grace period (a process a test killed takes a moment to be
reaped, a thread to end); its processes are killed then, so one leak does not fail the
tests after it. Its fds are left open: closing an fd some object still owns would close
whatever reuses the number next.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import proc_table

GRACE = 5.0  # s a leak has to go away on its own before it counts (only a leak waits)


@dataclass
class Held:
    """What one owner accounts for: child pids, fds, thread idents."""

    pids: set[int] = field(default_factory=set)
    fds: set[int] = field(default_factory=set)
    threads: set[int] = field(default_factory=set)

    def add(self, other: Held) -> None:
        self.pids |= other.pids
        self.fds |= other.fds
        self.threads |= other.threads


@dataclass
class Snapshot:
    """This process's children (pid: command line), fds (fd: what it points at) and
    threads (ident: name)."""

    children: dict[int, bytes]
    fds: dict[int, str]
    threads: dict[int, str]


def snapshot() -> Snapshot:
    return Snapshot(
        {pid: proc_table.cmdline(pid) for pid in _children()},
        _fds(),
        {t.ident: t.name for t in threading.enumerate() if t.ident is not None},
    )


def _children() -> set[int]:
    """This process's children, zombies included: on Linux from each of its threads'
    ``children`` file (a child is listed under the thread that forked it), ten small
    reads instead of a scan of every process; elsewhere from proc_table."""
    try:
        tids = os.listdir("/proc/self/task")
        kids: set[int] = set()
        for tid in tids:
            path = f"/proc/self/task/{tid}/children"
            with contextlib.suppress(FileNotFoundError), open(path) as f:  # FNF: it ended
                kids.update(int(pid) for pid in f.read().split())
        return kids
    except OSError:  # no /proc, or a kernel without the children files
        return proc_table.children(os.getpid())


def _fds() -> dict[int, str]:
    """fd: its /proc link (a pipe, socket or file with its inode), or "" off Linux."""
    found = {}
    for fd in proc_table.open_fds():
        if proc_table.HAVE_PROC:
            try:
                found[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:  # the listing's own fd, closed since
                continue
        else:
            found[fd] = ""
    return found


# -- who may hold what ----------------------------------------------------------------------

_kept: dict[str, Callable[[], Held]] = {}


@contextlib.contextmanager
def keep(name: str, held: Callable[[], Held]) -> Iterator[None]:
    """For a fixture shared by several tests: while inside, what ``held()`` names (asked
    at each check: a fixture's processes may change) is ``name``'s, not a test's leak."""
    if name in _kept:
        raise RuntimeError(f"{name} is kept twice")
    _kept[name] = held
    try:
        yield
    finally:
        del _kept[name]


def multiprocessing_helpers() -> Held:
    """multiprocessing's fork server and resource tracker: started once per process
    by whichever pool needs one first, and kept for the process's life."""
    from multiprocessing import forkserver, resource_tracker

    held = Held()
    server = forkserver._forkserver
    if getattr(server, "_forkserver_pid", None):
        held.pids.add(server._forkserver_pid)
        held.fds.add(server._forkserver_alive_fd)
    tracker = resource_tracker._resource_tracker
    if tracker._pid:
        held.pids.add(tracker._pid)
        held.fds.add(tracker._fd)
    return held


def _loky() -> Held:
    """loky's resource tracker, and its reusable executor: the pool joblib's "loky"
    backend keeps between calls (tests/joblib_backend/conftest.py stops it after each
    module)."""
    held = Held()
    tracker_module = sys.modules.get("joblib.externals.loky.backend.resource_tracker")
    if tracker_module is not None:
        tracker = tracker_module._resource_tracker
        if tracker._pid:
            held.pids.add(tracker._pid)
            held.fds.add(tracker._fd)
    reusable = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(reusable, "_executor", None)
    if executor is None:
        return held
    processes = dict(executor._processes or {})  # each attribute is None once shut down
    held.pids |= set(processes)
    held.fds |= {p.sentinel for p in processes.values() if p.sentinel is not None}
    queues = (executor._call_queue, executor._result_queue)
    for owner in (*queues, executor._executor_manager_thread_wakeup):
        for connection in (getattr(owner, "_reader", None), getattr(owner, "_writer", None)):
            if connection is not None and not connection.closed:
                held.fds.add(connection.fileno())
    threads = (executor._executor_manager_thread, getattr(queues[0], "_thread", None))
    held.threads |= {t.ident for t in threads if t is not None and t.ident is not None}
    return held


def _loky_feeders() -> Held:
    """The feeder threads of loky's queues, with the queue's pipe. When joblib shuts
    loky's executor down in the middle of a call (a generator dropped while it runs:
    joblib's test_multiple_generator_call*), the workers are killed with the call queue
    full, and its feeder thread stays blocked writing to a pipe nobody reads, for the
    life of the process (loky's, reported upstream-worthy; not pipepool's)."""
    held = Held()
    for thread in threading.enumerate():
        target = getattr(thread, "_target", None)
        if getattr(target, "__module__", "") != "joblib.externals.loky.backend.queues":
            continue
        held.threads.add(thread.ident)
        for close in getattr(thread, "_args", ())[4:6]:  # reader.close, writer.close
            connection = getattr(close, "__self__", None)
            if connection is not None and not connection.closed:
                held.fds.add(connection.fileno())
    return held


def _loky_queues() -> Held:
    """loky's queues, wake-up pipes and worker processes still alive anywhere, with
    their pipes. loky's manager thread can die in joblib's abort of a running generator
    (a KeyError in add_call_item_to_queue, a race in loky), and then nothing closes or
    joins them. A walk of every object: asked only when something is left unaccounted
    for."""
    held = Held()
    kinds = ("Queue", "_SafeQueue", "SimpleQueue", "_ThreadWakeup")
    for obj in gc.get_objects():
        kind = type(obj)
        if kind.__name__ not in kinds or not kind.__module__.startswith("joblib.externals.loky"):
            continue
        for connection in (getattr(obj, "_reader", None), getattr(obj, "_writer", None)):
            if connection is not None and not connection.closed:
                held.fds.add(connection.fileno())
    # A worker's sentinel, closed by a finalizer when its loky Popen is collected.
    from multiprocessing import util

    for finalizer in list(util._finalizer_registry.values()):  # type: ignore[attr-defined]
        weak = getattr(finalizer, "_weakref", None)
        owner = weak() if weak is not None else None
        if finalizer._callback is os.close and type(owner).__module__.startswith(
            "joblib.externals.loky"
        ):
            held.fds.add(finalizer._args[0])
    return held


def _pipepool_joblib() -> Held:
    """pipepool.joblib's clean-up thread (it removes ended calls' memmapped files): one
    per process, started by the first call that memmapped an argument."""
    module = sys.modules.get("pipepool.joblib._shared")
    thread = getattr(getattr(module, "_cleanup", None), "thread", None)
    return Held(threads={thread.ident} if thread is not None and thread.ident else set())


def _dask() -> Held:
    """distributed's process-wide thread pools: the offload executor (a module global)
    and the Client class's callback executor."""
    held = Held()
    utils = sys.modules.get("distributed.utils")
    client = sys.modules.get("distributed.client")
    pools = [
        getattr(utils, "_offload_executor", None),
        getattr(getattr(client, "Client", None), "_cb_executor", None),
    ]
    for pool in pools:
        for thread in getattr(pool, "_threads", ()):
            if thread.ident is not None:
                held.threads.add(thread.ident)
    return held


HELPERS: dict[str, Callable[[], Held]] = {
    "multiprocessing's fork server and resource tracker": multiprocessing_helpers,
    "loky's resource tracker and reusable executor": _loky,
    "loky's queue feeder threads": _loky_feeders,
    "pipepool.joblib's callback thread": _pipepool_joblib,
    "distributed's offload and callback threads": _dask,
}


# Asked only when the owners above leave something unaccounted for.
COSTLY_HELPERS: dict[str, Callable[[], Held]] = {
    "loky's queues left by a dead executor manager thread": _loky_queues,
}


def _held(costly: bool) -> Held:
    held = Held()
    owners = [*HELPERS.values(), *_kept.values(), *(COSTLY_HELPERS.values() if costly else ())]
    for owner in owners:
        held.add(owner())
    return held


# -- the check ------------------------------------------------------------------------------


def _reap(collect: bool) -> None:
    """Reap finished children that multiprocessing and subprocess would reap on their
    next call anyway; ``collect``: close what only garbage collection closes."""
    if collect:
        gc.collect()
    multiprocessing.active_children()
    subprocess._cleanup()  # type: ignore[attr-defined]  (Popen objects already dropped)


def leaks(before: Snapshot, grace: float = GRACE, collect: bool = True) -> list[str]:
    """What is here now and was not in ``before``, nor held by a named owner, after up to
    ``grace`` s; one line per leak. Leaked processes are killed and reaped."""
    deadline = time.monotonic() + grace
    now, found = _look(before)  # the first look is free: most tests leave nothing
    reaped = False
    while any(found.values()) and (not reaped or time.monotonic() < deadline):
        if reaped:
            time.sleep(0.05)
        _reap(collect)
        reaped = True
        now, found = _look(before)
    lines = [
        f"child process {pid} ({'running' if proc_table.alive(pid) else 'never reaped'}): "
        f"{now.children[pid][:120]!r}"
        for pid in found["children"]
    ]
    for pid in found["children"]:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    lines += [f"fd {fd} -> {now.fds[fd]}" for fd in found["fds"]]
    lines += [f"thread {now.threads[ident]!r}" for ident in found["threads"]]
    return lines


def _look(before: Snapshot) -> tuple[Snapshot, dict[str, list[int]]]:
    now = snapshot()
    found = _compare(before, now, _held(costly=False))
    if any(found.values()):
        found = _compare(before, now, _held(costly=True))
    return now, found


def _compare(before: Snapshot, now: Snapshot, held: Held) -> dict[str, list[int]]:
    return {
        "children": sorted(set(now.children) - set(before.children) - held.pids),
        "fds": sorted(
            fd
            for fd, target in now.fds.items()
            if before.fds.get(fd) != target and fd not in held.fds
        ),
        "threads": sorted(  # the name too: an ended thread's ident is reused
            ident
            for ident, name in now.threads.items()
            if before.threads.get(ident) != name and ident not in held.threads
        ),
    }
