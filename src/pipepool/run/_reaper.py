"""Per-worker machinery of ``pipepool run``: the subreaper, the guardian, the sweep.

A worker that runs jobs is a child subreaper (Linux): a descendant that left its job's
process group (``setsid``, a daemon's double fork) is reparented to the worker instead
of init, and ``sweep_orphans`` kills and reaps every such child after each job. A
*guardian* process, forked once per worker, blocks reading a pipe whose only writer is
the worker and that the worker never writes; the worker keeps the running job's process
group in a word of memory it shares with the guardian (no system call, no wake-up per
job); at EOF (the worker is gone, however it died) the guardian SIGKILLs the group found
there. It ignores SIGINT, SIGTERM and SIGHUP, so a signal sent to the runner's whole
process group takes the worker down first and the guardian still does its job.

A job's pid is known only once it was forked, and a worker killed between the fork and
its note of the pid (``--halt now`` or a second Ctrl-C kill a job the moment it starts,
so this is not rare) would leave the job to no one. So before the fork the worker stores
a *token* instead (a negative number) and puts it in the job's environment
(``PIPEPOOL_JOB_TOKEN``); a guardian that finds a token kills the group of every process
whose environment carries it. The child holds the pipe's write end until it execs (the
end is close-on-exec), so the guardian's EOF never comes before the job's environment
is readable: in /proc, or through ps(1) where there is no /proc (macOS).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import resource
import signal
import struct
import sys
import threading
import time

from ..host import children, holding_environ, processes, processes_from_ps

SWEEP_ROUNDS = 50  # bound on kill-and-reap rounds over reparented descendants; each round
# goes one generation deeper, so only a fork bomb outlasts it
MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB else

_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h

# Per-worker state, created by the first job a worker runs (and again after a fork).
_owner_pid = 0
_guardian_pid = 0
_guardian_fd = -1
_slot: mmap.mmap | None = None  # shared with the guardian: the running job's pgid, or 0
_SLOT = struct.Struct("q")
TOKEN_VAR = "PIPEPOOL_JOB_TOKEN"  # in a job's environment: "<worker pid>.<n>"
TOKEN_SCANS = 20  # scans for a token's processes (/proc, or ps), TOKEN_PAUSE apart: the job's
TOKEN_PAUSE = 0.01  # exec may not have set up its new environment yet (the kernel closes
# the fds first), or the worker died before the fork: then none is found
_tokens = 0  # tokens this worker handed out


def setup_worker() -> None:
    global _owner_pid
    if _owner_pid == os.getpid():
        return
    _owner_pid = os.getpid()
    # A runner that installed its own SIGTERM handler passed it on to its forked workers;
    # a worker must die of SIGTERM (LocalExecutor.terminate relies on it, and so does the
    # guardian, which takes over at the worker's death). A Dask worker runs jobs in a
    # thread, where signal() raises; it inherited no runner's handler anyway.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _become_subreaper()
    _start_guardian()
    # A worker that exits normally (the pool ends) stops its guardian and waits for it,
    # so that once the pool has joined its workers nothing of the run is left; one that
    # is killed skips this, and its guardian sees EOF instead.
    from multiprocessing import util

    util.Finalize(None, _stop_guardian, exitpriority=10)


def _become_subreaper() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no prctl: descendants that leave the job's group go to init instead


def _start_guardian() -> None:
    global _guardian_pid, _guardian_fd, _slot
    if _slot is None:
        _slot = mmap.mmap(-1, _SLOT.size)  # anonymous and MAP_SHARED: survives the fork
    if _guardian_fd >= 0:  # a dead guardian's pipe, or one inherited through a fork
        with contextlib.suppress(OSError):
            os.close(_guardian_fd)
    read_fd, write_fd = os.pipe()  # both close-on-exec: no job inherits the write end
    worker = os.getpid()
    pid = os.fork()
    if pid == 0:  # the guardian: only os-level calls, and it never returns
        try:
            _guard(read_fd, _slot, worker)
        finally:
            os._exit(0)
    os.close(read_fd)
    with contextlib.suppress(OSError):  # as the guardian does: whichever of us runs first
        os.setpgid(pid, pid)
    _guardian_pid, _guardian_fd = pid, write_fd


def _guard(read_fd: int, slot: mmap.mmap, worker: int) -> None:
    """Body of the guardian: wait for the worker's death, then SIGKILL its job's group."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    # Out of the worker's process group, which the pool kills whole with the worker
    # (``pipepool._tree``): the guardian must outlive the worker to do its job.
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    # Hold nothing of the worker's: not its pool pipes (the runner must see the worker's
    # EOF the moment it dies) and not the runner's stdout (a reader waits for its EOF).
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, read_fd)
    os.closerange(read_fd + 1, max(read_fd + 2, os.sysconf("SC_OPEN_MAX")))
    while True:  # nobody ever writes: EOF comes when the worker is gone, however it died
        try:
            if not os.read(read_fd, 1):
                break
        except InterruptedError:
            continue
    (pgid,) = _SLOT.unpack_from(slot)
    if pgid > 0:
        killpg(pgid, signal.SIGKILL)
    elif pgid < 0:  # died while starting a job: find it by its token
        token = f"{TOKEN_VAR}={worker}.{-pgid}".encode()
        for _ in range(TOKEN_SCANS):
            if _kill_token(token):
                break
            time.sleep(TOKEN_PAUSE)


def _kill_token(token: bytes) -> bool:
    """SIGKILL the process group of each process whose environment holds ``token``
    (the job, and what it started: they inherit it). True if one was found, or if
    nothing on this system can tell (then there is nothing to wait for)."""
    holders = _token_holders(token)
    if holders is None:
        return True
    for pid, pgid in holders:
        killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # one that left the group (setsid)
    return bool(holders)


def _token_holders(token: bytes) -> list[tuple[int, int]] | None:
    """``(pid, pgid)`` of each process whose environment holds ``token``: from /proc, or
    from ps(1) where there is none; None if neither can tell (``pipepool.host``)."""
    return holding_environ(token)


def _stop_guardian() -> None:
    global _guardian_fd, _guardian_pid
    if _guardian_fd >= 0:
        with contextlib.suppress(OSError):
            os.close(_guardian_fd)
        _guardian_fd = -1
    if _guardian_pid:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(_guardian_pid, 0)
        _guardian_pid = 0


def tell_guardian(pgid: int) -> None:
    """Record the running job's process group (0: none) where the guardian will look."""
    if _slot is not None:
        _SLOT.pack_into(_slot, 0, pgid)


def expect_job() -> None:
    """Just before a job is forked: give it a fresh token (in this worker's environment,
    which the job inherits) and record the token where the guardian will look, until
    ``tell_guardian`` records the job's group."""
    global _tokens
    _tokens += 1
    os.environ[TOKEN_VAR] = f"{os.getpid()}.{_tokens}"
    tell_guardian(-_tokens)


def _children() -> set[int]:
    """This worker's children, from /proc (empty where it has no such file).

    Linux lists a child under the thread that forked it, and an orphan reparented to a
    subreaper under the subreaper's first live thread: the main one. So two small reads,
    this thread's and the main thread's, instead of a listing of every thread.
    """
    return children(os.getpid(), {os.getpid(), threading.get_native_id()})


def sweep_orphans(usage: Usage) -> None:
    """Kill and reap every child but the guardian: descendants of the finished job that
    were reparented to this worker (it is their subreaper), adding what each used to
    ``usage``. A no-op off Linux."""
    for _ in range(SWEEP_ROUNDS):
        reap_zombies(usage)  # first: a killed group's members, reparented here
        strays = _children() - {_guardian_pid}
        if not strays:
            return
        for pid in strays:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in strays:
            with contextlib.suppress(ChildProcessError):
                usage.add(os.wait4(pid, 0)[2])


def reap_zombies(usage: Usage, leader: int = 0) -> tuple[int, int, resource.struct_rusage] | None:
    """Reap every child that has exited, adding what each used to ``usage``; a dead
    guardian is replaced. The job's own process ``leader`` is not counted here: its
    ``wait4`` is returned, for the caller to keep (None if it was not among them)."""
    global _guardian_pid
    kept = None
    while True:
        try:
            reaped = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return kept
        pid, _status, rusage = reaped
        if pid == 0:
            return kept
        if pid == leader:
            kept = reaped
        elif pid == _guardian_pid:
            _guardian_pid = 0
            _start_guardian()
        else:
            usage.add(rusage)


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a live member. A zombie does not count:
    one that is not this worker's child waits for its own parent (init, which in some
    containers never reaps) to reap it, and would hold the group "alive" for ever."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    states = _group_states(pgid)
    return states is None or any(state != "Z" for state in states)


def _group_states(pgid: int) -> list[str] | None:
    """The state letter of each process in group ``pgid``: from /proc, else from ps(1);
    None if neither can tell."""
    table = processes()
    if table is None:
        table = processes_from_ps()
    return None if table is None else [p.state for p in table if p.pgid == pgid]


class Usage:
    """CPU time and peak memory of a job's process tree, from the kernel's accounting.

    ``wait4`` of a process reports what it and every descendant it reaped used; the
    job's own process plus each orphan the sweep reaps (they were reparented here) make
    up the whole tree. CPU times add up; the peak RSS is the largest of them (a tree's
    processes mostly do not peak together, and the kernel keeps no sum).
    """

    __slots__ = ("maxrss", "sys", "user")

    def __init__(self) -> None:
        self.user = 0.0
        self.sys = 0.0
        self.maxrss = 0  # bytes

    def add(self, rusage: resource.struct_rusage) -> None:
        self.user += rusage.ru_utime
        self.sys += rusage.ru_stime
        self.maxrss = max(self.maxrss, rusage.ru_maxrss * MAXRSS_UNIT)


def killpg(pgid: int, sig: int) -> None:
    # ESRCH: the group is already empty; EPERM: only a zombie is left in it
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
