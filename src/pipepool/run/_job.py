"""The worker side of ``pipepool run``: run one command as a process tree the pool owns.

``run_job`` executes in a pool worker (it is importable by module name, so it is
spawn-safe). Each command runs in its own session, so its process group holds the
command and everything it starts: the terminal's Ctrl-C does not reach it (the runner
decides), and one ``killpg`` takes down the command with its grandchildren.

No descendant outlives its job, whichever way the job ends:

* **The command exits** (or runs past its timeout, then gets SIGTERM and, after
  ``KILL_GRACE``, SIGKILL): the worker SIGKILLs what is left of the group. On Linux the
  worker is a child subreaper, so a descendant that left the group (``setsid``, a
  daemon's double fork) is reparented to the worker instead of init; the worker kills
  and reaps every such child before returning.
* **The worker dies** (the runner killed it on a second Ctrl-C, ``--halt now``, the
  executor's backstop timeout, or the runner itself was SIGKILLed and the worker followed
  through its lifeline): a *guardian* process, forked once per worker, blocks reading a
  pipe whose only writer is the worker and that the worker never writes. The worker
  keeps the running job's process group in a word of memory it shares with the
  guardian (no system call, no wake-up per job); at EOF (the worker is gone, however it
  died) the guardian SIGKILLs the group found there. It ignores SIGINT, SIGTERM and
  SIGHUP, so a signal sent to the runner's whole process group takes the worker down
  first and the guardian still does its job; and it leads a process group of its own,
  so the pool's kill of the worker's group (``pipepool._tree``) spares it.

Limits: a descendant that left the job's process group survives the *worker's* death
(the subreaper died with it), and a job killed in the microseconds between its fork and
its registration with the guardian is not listed there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import mmap
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

KILL_GRACE = 0.5  # s between SIGTERM and SIGKILL of a timed-out job: long enough for a
# well-behaved command to clean up, short enough that a timeout ends promptly
SWEEP_ROUNDS = 50  # bound on kill-and-reap rounds over reparented descendants; each round
# goes one generation deeper, so only a fork bomb outlasts it

_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One attempt of one job, as sent to a worker."""

    seq: int
    attempt: int
    argv: tuple[str, ...]  # what to exec: ("/bin/sh", "-c", line) or the split words
    stdout_path: str
    stderr_path: str
    timeout: float | None = None
    drop_empty: bool = False  # unlink an output file the job left empty (temporary ones)


@dataclass(frozen=True, slots=True)
class JobResult:
    """How an attempt ended. ``exitval`` and ``signal`` follow GNU parallel's joblog:
    a job killed by a signal has ``exitval`` 0 and ``signal`` N; a timed-out job has
    ``exitval`` -1 and the signal that ended it."""

    seq: int
    attempt: int
    start: float  # epoch seconds
    runtime: float  # seconds
    exitval: int
    signal: int
    timed_out: bool
    stdout_size: int
    stderr_size: int
    pid: int
    host: str = ":"  # the joblog's Host: GNU parallel's ":" here, a Dask worker's address
    output: tuple[bytes, bytes] | None = None  # (stdout, stderr) from a Dask worker

    @property
    def ok(self) -> bool:
        return self.exitval == 0 and self.signal == 0 and not self.timed_out


# Per-worker state, created by the first job a worker runs (and again after a fork).
_owner_pid = 0
_guardian_pid = 0
_guardian_fd = -1
_slot: mmap.mmap | None = None  # shared with the guardian: the running job's pgid, or 0
_SLOT = struct.Struct("q")


def run_job(spec: JobSpec) -> JobResult:
    """Run ``spec.argv`` in a new session with output to files; never leave a descendant."""
    _setup_worker()
    out_fd = _open_output(spec.stdout_path)
    err_fd = _open_output(spec.stderr_path)
    # Set in this worker's own environment, which the child inherits: a copy of the
    # environment per job costs more than the fork does.
    os.environ["PIPEPOOL_SEQ"] = os.environ["PARALLEL_SEQ"] = str(spec.seq)
    start = time.time()
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            spec.argv,
            stdin=subprocess.DEVNULL,
            stdout=out_fd,
            stderr=err_fd,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:  # no such program, not executable: report it as a shell would
        os.write(err_fd, f"pipepool: {spec.argv[0]}: {exc.strerror}\n".encode())
        code = 127 if exc.errno == errno.ENOENT else 126
        return JobResult(
            spec.seq,
            spec.attempt,
            start,
            time.monotonic() - t0,
            code,
            0,
            False,
            _size(out_fd),
            _size(err_fd),
            0,
        )
    finally:
        # The child holds its copies; ours would only keep the files open (and leak
        # one pair per job if Popen raised something else, a NUL in an argument say).
        os.close(out_fd)
        os.close(err_fd)
    pgid = proc.pid  # a session leader's pid is its process group id
    _tell_guardian(pgid)
    timed_out = False
    try:
        if not _wait(proc, spec.timeout):
            timed_out = True
            sent = signal.SIGTERM
            _killpg(pgid, signal.SIGTERM)
            if not _wait(proc, KILL_GRACE):
                sent = signal.SIGKILL
                _killpg(pgid, signal.SIGKILL)
                proc.wait()
    finally:
        # Whatever the command left running in its group (background jobs, a pipeline's
        # other half) ends with it: a batch job is its whole process tree.
        _killpg(pgid, signal.SIGKILL)
        if proc.returncode is None:
            proc.wait()
        _tell_guardian(0)  # the group is gone: nothing for the guardian to kill any more
        _sweep_orphans()
    runtime = time.monotonic() - t0
    code = proc.returncode
    if timed_out:
        exitval, sig = -1, int(sent)
    elif code < 0:
        exitval, sig = 0, -code
    else:
        exitval, sig = code, 0
    sizes = _file_size(spec.stdout_path), _file_size(spec.stderr_path)
    if spec.drop_empty:  # most jobs print little: spare the runner opening empty files
        for path, size in zip((spec.stdout_path, spec.stderr_path), sizes, strict=True):
            if size == 0:
                with contextlib.suppress(OSError):
                    os.unlink(path)
    return JobResult(
        spec.seq, spec.attempt, start, runtime, exitval, sig, timed_out, *sizes, proc.pid
    )


_CLUSTER_LOCK = threading.Lock()  # one job at a time per Dask worker process


def run_job_on_cluster(spec: JobSpec) -> JobResult:
    """``run_job`` in a Dask worker (``pipepool run --cluster``).

    The output comes back in the result, not through files: the runner's machine need
    not share a filesystem with the worker's. ``host`` names the worker. Jobs run one at
    a time per worker process, whatever its thread count: the subreaper, the guardian's
    slot and the orphan sweep (which kills every child but the guardian) belong to the
    whole process, so two jobs in one process would kill each other's trees.
    """
    from distributed import get_worker

    address = get_worker().address
    with _CLUSTER_LOCK:
        here = tempfile.mkdtemp(prefix="pipepool-job-")
        try:
            local = dataclasses.replace(
                spec,
                stdout_path=os.path.join(here, "stdout"),
                stderr_path=os.path.join(here, "stderr"),
                drop_empty=False,
            )
            result = run_job(local)
            output = (_read(local.stdout_path), _read(local.stderr_path))
        finally:
            shutil.rmtree(here, ignore_errors=True)
    return dataclasses.replace(result, host=address, output=output)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _open_output(path: str) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, 0o644)
    except FileNotFoundError:  # --results DIR/<seq>/ not made yet: workers make it
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return os.open(path, flags, 0o644)


def _size(fd: int) -> int:
    return os.fstat(fd).st_size


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _wait(proc: subprocess.Popen, timeout: float | None) -> bool:
    """Wait for ``proc`` up to ``timeout`` s; True if it exited (and is reaped).

    Popen.wait(timeout) polls with sleeps of up to 50 ms; a pidfd (Linux 5.3+) wakes
    exactly when the process exits, so a short job's result is not held back.
    """
    if timeout is None:
        proc.wait()
        return True
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or poller.poll(remaining * 1000):
                break
    finally:
        os.close(pidfd)
    return proc.poll() is not None


def _killpg(pgid: int, sig: int) -> None:
    # ESRCH: the group is already empty; EPERM: only a zombie is left in it
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# -- per-worker set-up: subreaper and guardian ----------------------------------------------


def _setup_worker() -> None:
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
    pid = os.fork()
    if pid == 0:  # the guardian: only os-level calls, and it never returns
        try:
            _guard(read_fd, _slot)
        finally:
            os._exit(0)
    os.close(read_fd)
    with contextlib.suppress(OSError):  # as the guardian does: whichever of us runs first
        os.setpgid(pid, pid)
    _guardian_pid, _guardian_fd = pid, write_fd


def _guard(read_fd: int, slot: mmap.mmap) -> None:
    """Body of the guardian: wait for the worker's death, then SIGKILL its job's group."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    # Out of the worker's process group, which the pool kills whole with the worker:
    # the guardian must outlive the worker to do its job.
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
        _killpg(pgid, signal.SIGKILL)


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


def _tell_guardian(pgid: int) -> None:
    """Record the running job's process group (0: none) where the guardian will look."""
    if _slot is not None:
        _SLOT.pack_into(_slot, 0, pgid)


def _children() -> set[int]:
    """This worker's children, from /proc (empty where it has no such file).

    Linux lists a child under the thread that forked it, and an orphan reparented to a
    subreaper under the subreaper's first live thread: the main one. So two small reads,
    this thread's and the main thread's, instead of a listing of every thread.
    """
    pid = os.getpid()
    pids: set[int] = set()
    for tid in {pid, threading.get_native_id()}:
        try:
            fd = os.open(f"/proc/{pid}/task/{tid}/children", os.O_RDONLY)
        except OSError:
            continue
        try:
            pids.update(int(p) for p in os.read(fd, 65536).split())
        finally:
            os.close(fd)
    return pids


def _sweep_orphans() -> None:
    """Kill and reap every child but the guardian: descendants of the finished job that
    were reparented to this worker (it is their subreaper). A no-op off Linux."""
    global _guardian_pid
    for _ in range(SWEEP_ROUNDS):
        while True:  # reap zombies first (a killed group's members, reparented here)
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
            if pid == _guardian_pid:
                _guardian_pid = 0
                _start_guardian()
        strays = _children() - {_guardian_pid}
        if not strays:
            return
        for pid in strays:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in strays:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
