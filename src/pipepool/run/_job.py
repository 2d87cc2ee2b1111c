"""The worker side of ``pipepool run``: run one command as a process tree the pool owns.

``run_job`` executes in a pool worker (it is importable by module name, so it is
spawn-safe). Each command runs in its own session, so its process group holds the
command and everything it starts: the terminal's Ctrl-C does not reach it (the runner
decides), and one ``killpg`` takes down the command with its grandchildren.

No descendant outlives its job, whichever way the job ends: when the command exits (or
runs past its timeout, then gets SIGTERM and, after ``KILL_GRACE``, SIGKILL) the worker
SIGKILLs what is left of the group and ``_reaper.sweep_orphans`` kills and reaps every
descendant that left the group; when the worker dies, its guardian (``_reaper``) kills
the job's group.

What the job used (user and system CPU seconds, peak RSS) comes from the kernel's
accounting of its whole process tree: ``wait4`` of the job's process (covering every
descendant it reaped) plus each orphan the sweep reaps.

A worker killed while it starts a job (between the fork and its note of the job's
group) leaves a token where the guardian looks, and the guardian kills the job by it
(``_reaper.expect_job``). Limit: a descendant that left the job's process group survives
the *worker's* death (the subreaper died with it) unless it kept the job's environment.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import _oom
from ._reaper import (
    Usage,
    expect_job,
    group_alive,
    killpg,
    reap_zombies,
    setup_worker,
    sweep_orphans,
    tell_guardian,
)

if TYPE_CHECKING:
    from ._seam import Probe

KILL_GRACE = 0.5  # s between SIGTERM and SIGKILL of a timed-out job: long enough for a
# well-behaved command to clean up, short enough that a timeout ends promptly


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
    slot: int = 0  # the job slot ({%}, $PARALLEL_JOBSLOT) when the runner tracks slots
    inherit_output: bool = False  # --ungroup: write to the runner's stdout/stderr
    probe: Probe | None = None  # what the measuring room does around the job (_seam)


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
    user: float = 0.0  # CPU seconds of the job's whole process tree, in user mode
    sys: float = 0.0  # ... and in the kernel
    maxrss: int = 0  # bytes: the largest peak resident set of a process in the tree
    oom: str = ""  # SIGKILL (or exit 137) while a count of OOM kills rose: how it rose
    measured: dict | None = None  # what its probe found (the measuring room's record)

    @property
    def ok(self) -> bool:
        return self.exitval == 0 and self.signal == 0 and not self.timed_out


def prepare_worker() -> None:
    """The pool's initializer: a worker imports this module and becomes a job runner
    (subreaper, guardian) before its first start mark. Under spawn and forkserver the
    import would otherwise come with the first job, after the mark, where ``--delay``
    already counts (a 0.5 s delay logged starts 0.37 s apart on a loaded machine)."""
    setup_worker()


def run_job(spec: JobSpec) -> JobResult:
    """Run ``spec.argv`` in a new session with output to files; never leave a descendant."""
    # Stamped first: the runner counts ``--delay`` from this job's start mark, set just
    # before this call; a stamp after the set-up below would let a worker preempted in
    # it log two starts closer than the delay.
    start = time.time()
    t0 = time.monotonic()
    setup_worker()
    probe = spec.probe
    if probe is not None and probe.prepare():  # it waited (--wait-quiet): stamped again
        start = time.time()
        t0 = time.monotonic()
    # Set in this worker's own environment, which the child inherits: a copy of the
    # environment per job costs more than the fork does.
    os.environ["PIPEPOOL_SEQ"] = os.environ["PARALLEL_SEQ"] = str(spec.seq)
    if spec.slot:
        os.environ["PARALLEL_JOBSLOT"] = str(spec.slot)
    oom_at = _oom.snapshot(_oom.counters())  # a SIGKILL is the OOM killer's if these rise
    started = _start(spec)
    if isinstance(started, int):  # no such program, not executable: it never ran
        sizes = (0, 0) if spec.inherit_output else _sizes(spec)
        return JobResult(
            spec.seq, spec.attempt, start, time.monotonic() - t0, started, 0, False, *sizes,
            0, measured=probe.finish(None) if probe is not None else None,
        )  # fmt: skip
    usage = Usage()
    timed_out, sent = _wait(started, spec.timeout, usage)
    measured = probe.finish(usage.user + usage.sys) if probe is not None else None
    runtime = time.monotonic() - t0
    code = started.returncode
    if timed_out:
        exitval, sig = -1, sent
    elif code < 0:
        exitval, sig = 0, -code
    else:
        exitval, sig = code, 0
    oom = ""
    # SIGKILL, or a shell's 128 + 9 for a child of its that SIGKILL ended
    if not timed_out and signal.SIGKILL in (sig, exitval - 128):
        oom = _oom.rise(oom_at, _oom.counters()) or ""
    sizes = (0, 0) if spec.inherit_output else _sizes(spec)
    if spec.drop_empty:  # most jobs print little: spare the runner opening empty files
        for path, size in zip((spec.stdout_path, spec.stderr_path), sizes, strict=True):
            if size == 0:
                with contextlib.suppress(OSError):
                    os.unlink(path)
    return JobResult(
        spec.seq, spec.attempt, start, runtime, exitval, sig, timed_out, *sizes, started.pid,
        user=usage.user, sys=usage.sys, maxrss=usage.maxrss, oom=oom, measured=measured,
    )  # fmt: skip


def _start(spec: JobSpec) -> subprocess.Popen | int:
    """Fork the job in a session of its own, its guardian told; the exit status a shell
    gives when it cannot (127: no such program, 126: not executable), its error written
    to the job's stderr."""
    if spec.inherit_output:  # --ungroup: straight to the runner's stdout and stderr
        out_fd, err_fd = None, None
    else:
        out_fd = _open_output(spec.stdout_path)
        err_fd = _open_output(spec.stderr_path)
    expect_job()  # from here a worker's death kills the job, even before it has a pid
    if spec.probe is not None:
        spec.probe.start()
    try:
        proc = subprocess.Popen(
            spec.argv,
            stdin=subprocess.DEVNULL,
            stdout=out_fd,
            stderr=err_fd,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:  # report it as a shell would
        tell_guardian(0)
        os.write(err_fd or 2, f"pipepool: {spec.argv[0]}: {exc.strerror}\n".encode())
        return 127 if exc.errno == errno.ENOENT else 126
    finally:
        # The child holds its copies; ours would only keep the files open (and leak
        # one pair per job if Popen raised something else, a NUL in an argument say).
        for fd in (out_fd, err_fd):
            if fd is not None:
                os.close(fd)
    tell_guardian(proc.pid)  # a session leader's pid is its process group id
    return proc


def _wait(proc: subprocess.Popen, timeout: float | None, usage: Usage) -> tuple[bool, int]:
    """Wait for the job (past ``timeout``: SIGTERM its group, then SIGKILL after
    ``KILL_GRACE``), then kill what is left of its group, reap it and sweep its
    orphans, adding what each used to ``usage``; (timed out, the signal sent)."""
    pgid = pid = proc.pid
    timed_out = group_gone = False
    sent = 0
    status = rusage = None
    try:
        if timeout is None:  # wait4 blocks until the exit, and reaps
            _, status, rusage = os.wait4(pid, 0)
        elif not _exited(pid, timeout):
            timed_out, sent = True, signal.SIGTERM
            killpg(pgid, signal.SIGTERM)
            # The grace is for the whole group: under ``sh -c`` the shell (the leader)
            # dies of SIGTERM at once while the real program is still cleaning up.
            group_gone = _group_ended(pgid, pid, KILL_GRACE, usage)
            if not group_gone:
                sent = signal.SIGKILL
                killpg(pgid, signal.SIGKILL)
    finally:
        # Whatever the command left running in its group (background jobs, a pipeline's
        # other half) ends with it: a batch job is its whole process tree.
        if not group_gone:  # an empty group's id may already be another's
            killpg(pgid, signal.SIGKILL)
        if status is None:
            # wait4, not Popen.wait: the kernel's account of what the job (and every
            # descendant it reaped) used comes with the exit status, and only there.
            reaped = _REAPED.pop(pid, None)  # a wait4 _waitid made already, if any
            _, status, rusage = reaped if reaped is not None else os.wait4(pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not reap it
        if rusage is not None:
            usage.add(rusage)
        tell_guardian(0)  # the group is gone: nothing for the guardian to kill any more
        sweep_orphans(usage)
    return timed_out, int(sent)


def _sizes(spec: JobSpec) -> tuple[int, int]:
    return file_size(spec.stdout_path), file_size(spec.stderr_path)


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


def file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _exited(pid: int, timeout: float | None) -> bool:
    """Wait up to ``timeout`` s (None: for ever) for ``pid`` to exit, without reaping
    it where waitid(WNOWAIT) exists (its rusage comes with the reaping; where it does
    not, ``_waitid`` keeps what wait4 said); True if it exited.

    A pidfd (Linux 5.3+) wakes exactly when the process exits, so a short job's result
    is not held back; elsewhere ``_waitid`` is polled.
    """
    if timeout is None:
        _waitid(pid, 0)
        return True
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        deadline = time.monotonic() + timeout
        while not _waitid(pid, os.WNOHANG):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
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
    return _waitid(pid, os.WNOHANG)


def _group_ended(pgid: int, leader: int, grace: float, usage: Usage) -> bool:
    """Wait up to ``grace`` s for every process of group ``pgid`` to exit; True if it
    emptied. Members that are this worker's children (the leader; on Linux, orphans
    reparented to this subreaper) are reaped as they exit, or their zombies would keep
    the group alive; the leader's ``wait4`` is kept in ``_REAPED`` for the caller."""
    deadline = time.monotonic() + grace
    while True:
        if leader not in _REAPED and _waitid(leader, os.WNOHANG) and leader not in _REAPED:
            _REAPED[leader] = os.wait4(leader, 0)
        kept = reap_zombies(usage, leader)
        if kept is not None:
            _REAPED[leader] = kept
        if not group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(GROUP_POLL)


GROUP_POLL = 0.02  # s between looks at a timed-out job's group during its grace


# What wait4 said of a job that _waitid had to reap to see it exit: no os.waitid (macOS
# before Python 3.13). The pid is then free before the group's last killpg, as it is
# after the blocking wait4 of a job without --timeout.
_REAPED: dict[int, tuple[int, int, resource.struct_rusage]] = {}


def _waitid(pid: int, flags: int) -> bool:
    if not hasattr(os, "waitid"):
        reaped = os.wait4(pid, flags & os.WNOHANG)
        if reaped[0]:
            _REAPED[pid] = reaped
        return bool(reaped[0])
    while True:
        try:
            return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | flags) is not None
        except InterruptedError:
            continue
