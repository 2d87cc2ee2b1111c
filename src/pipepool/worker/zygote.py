"""The zygote: a single-threaded process that forks a pool's workers, made once so that
no worker is forked from a process where other threads run, and no worker imports again
what the zygote imported.

Under the fork start method a worker is a copy of the process that forks it, with only
the forking thread. Forked from a parent where other threads run (a ProcessPoolExecutor's
driver, the Airflow executor's), it inherits whatever locks those threads held at that
instant, and may hang on one (Python 3.12+ warns: "This process ... is multi-threaded,
use of fork() may lead to deadlocks in the child"). So a fork pool forks a zygote while
it has one thread (``Zygote.make``), and from then on every worker started while the
parent has more than one thread (``threaded``) is forked by the zygote on request
(``Zygote.start``): a copy of the program as it was then.

A pool given modules to ``preload`` under spawn or forkserver makes its zygote with that
start method instead: a fresh process (or one from the fork server) that imports them,
and the main module as any such child does, reports that it is ready (or which module
failed, and why), and then forks every worker of the pool, first ones and replacements:
a recycled worker does not import them again. Under fork the parent imports them itself.

The parent and the zygote talk over a Unix socket pair. A request carries the new
worker's own fds (``socket.send_fds``): its activity, result and control pipe ends, its
crash report file and its payload region; the zygote already holds what every worker of
the pool shares (``WorkerShare``: the lifeline's read end, the page of start marks, the
initializer and the settings). It answers with the worker's pid, and later with its exit
code: the worker is the zygote's child, so the zygote reaps it (woken by SIGCHLD) and
reports, and ``ZygoteChild`` stands for the worker's ``multiprocessing.Process`` in the
parent. The zygote exits when the parent closes its end (the pool ended) or dies (the
socket's EOF).

This module is the parent's side; the zygote's own loop, and the messages, are in
``_zygote_loop`` (the process imports only that, and what the pool's workers need).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import PreloadError, RemoteTraceback
from ..host import process_state, thread_count, thread_listed
from ._zygote_loop import EXITED, FAILED, PRELOAD_FAILED, READY, REPLY, REQUEST, STARTED, serve
from .bootstrap import EXIT_UNGUARDED_MAIN, WORKER_NAME, unguarded_main

if TYPE_CHECKING:
    from . import WorkerShare

NAME = f"{WORKER_NAME}-zygote"  # a worker's prefix: an unguarded main exits it quietly
LOST_EXIT = 255  # the exit code of a worker whose zygote died before reporting it
SETTLE_LIMIT = 0.05  # s ``settle`` waits at most for an ending thread to be gone
JOIN_TIMEOUT = 5.0  # s ``close`` waits for the zygote to exit before killing it


def threads() -> int:
    """The threads this process has now: the kernel's count where /proc says (a C
    library's threads too), as CPython's own warning counts; else Python's."""
    count = thread_count()
    return threading.active_count() if count is None else count


def threaded() -> bool:
    """True if this process has more than one thread now: a fork would copy only one."""
    return threads() > 1


_ENDING: set[int] = set()  # native ids of threads a pool here joined (``ended``)


def ended(native_id: int | None) -> None:
    """Note a thread of a pool here that has ended or is about to (a joined
    ProcessPoolExecutor driver, the helper that started it): the kernel counts it until
    its last instructions have run, and ``settle`` waits for that."""
    if native_id is not None:
        _ENDING.add(native_id)


def settle() -> None:
    """Before a fork pool's first fork (its first worker; the zygote follows it): when
    no other Python thread is left, wait (briefly, bounded) for the kernel to finish the
    threads a pool here joined (``ended``): a joined thread is still counted until its
    last instructions have run, and a fork then would be a fork of a multi-threaded
    process (Python 3.12+ warns). Only those:
    a thread of a C library (numpy's BLAS starts one at import) never ends, and waiting
    for the kernel's count to drop cost every fork pool in such a program the whole
    bound (50 ms against the stdlib's 7 ms to a first result)."""
    if threading.active_count() > 1:
        return  # live threads: nothing to wait for (the zygote still helps)
    deadline = time.monotonic() + SETTLE_LIMIT
    while _ENDING and time.monotonic() < deadline:
        _ENDING.difference_update([t for t in _ENDING if not thread_listed(t)])
        if _ENDING:
            time.sleep(0.0005)
    _ENDING.clear()  # gone, or not ending within the bound: not waited for again


def preload_here(modules: Iterable[str]) -> None:
    """Under fork: import ``modules`` into this process, which every worker is a copy of
    (the zygote too); ``PreloadError`` names the first that fails and why. The main
    module is here already."""
    import importlib

    for name in modules:
        if name == "__main__":
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise PreloadError(
                f"the pool could not preload {name!r}: {type(exc).__name__}: {exc}", name=name
            ) from exc


class Zygote:
    """The parent's end of a pool's zygote: start workers through it, read their exits."""

    def __init__(self, process: Any, sock: socket.socket) -> None:
        self.process = process  # the zygote's multiprocessing.Process (the parent's child)
        self.sock = sock
        self.lock = threading.Lock()  # one request or read at a time (pids from any thread)
        self.exits: dict[int, int] = {}  # pid -> exit code, as reported
        self.dead = False  # the zygote is gone: its workers' exits are probed instead
        self._buffer = b""

    @classmethod
    def make(
        cls,
        context: Any,
        worker: Callable[[Any], None],
        share: WorkerShare,
        keep: Iterable[int] = (),
        close: Iterable[int] = (),
        preload: Sequence[str] = (),
    ) -> Zygote:
        """Make the zygote with ``context``'s start method. ``worker`` is the workers'
        entry point and ``share`` what each is handed alike. Under fork it keeps the fds
        in ``keep`` (lifeline, marks) and closes those in ``close`` (this process's
        others); under spawn and forkserver it has only what ``share`` passes it, imports
        ``preload`` first, and this call waits until it has: ``PreloadError`` if a module
        failed (the zygote is gone then)."""
        forked = context.get_start_method() == "fork"
        if forked:
            settle()
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # Never its own end: a number in ``close`` may be a closed fd's, reused by the pair.
        keep = (*keep, child_end.fileno())
        close = [fd for fd in close if fd not in keep] + [parent_end.fileno()] if forked else []
        from . import ChildFd

        process = context.Process(
            target=serve,
            args=(ChildFd(child_end.fileno()), worker, share, close, tuple(preload)),
            name=NAME,
            daemon=True,
        )
        try:
            process.start()
        except BaseException:
            parent_end.close()
            raise
        finally:
            child_end.close()
        zygote = cls(process, parent_end)
        if not forked:
            try:
                zygote._wait_ready(preload, context.get_start_method())
            except BaseException:
                zygote.close()
                raise
        return zygote

    def _wait_ready(self, preload: Sequence[str], method: str) -> None:
        """Until the zygote says it imported what it preloads; ``PreloadError`` if it
        could not, or exited first."""
        kind, _, size = self._next()
        if kind == READY:
            return
        if kind == PRELOAD_FAILED:
            text = self._exactly(size).decode("utf-8", "replace")
            module, _, tb = text.partition("\0")
            last = tb.strip().splitlines()[-1] if tb.strip() else "failed"
            error = PreloadError(
                f"the pool could not preload {module!r} in its zygote: {last}", name=module
            )
            error.__cause__ = RemoteTraceback(tb)
            raise error
        # Gone before it said anything: its exit status says why, if it has one yet.
        self.process.join(JOIN_TIMEOUT)
        code = self.process.exitcode
        if code == EXIT_UNGUARDED_MAIN:
            raise PreloadError(unguarded_main(method), name="__main__")
        modules = ", ".join(map(repr, preload))
        raise PreloadError(
            f"the pool's zygote ended before it had imported {modules} "
            f"(exit status {code}; its stderr says why)",
            name=preload[0] if preload else None,
        )

    def _next(self) -> tuple[int, int, int]:
        """The next message, blocking (EOF: kind 0)."""
        try:
            data = self._exactly(REPLY.size)
        except OSError:
            return 0, 0, 0
        return REPLY.unpack(data)

    def _exactly(self, size: int) -> bytes:
        """``size`` bytes of the stream, blocking; OSError at its EOF."""
        while len(self._buffer) < size:
            data = self.sock.recv(max(4096, size - len(self._buffer)))
            if not data:
                self.dead = True
                raise OSError("the pool's zygote is gone")
            self._buffer += data
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    @property
    def fd(self) -> int:
        return self.sock.fileno()

    def start(self, fds: tuple[int, ...], wid: int, slot: int, region: bool) -> ZygoteChild:
        """Have the zygote fork worker ``wid`` with these fds (activity, result, control,
        crash, then the region's if ``region``); its stand-in. OSError if it cannot."""
        with self.lock:
            if self.dead:
                raise OSError("the pool's zygote is gone")
            try:
                socket.send_fds(self.sock, [REQUEST.pack(wid, slot, int(region))], list(fds))
                while True:
                    kind, pid = self._read()
                    if kind == STARTED:
                        return ZygoteChild(self, pid)
                    if kind == FAILED:
                        raise OSError(pid, f"the zygote could not fork: {os.strerror(pid)}")
            except OSError:
                if self.dead or not self.process.is_alive():
                    self.dead = True
                raise

    def exitcode(self, pid: int) -> int | None:
        """The worker's exit code once the zygote reported it, else None."""
        code = self.exits.get(pid)
        if code is not None:
            return code
        with self.lock:
            self._drain()
        code = self.exits.get(pid)
        if code is None and self.dead and _gone(pid):  # its status went with the zygote
            code = self.exits[pid] = LOST_EXIT
        return code

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """Wait up to ``timeout`` s (None: no bound) for the worker's exit code."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.exitcode(pid)) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if self.dead:  # nobody will report: probe now and then
                time.sleep(min(0.01, left) if left is not None else 0.01)
            else:
                select.select([self.sock], [], [], left)
        return code

    def _drain(self) -> None:
        """Read every report waiting, without blocking (lock held): those ``_read``
        left in the buffer behind the reply it wanted first."""
        self._take(b"")
        while not self.dead:
            try:
                data = self.sock.recv(4096, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self.dead = True
                return
            self._take(data)

    def _read(self) -> tuple[int, int]:
        """The next message that is not an exit report (lock held); reports are noted."""
        while True:
            while len(self._buffer) < REPLY.size:
                data = self.sock.recv(4096)
                if not data:
                    self.dead = True
                    raise OSError("the pool's zygote is gone")
                self._buffer += data
            kind, pid, code = REPLY.unpack_from(self._buffer)
            self._buffer = self._buffer[REPLY.size :]
            if kind == EXITED:
                self.exits[pid] = code
            elif kind != READY:  # (a fork zygote's, not waited for)
                return kind, pid

    def _take(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= REPLY.size:
            kind, pid, code = REPLY.unpack_from(self._buffer)
            self._buffer = self._buffer[REPLY.size :]
            if kind == EXITED:
                self.exits[pid] = code

    def shut(self) -> None:
        """Tell the zygote to exit (its socket's EOF), without waiting: it starts no
        worker and reports no exit from here on (``close`` reaps it)."""
        with self.lock:
            self.dead = True
            self.sock.close()

    def close(self) -> None:
        """Tell the zygote to exit (its socket's EOF), if not told yet, and reap it."""
        self.shut()
        # Not join(timeout): that waits for the process' sentinel pipe, whose write end
        # the workers it forked inherited; exitcode asks waitpid.
        deadline = time.monotonic() + JOIN_TIMEOUT
        pause = 0.00005  # it exits within a fraction of a millisecond of the EOF: look soon
        while self.process.exitcode is None and time.monotonic() < deadline:
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join()
        self.process.close()


def _gone(pid: int) -> bool:
    """True once an orphaned worker has exited: no such process, or a zombie its new
    parent has not reaped (not every container's init reaps)."""
    state = process_state(pid)  # "": no such process
    if state is not None:
        return state in ("", "Z", "X")
    try:  # no /proc: ask the kernel whether the pid exists (a zombie does)
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False


class ZygoteChild:
    """A worker the zygote forked, as the parent sees it: the part of
    ``multiprocessing.Process`` the executor uses (pid, exitcode, join, kill, close)."""

    __slots__ = ("pid", "zygote")

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote = zygote
        self.pid = pid

    @property
    def exitcode(self) -> int | None:
        return self.zygote.exitcode(self.pid)

    def is_alive(self) -> bool:
        return self.exitcode is None

    def join(self, timeout: float | None = None) -> None:
        self.zygote.wait(self.pid, timeout)

    def _signal(self, signum: int) -> None:
        if self.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def close(self) -> None:
        if self.exitcode is None:
            raise ValueError("Cannot close a process while it is still running.")
        self.zygote.exits.pop(self.pid, None)
