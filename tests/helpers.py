"""What the tests share, in one home: the loops and start methods under test (and both
twins at once), polling, the LocalExecutor factory, the event recorder, task-run logs and
the stress rows' checks, the futures tests' waits, the Dask cluster the ClusterExecutor
tests share, and ``pipepool run`` in a subprocess. Fixtures are in conftest.py (the
futures room's own in tests/futures/conftest.py); task functions (imported by name in
workers) in tasks.py, fault_tasks.py, death_tasks.py, futures_tasks.py and
cluster_tasks.py; who is running and what is open in proc_table.py; the leak check in
leakcheck.py.

``pipepool run`` jobs that could outlive a test carry a unique marker in their command
line (a ``sleep`` duration such as ``1000.4711``); ``survivors(marker)`` finds any
process still carrying it via /proc, so "nothing is left running" is checked, not assumed.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import itertools
import os
import select
import signal
import subprocess
import sys
import termios
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING

import leakcheck
import proc_table
import tasks
from pipepool import Event, LocalExecutor, State

if TYPE_CHECKING:  # pytest only for the marks: benchmarks import this module without it
    import pytest

START_METHODS = ["fork", "spawn", "forkserver"]
FUTURE_WAIT = 30.0  # s: upper bound on any single future's result in the futures tests
# Subprocesses (the CLI, the Dask cluster's host) run against whatever `import pipepool`
# finds here: the installed package in CI, the source tree with PYTHONPATH=src.
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
ENV.pop("PIPEPOOL_PROGRESS", None)


def implementations() -> list[str]:
    """Both twins, unless PIPEPOOL_IMPL pins one (a pure build sets it to "python")."""
    forced = os.environ.get("PIPEPOOL_IMPL", "").strip().lower()
    if forced in ("python", "cython"):
        return [forced]
    return ["python", "cython"]


def twins():
    """(pure, compiled) loop modules; the compiled one must load unless a pure build is
    under test."""
    import pytest

    from pipepool import loop as _impl

    if os.environ.get("PIPEPOOL_IMPL", "").strip().lower() == "python":
        pytest.skip("PIPEPOOL_IMPL=python: the compiled loop is not part of this build")
    return _impl.load("python")[1], _impl.load("cython")[1]  # ImportError fails the test


def wait_for(
    predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.02
) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` s have passed; its last value.
    For real processes and files, whose changes no event announces; callers assert it
    (``assert wait_for(...), "what did not come"``), so a condition that never comes
    fails the test instead of sleeping through it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


ORPHAN_GRACE = 2.0  # s what a SIGKILLed parent left has to go, once it could have noticed
# What a half-started worker runs before it can notice its parent's death (its start-up
# watch starts at pipepool's first import: pipepool._startup_watch).
_NOTICING = "from multiprocessing.spawn import spawn_main; import pipepool"


def orphan_deadline(grace: float = ORPHAN_GRACE) -> float:
    """The monotonic time by which what a parent SIGKILLed just now left must be gone:
    ``grace`` after a fresh interpreter, started now, has done what a half-started worker
    must do to notice (start, import multiprocessing's spawn and pipepool). Quiet, that
    is ~0.1 s; on a loaded machine the scheduler may leave a new process unrun for
    seconds (a spawn child forked 50 ms before the kill had 10 ms of CPU 2 s later, still
    in the interpreter's start, at load 15 on 2 CPUs), and no process can exit on its own
    before it runs."""
    subprocess.run([sys.executable, "-c", _NOTICING], check=True, timeout=120)
    return time.monotonic() + grace


def warm_up(pool, workers: int = 2) -> None:
    """Start ``workers`` workers of a concurrent.futures pool now, so start-up time does
    not count in timed checks."""
    import futures_tasks

    fs = [pool.submit(futures_tasks.sleep_return, 0.2) for _ in range(workers)]
    for f in fs:
        f.result(timeout=FUTURE_WAIT)


def read_pid(path: Path, limit: float = FUTURE_WAIT) -> int:
    """The pid a task wrote to ``path``, once it is there."""
    assert wait_for(path.exists, limit), f"{path.name} did not appear"
    return int(path.read_text())


class Executors:
    """Builds LocalExecutors on one loop implementation (``start_method`` is the default
    for each call) and terminates each one at ``close()``, whatever the test left."""

    def __init__(self, impl: str, start_method: str = "fork") -> None:
        self.impl = impl
        self.start_method = start_method
        self.made: list[LocalExecutor] = []

    def build(
        self, parallelism: int = 2, start_method: str | None = None, **kwargs
    ) -> LocalExecutor:
        """An executor not started yet (still terminated at ``close()``)."""
        ex = LocalExecutor(
            parallelism,
            start_method=start_method or self.start_method,
            loop_impl=self.impl,
            **kwargs,
        )
        self.made.append(ex)
        return ex

    def __call__(
        self, parallelism: int = 2, start_method: str | None = None, **kwargs
    ) -> LocalExecutor:
        ex = self.build(parallelism, start_method, **kwargs)
        ex.start()
        return ex

    def close(self) -> None:
        for ex in self.made:
            ex.terminate()
        self.made.clear()


class Recorder:
    """Pops an executor's event buffer after every round, so no terminal event can be
    overwritten unseen, and checks that no dispatch of a key is ever reported terminal
    twice (a key queued again while outstanding is one more dispatch: ``Event.dispatch``)."""

    def __init__(self, ex) -> None:
        self.ex = ex
        self.terminal: dict[Hashable, Event] = {}  # key -> its newest terminal event
        self.outcomes: dict[Hashable, list[Event]] = defaultdict(list)  # key -> every
        # terminal event of it, in the order they were handed out
        self.running_seen: dict[Hashable, list[int | None]] = {}  # key -> its RUNNING
        # events' pids, in order (a key retried elsewhere has several)
        self.duplicates: list[tuple[Hashable, int]] = []  # (key, dispatch) ended twice
        self.history: dict[Hashable, list[str]] = defaultdict(list)
        self._ended: dict[Hashable, set[int]] = defaultdict(set)  # key -> the dispatches
        # seen ended while the key stayed outstanding (numbering restarts once it is free)

    def take(self) -> None:
        events = self.ex.get_event_buffer()
        for key, event in events.items():
            self.history[key].append(event.state.value)
            if event.state.terminal:
                if event.dispatch in self._ended[key]:
                    self.duplicates.append((key, event.dispatch))
                self._ended[key].add(event.dispatch)
                self.terminal[key] = event
                self.outcomes[key].append(event)
            else:
                self.running_seen.setdefault(key, []).append(event.pid)
        for key in events:
            if key not in self.ex._held and key not in self.ex._events:
                self._ended.pop(key, None)  # free: its next dispatch is number 1 again

    def round(self, timeout: float = 0.01) -> None:
        self.ex.sync(timeout=timeout)
        self.take()

    def run_until(
        self, predicate: Callable[[], bool], limit: float = 60.0, timeout: float = 0.01
    ) -> None:
        deadline = time.monotonic() + limit
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not reached in {limit}s; stats={self.ex.stats()}")
            self.round(timeout)

    def run_while_progressing(
        self, predicate: Callable[[], bool], stall: float = 60.0, timeout: float = 0.01
    ) -> None:
        """Rounds until ``predicate()``, failing only once no task has ended for ``stall``
        seconds: a long batch's wall time is the machine's load (a bound on it failed a
        loaded run 985 tasks into 1,024), a stall is a hang."""
        while not predicate():
            idle = time.monotonic() - self.ex.stats()["last_progress"]
            if idle > stall:
                raise AssertionError(f"no task ended in {idle:.0f}s; stats={self.ex.stats()}")
            self.round(timeout)

    def finish(self, limit: float = 120.0) -> None:
        self.run_until(lambda: not self.ex.has_work(), limit)
        self.ex.end()
        self.take()


def runs(log: str | Path) -> Counter:
    """How many times each key's task body ran: the first word of each line that
    ``tasks.record`` or ``tasks.record_pid`` appended to ``log``."""
    if not os.path.exists(log):
        return Counter()
    with open(log) as f:
        return Counter(line.split()[0] for line in f if line.strip())


def exactly_one_each(rec: Recorder, keys) -> None:
    """Every key ended with one terminal event: none missing, none extra, none twice."""
    assert not rec.duplicates, f"reported twice: {rec.duplicates[:10]}"
    missing = set(keys) - set(rec.terminal)
    extra = set(rec.terminal) - set(keys)
    assert not missing and not extra, (sorted(missing, key=str)[:10], sorted(extra, key=str)[:10])


def unread_bytes(fd: int) -> int:
    """Bytes waiting in the pipe ``fd`` reads (FIONREAD: every Unix, no /proc)."""
    pending = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, pending)
    return pending[0]


def sent_ahead(ex, rec: Recorder, keys) -> None:
    """Drive until the first key runs and every one of ``keys`` is held by a worker."""
    rec.run_until(lambda: keys[0] in rec.running_seen)
    rec.run_until(lambda: ex.stats()["tasks_running"] == len(keys))


def asking_only(ex) -> None:
    """Make ``ex`` cancel a task sent to one of its workers by asking the worker (CANCEL,
    REVOKE) on either loop: the parent forgets its claim rings (docs/design.md, "Cancel
    claims"), which only the compiled loop's pools have. Its workers keep deciding
    through theirs, as they do; a worker started later gets one again."""
    for w in ex._workers.values():
        w.claims = None


def behind_a_blocked_task(make, tmp_path, keys: str):
    """One worker, prefetch=4: "block" runs until ``release`` exists, and ``keys`` (each
    recording its run in ``log``) are queued behind it. Returns ``ex, rec, log, release``
    once "block" runs and the worker holds it and the first three keys."""
    log, release = str(tmp_path / "runs"), str(tmp_path / "release")
    ex = make(1, prefetch=4)
    ex.queue("block", tasks.wait_for, release)
    for key in keys:
        ex.queue(key, tasks.record, log, key)
    rec = Recorder(ex)
    sent_ahead(ex, rec, ["block", *keys[:3]])
    return ex, rec, log, release


def failures(rec: Recorder) -> dict:
    return {k: e for k, e in rec.terminal.items() if e.state is not State.SUCCESS}


# -- the stress rows' sizes (issue 8, hardening) -------------------------------------------

SLOW = os.environ.get("PIPEPOOL_SLOW") == "1"


def full_size_of(test: str) -> list[pytest.MarkDecorator]:
    """Marks for a scaled-up duplicate of ``test``, whose CI-sized version always runs."""
    import pytest

    return [
        pytest.mark.slow,
        pytest.mark.skipif(
            not SLOW,
            reason=f"full-size duplicate of {test}, which runs by default at CI "
            "size; run it with PIPEPOOL_SLOW=1",
        ),
    ]


# -- the Dask cluster the ClusterExecutor tests share -----------------------------------------

CLUSTER_WORKERS = 2
# A task whose worker dies runs once more elsewhere, then is reported lost: Dask's
# default (3 retries) would only make the crash cases slower, not different.
ALLOWED_FAILURES = 1
# s a test waits for a killed worker's replacement before the cluster is replaced: a
# nanny restarts one in 1-3 s on a loaded 2-core machine.
REPLACEMENT_BOUND = 30.0
# s for a kill the previous test ordered to land before the workers are counted: a
# ClusterExecutor's kill makes the worker die 20 ms after it answers (EXIT_DELAY).
KILL_SETTLE = 0.1
CLUSTER_HOST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster_host.py")


class ClusterHost:
    """tests/cluster_host.py in a subprocess: a Dask LocalCluster of ``CLUSTER_WORKERS``
    worker processes, its scheduler at ``scheduler_address``, its log in ``log``."""

    def __init__(self, log: Path) -> None:
        self.log = log
        with open(log, "ab") as stderr:  # the child's; the parent keeps no fd of it
            self.proc = subprocess.Popen(
                [sys.executable, CLUSTER_HOST, str(CLUSTER_WORKERS), str(ALLOWED_FAILURES)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=ENV,
            )
        try:
            self.scheduler_address = self._answer(60)
        except BaseException:
            self.close()
            raise

    def whole(self, timeout: float) -> bool:
        """True once every worker is registered (after ``KILL_SETTLE``); False if one is
        missing after ``timeout`` s."""
        self.proc.stdin.write(f"whole {KILL_SETTLE} {timeout}\n")
        self.proc.stdin.flush()
        return int(self._answer(timeout + 30)) == CLUSTER_WORKERS

    def _answer(self, timeout: float) -> str:
        ready = select.select([self.proc.stdout], [], [], timeout)[0]
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"the Dask cluster host did not answer:\n{self.tail()}")
        return line.strip()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        """Close the cluster (stdin's EOF), SIGKILL it if that takes over 60 s."""
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()

    def held(self) -> leakcheck.Held:
        return leakcheck.Held(
            pids={self.proc.pid},
            fds={f.fileno() for f in (self.proc.stdin, self.proc.stdout) if not f.closed},
        )


class SharedCluster:
    """The session's ClusterHost, whole for each test: a killed worker's replacement is
    waited for, and a cluster still short after ``REPLACEMENT_BOUND`` is replaced (with
    a warning quoting its log), so no test inherits the damage an earlier one did."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.host: ClusterHost | None = None
        self.replaced = 0

    def whole(self) -> ClusterHost:
        if self.host is not None and not self.host.whole(REPLACEMENT_BOUND):
            warnings.warn(
                f"the shared Dask cluster stayed short of {CLUSTER_WORKERS} workers for "
                f"{REPLACEMENT_BOUND} s and was replaced; its log:\n{self.host.tail()}",
                stacklevel=2,
            )
            self.close()
            self.replaced += 1
        if self.host is None:
            self.host = ClusterHost(self.folder / f"cluster-{self.replaced}.log")
        return self.host

    def held(self) -> leakcheck.Held:
        return self.host.held() if self.host is not None else leakcheck.Held()

    def close(self) -> None:
        if self.host is not None:
            self.host, host = None, self.host
            host.close()


def connect(cluster: ClusterHost, **kwargs):
    """A started ClusterExecutor on ``cluster``, once all its workers are there (a test
    may kill one before it connects again; its nanny is restarting it)."""
    from pipepool import ClusterExecutor

    ex = ClusterExecutor(cluster.scheduler_address, **kwargs)
    ex.start()
    ex.client.wait_for_workers(CLUSTER_WORKERS, timeout=60)
    return ex


def is_tblib(reducer) -> bool:
    """Whether a copyreg reducer is tblib's, which importing distributed registers for
    every exception class."""
    return getattr(getattr(reducer, "func", reducer), "__module__", "").startswith("tblib")


# -- pipepool run, through the real CLI in a subprocess ------------------------------------

_markers = itertools.count(1)


def marker() -> str:
    """Digits unique to this test run, usable as the fraction of a sleep duration."""
    return f"{os.getpid() % 10000:04d}{next(_markers):03d}"


def run_cli(
    *args: str,
    input: str | None = None,
    timeout: float = 60,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipepool", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV if env is None else env,
        cwd=cwd,
    )


def run_cli_impl(
    impl: str, *args: str, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``run_cli`` with the runner's executor on the loop ``impl`` ("python" or
    "cython", as the ``impl`` fixture gives it): ``PIPEPOOL_IMPL`` picks it in the runner
    and in its workers alike."""
    return run_cli(*args, input=input, timeout=timeout, env=dict(ENV, PIPEPOOL_IMPL=impl))


def remove_cgroup(path: str, limit: float = 10.0) -> None:
    """Remove a cgroup a test made, once its last member's exit is accounted (rmdir
    fails with EBUSY until then)."""
    deadline = time.monotonic() + limit
    while os.path.isdir(path):
        try:
            os.rmdir(path)
        except OSError:
            assert time.monotonic() < deadline, f"cannot remove {path}"
            time.sleep(0.05)


def start_cli(*args: str, cwd: Path | None = None, **kw) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pipepool", *args], env=ENV, cwd=cwd, text=True, **kw
    )


def survivors(mark: str, *, jobs_only: bool = False) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``mark``: the jobs, and
    the runner, its workers and their guardians when the marker is one of its arguments
    (forked processes keep their parent's command line). ``jobs_only``: just the jobs.
    From /proc, or ps where there is none (``proc_table``)."""
    python = sys.executable.encode()
    return [
        pid
        for pid, command in proc_table.live_commands().items()
        if mark.encode() in command and not (jobs_only and command.startswith(python))
    ]


def kill_survivors(mark: str) -> None:
    for pid in survivors(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def joblog_rows(path: Path, extra: list[str] | None = None) -> list[list[str]]:
    """The rows under GNU parallel's nine columns (and pipepool's own after them: CPUs
    with --pin, Noisy with --pin or --repeat; ``extra``: exactly these)."""
    lines = path.read_text().splitlines()
    header = lines[0].split("\t")
    assert header[9:] in ([], ["CPUs"], ["Noisy"], ["CPUs", "Noisy"]), header
    assert extra is None or header[9:] == extra, header
    assert header[:9] == [
        "Seq",
        "Host",
        "Starttime",
        "JobRuntime",
        "Send",
        "Receive",
        "Exitval",
        "Signal",
        "Command",
    ]
    return [line.split("\t") for line in lines[1:]]


TOPOLOGIES = Path(__file__).parent / "host" / "topologies"  # captured sysfs trees (README)


def captured_topology(folder: Path, name: str) -> Path:
    """The captured machine ``name`` (``tests/host/topologies/NAME.tar.gz``) unpacked in
    ``folder``: its root, holding ``sys/`` (and ``proc/`` where captured)."""
    import tarfile

    with tarfile.open(TOPOLOGIES / f"{name}.tar.gz") as tar:
        tar.extractall(folder, filter="data")
    return folder / name


def marked():
    """The body of a ``mark`` fixture: a fresh marker, then a check that no process
    carrying it is left (each test module wraps it in ``@pytest.fixture``)."""
    m = marker()
    yield m
    # A worker killed by the runner exits a moment later, and its guardian after it.
    wait_for(lambda: not survivors(m), timeout=3)
    left = survivors(m)
    kill_survivors(m)
    assert not left, f"processes left running: {left}"


FAKE_SUITE = "import pathlib\npathlib.Path({ran!r}).write_text('ran')\nraise SystemExit(3)\n"


def fake_checkout(folder: Path) -> Path:
    """Make ``folder`` look like a checkout's root whose benchmarks/suite.py, when
    imported, leaves the file this returns."""
    (folder / "benchmarks").mkdir(parents=True)
    (folder / "benchmarks" / "__init__.py").write_text("")
    ran = folder / "fake-suite-ran"
    (folder / "benchmarks" / "suite.py").write_text(FAKE_SUITE.format(ran=str(ran)))
    (folder / "pyproject.toml").write_text("")
    return ran
