"""A process multiprocessing is still starting exits when its parent dies: the start-up watch.

A spawn worker imports the parent's main module, pipepool (for its entry point,
``pipepool.worker.main``) and whatever its initializer needs before that entry point
starts the lifeline watcher (``worker._serve._watch``). A fork server imports the modules
it preloads (``pipepool.worker``) before its own loop watches its parent, and each worker
it forks imports the parent's main module (Python 3.11-3.13 do not preload it). Under
load those imports take seconds, and a parent SIGKILLed meanwhile left them running that
long (issue 41: half-started spawn workers and the fork server alive 2 s after the
parent's SIGKILL, at load 10-14 on 2 CPUs).

multiprocessing already gives each of them a pipe whose only writer is the parent: the
fork server's ``alive_r``, and a worker's ``parent_sentinel`` (the pipe it reads its start
data from, which the parent holds open until it reaps the worker). The watch waits on a
thread of its own for that pipe's hang-up and exits the process at once
(``EXIT_PARENT_DIED``); POLLHUP only, as the worker may not have read its data yet.
``start()``, called first by ``pipepool/__init__``, finds the pipe in the frame
multiprocessing is importing from (spawn's ``_main``, the fork server's ``main``). A
fork server's workers have pipepool imported already, so the server's watch also starts
one in each child it forks, on a copy of the pipe it hands it (``child_r``). Only
pipepool's workers are ended: a process whose name (set from the parent's start data)
is not a worker's is left to multiprocessing, as before.

The watch ends where the process's own begins: the worker's lifeline thread stops it
(``stop()``), and a fork server stops its own before it forks (no thread may run across
a fork). Not covered: what runs before pipepool's first import (the interpreter's start
and the main module's imports above its ``import pipepool``); a spawn worker whose main
module imports heavy libraries first notices there only at its entry point. On a system
whose ``poll`` reports no hang-up for a pipe the watch never fires, and a worker notices
at its lifeline, as before. Why not ``PR_SET_PDEATHSIG``: it is Linux's alone, and it
fires when the parent *thread* that started the process exits; a pool starts workers
from whichever thread runs it. Imports only what multiprocessing has loaded already.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
import types

WORKER_NAME = "pipepool-worker"  # the prefix of every worker's process name
EXIT_PARENT_DIED = 70  # the parent is gone (also the lifeline's exit status)
NAMING_POLL = 0.005  # s between looks at a fork server's child's name until it has one
NAMING_WAIT = 1.0  # s it may take after its parent's death to be named, before we give up

# Who is watching (``_begin``'s ``who``): what the pipe's hang-up means there.
SERVER = "a fork server"  # its parent is gone: exit
WORKER = "a pipepool worker"  # named as one by its start data: exit
FORKED = "a fork server's child"  # not named yet: watch on only if it is named a worker

_lock = threading.Lock()


class _Watch:
    """The running watch: its thread, and the fds it holds (the watched pipe's copy,
    and both ends of its wake-up pipe). Whoever takes it out of ``_watch`` (``stop``, or
    the thread on its own way out) closes the wake-up write end; the thread closes the
    other two as it ends."""

    __slots__ = ("fds", "thread")

    def __init__(self, thread: threading.Thread, fds: tuple[int, int, int]) -> None:
        self.thread = thread
        self.fds = fds  # watched, wake_r, wake_w


_watch: _Watch | None = None


def start() -> bool:
    """Start the watch if multiprocessing is starting this process as a pipepool worker
    or as a fork server: True if one runs now."""
    spawn = sys.modules.get("multiprocessing.spawn")
    forkserver = sys.modules.get("multiprocessing.forkserver")
    if spawn is None and forkserver is None:
        return False  # the usual case, a parent importing pipepool: nothing to look up
    sentinel = _frame_local(spawn._main.__code__ if spawn else None, "parent_sentinel")
    if sentinel is not None:  # a process being started (by spawn, or by a fork server)
        if _named_a_worker() is not True:
            return False
        os.register_at_fork(after_in_child=_forget)
        return _begin(sentinel, WORKER)
    alive_r = _frame_local(forkserver.main.__code__ if forkserver else None, "alive_r")
    if alive_r is None:
        return False
    server = os.getpid()
    os.register_at_fork(before=stop, after_in_child=lambda: _watch_new_child(server))
    return _begin(alive_r, SERVER)


def stop() -> None:
    """End the watch, if one runs, and wait for its thread (idempotent, any thread)."""
    global _watch
    with _lock:
        watch, _watch = _watch, None
    if watch is None:
        return
    wake_w = watch.fds[2]
    with contextlib.suppress(OSError):
        os.write(wake_w, b"x")
    watch.thread.join()
    os.close(wake_w)


def _forget() -> None:
    """In a child forked while a watch ran (a task's fork before the lifeline thread
    stopped it): the watch is its parent's; only its fds came along."""
    global _watch
    watch, _watch = _watch, None
    if watch is not None:
        for fd in watch.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _watch_new_child(server: int) -> None:
    """After a fork in a process forked from fork server ``server`` (its hooks are
    inherited). In the server's own new child: watch the pipe the parent's start data
    comes through (the server's ``child_r``, handed to spawn's ``_main`` next); whose
    worker it is is known only once that data names it. Further down (a task's fork),
    only forget the watch."""
    _forget()
    if os.getppid() != server:
        return
    forkserver = sys.modules.get("multiprocessing.forkserver")
    child_r = _frame_local(forkserver.main.__code__ if forkserver else None, "child_r")
    if child_r is not None:
        _begin(child_r, FORKED)


def _begin(fd: int, who: str) -> bool:
    """Watch (a copy of) ``fd`` on a new thread; ``who`` says what its hang-up means."""
    global _watch
    with _lock:
        if _watch is not None:
            return True
        watched = os.dup(fd)
        wake_r, wake_w = os.pipe()
        thread = threading.Thread(
            target=_wait, args=(watched, wake_r, who), name="pipepool-startup-watch", daemon=True
        )
        _watch = _Watch(thread, (watched, wake_r, wake_w))
        thread.start()
    return True


def _wait(watched: int, wake_r: int, who: str) -> None:
    poller = select.poll()
    poller.register(watched, select.POLLHUP)  # reports HUP, ERR, NVAL: its data is not ours
    poller.register(wake_r, select.POLLIN)
    orphaned_at = None  # when a fork server's unnamed child saw the hang-up
    try:
        while True:
            # Until a fork server's child is named (its start data read: moments after
            # the fork), look at its name now and then; then wait for the hang-up.
            events = dict(poller.poll(NAMING_POLL * 1000 if who == FORKED else None))
            if wake_r in events:
                return  # stopped
            if who == FORKED and (named := _named_a_worker()) is not None:
                if not named:
                    _leave()  # someone else's process: multiprocessing's rules, as before
                    return
                who = WORKER
            hangup = events.get(watched, 0) & select.POLLHUP
            if hangup and who != FORKED:
                break  # the parent is gone
            if hangup:  # gone before it named this child: the name comes within moments
                orphaned_at = orphaned_at or time.monotonic()
                if time.monotonic() - orphaned_at > NAMING_WAIT:
                    _leave()
                    return
                if select.select([wake_r], [], [], NAMING_POLL)[0]:
                    return
            elif watched in events:
                _leave()  # nothing left to watch (POLLNVAL, POLLERR)
                return
    finally:
        os.close(watched)
        os.close(wake_r)
    # As the lifeline does: a worker that leads its group takes the group along (it
    # leads one only once its entry point ran, and the watch has ended by then).
    if os.getpgrp() == os.getpid():
        with contextlib.suppress(OSError):
            os.killpg(0, signal.SIGKILL)
    os._exit(EXIT_PARENT_DIED)


def _leave() -> None:
    """The watch ends on its own: out of ``_watch``, unless ``stop`` took it first."""
    global _watch
    with _lock:
        watch = _watch
        if watch is None or watch.thread is not threading.current_thread():
            return
        _watch = None
    os.close(watch.fds[2])


def _named_a_worker() -> bool | None:
    """Whether multiprocessing is starting this process as a pipepool worker: None
    while its start data has not named it yet."""
    process = sys.modules["multiprocessing.process"].current_process()
    if process.name.startswith(WORKER_NAME):
        return True
    return None if process.name == "MainProcess" else False


def _frame_local(code: types.CodeType | None, name: str) -> int | None:
    """Local ``name`` (an fd) of the outermost running frame of ``code``, if any."""
    if code is None:
        return None
    found = None
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            found = frame.f_locals.get(name)
        frame = frame.f_back
    return found if isinstance(found, int) else None
