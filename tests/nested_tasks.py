"""Tasks that start pools of their own, for tests/worker/test_nested_pools.py: one pool
of each kind, each of which runs a task, and a record of the processes each one added
below the worker. Importable by module name, so spawn and forkserver workers (and the
nested pools' own workers) find them."""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import signal
import time
from collections.abc import Callable

import proc_table

KINDS = (
    "concurrent.futures.ProcessPoolExecutor",
    "multiprocessing.Pool",
    "pipepool.ProcessPoolExecutor",
    "pipepool.LocalExecutor",
)
WAIT = 60.0  # s a nested pool's first result may take on a loaded machine

_left_running: list[object] = []  # pools a task left running, as a library's cache would


def square(x: int) -> int:
    return x * x


def _open(kind: str, method: str) -> tuple[object, Callable[[], object]]:
    """A pool of ``kind`` with one worker on ``method``, which has run a task; and what
    shuts it down."""
    context = multiprocessing.get_context(method)
    if kind == "concurrent.futures.ProcessPoolExecutor":
        executor = concurrent.futures.ProcessPoolExecutor(1, mp_context=context)
        assert executor.submit(square, 3).result(timeout=WAIT) == 9
        return executor, executor.shutdown
    if kind == "multiprocessing.Pool":
        pool = context.Pool(1)
        assert pool.apply_async(square, (3,)).get(timeout=WAIT) == 9
        return pool, lambda: (pool.close(), pool.join())
    import pipepool

    if kind == "pipepool.ProcessPoolExecutor":
        futures = pipepool.ProcessPoolExecutor(1, mp_context=context)
        assert futures.submit(square, 3).result(timeout=WAIT) == 9
        return futures, futures.shutdown
    local = pipepool.LocalExecutor(1, start_method=method)
    local.start()
    local.queue("k", square, 3)
    deadline = time.monotonic() + WAIT
    while local.has_work() and time.monotonic() < deadline:
        local.sync(timeout=0.05)
    assert local.get_event_buffer()["k"].result == 9
    return local, local.end


def use_pools(method: str) -> list[str]:
    """Open a pool of each kind, have it run a task, shut it down: the kinds that did."""
    used = []
    for kind in KINDS:
        _pool, close = _open(kind, method)
        close()
        used.append(kind)
    return used


def start_pools(method: str, record: str, then: str = "return", kinds=KINDS) -> dict:
    """Start a pool of each of ``kinds`` on ``method`` and leave it running; write to
    ``record`` (JSON, atomically) the processes each one added below this worker, as
    ``{kind: [[pid, identity], ...]}``; then return the record (``"return"``), wait for
    ever (``"wait"``), or SIGKILL this worker (``"die"``)."""
    me = os.getpid()
    seen = descendants(me)
    started: dict[str, list[list]] = {}
    for kind in kinds:
        _left_running.append(_open(kind, method)[0])
        now = descendants(me)
        started[kind] = [[pid, identity(pid)] for pid in sorted(now - seen)]
        seen = now
    with open(record + ".part", "w") as f:
        json.dump(started, f)
    os.replace(record + ".part", record)
    if then == "wait":
        time.sleep(3600)
    elif then == "die":
        os.kill(me, signal.SIGKILL)
    return started


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``: its children, theirs, and so on."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in proc_table.children(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def identity(pid: int) -> str:
    """What tells ``pid`` apart from a later process given the same number: its start
    time where /proc says ("" elsewhere: the pid alone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def still_running(record: dict) -> dict[str, list[int]]:
    """The processes of ``record`` (``start_pools``'s) still alive, by kind."""
    left: dict[str, list[int]] = {}
    for kind, processes in record.items():
        alive = [
            pid for pid, ident in processes if proc_table.alive(pid) and identity(pid) == ident
        ]
        if alive:
            left[kind] = alive
    return left


def make_shared_memory(record: str) -> None:
    """Create a shared memory segment (registered with the resource tracker), write its
    name to ``record``, and wait for ever."""
    from multiprocessing import shared_memory

    segment = shared_memory.SharedMemory(create=True, size=4096)
    with open(record + ".part", "w") as f:
        f.write(segment.name)
    os.replace(record + ".part", record)
    time.sleep(3600)
