"""The zygote's own side: the loop the zygote process runs (import what it preloads, fork
a worker per request, report each worker's exit), and the wire it and the parent speak.

``zygote.py`` is the parent's side (``Zygote``, ``ZygoteChild``) and says why a pool has
a zygote; this module is only what runs in the zygote, and its messages: the parent
reads them from here, so both sides use one definition of each.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import select
import signal
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .bootstrap import WORKER_NAME

if TYPE_CHECKING:
    from . import WorkerShare

REQUEST = struct.Struct("=iii")  # the worker's id, its start-mark slot, 1 if a region is sent
REPLY = struct.Struct("=iii")  # kind, pid (or errno), exit code (PRELOAD_FAILED: text size)
STARTED, EXITED, FAILED, READY, PRELOAD_FAILED = 1, 2, 3, 4, 5
# READY: the zygote imported what it preloads and takes requests. PRELOAD_FAILED: it could
# not, and exits; the reply's third field is the size of the text that follows it, the
# module's name and the import's traceback, "\0" between them.


def serve(
    sock_fd: Any,
    worker: Callable[[Any], None],
    share: WorkerShare,
    close: list[int],
    preload: tuple[str, ...],
) -> None:
    """The zygote's loop: import what it preloads, then fork a worker per request and
    report each worker's exit. ``sock_fd``: its end of the socket pair (a ``ChildFd``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from .. import _signals

    _signals.reset_in_child()
    _signals.unblock_all_in_this_thread()
    for fd in close:  # under fork, the parent's ends: its death must show as EOF
        with contextlib.suppress(OSError):
            os.close(fd)
    multiprocessing.current_process().daemon = False  # a daemon may not have children
    sock_fd = sock_fd.fd
    sock = socket.socket(fileno=sock_fd)
    failed = _preload(preload)
    if failed is not None:
        text = "\0".join(failed).encode("utf-8", "replace")
        _send(sock, REPLY.pack(PRELOAD_FAILED, 0, len(text)) + text)
        return
    if not _send(sock, REPLY.pack(READY, 0, 0)):
        return
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up fd is what counts
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    own = (sock_fd, wake_r, wake_w)
    context = multiprocessing.get_context("fork")
    children: dict[int | None, Any] = {}
    while True:
        ready, _, _ = select.select([sock_fd, wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
        for pid, proc in list(children.items()):  # reap first: a pid is reported once
            code = proc.exitcode
            if code is not None:
                proc.close()
                del children[pid]
                if not _send(sock, REPLY.pack(EXITED, pid, code)):
                    return
        if sock_fd not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, REQUEST.size, 5)
        except OSError:
            data, fds = b"", []
        if len(data) < REQUEST.size:  # the parent closed its end, or died
            return
        wid, slot, region = REQUEST.unpack(data)
        for fd in fds:  # as the parent's pipes were: not inherited across exec
            os.set_inheritable(fd, False)
        start = share.start(fds[:4], slot, fds[4] if region else None, own)
        try:
            proc = context.Process(
                target=_run_worker, args=(worker, start), name=f"{WORKER_NAME}-{wid}", daemon=True
            )
            proc.start()
        except OSError as exc:
            sent = _send(sock, REPLY.pack(FAILED, exc.errno or 0, 0))
        else:
            children[proc.pid] = proc
            sent = _send(sock, REPLY.pack(STARTED, proc.pid, 0))
        finally:
            for fd in fds:
                os.close(fd)
        if not sent:
            return


def _send(sock: socket.socket, data: bytes) -> bool:
    """Send to the parent; False if it has closed its end (the pool ended: it may do so
    before this zygote has even said READY) or died."""
    try:
        sock.sendall(data)
    except OSError:
        return False
    return True


def _preload(modules: tuple[str, ...]) -> tuple[str, str] | None:
    """Import ``modules`` here; the first that fails and its traceback, or None. The main
    module ("__main__") is already here: multiprocessing imports it into every spawn
    and forkserver child before its target runs."""
    import importlib

    for name in modules:
        if name == "__main__":
            continue
        try:
            importlib.import_module(name)
        except BaseException:  # SystemExit and friends from a module's top level too
            import traceback

            return name, traceback.format_exc()
    return None


def _run_worker(worker: Callable[[Any], None], start: Any) -> None:
    """In a worker the zygote forked: undo the zygote's own SIGCHLD set-up, then run."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    worker(start)
