"""Issue 35, item 2: under fork, no worker is forked from a process where other threads
run. Workers started while the pool's own threads exist (a ProcessPoolExecutor's
replacements and recycles, from its driver thread) come from the pool's zygote, forked
at the pool's start (``pipepool.worker._zygote``).

The programs below run in a fresh interpreter, which has no threads of its own (pytest's
timeout thread would count as one): every fork in them is recorded with the number of
threads the forking process had (``os.register_at_fork``), and Python 3.12+'s warning
about forking a multi-threaded process is printed each time (made an error, it is
swallowed: os.fork() cannot raise it), and must not be. Run this file with 3.12 and
3.13 as well (the command is in docs/design.md, "The zygote").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

import proc_table
import tasks
from helpers import ENV, Executors, Recorder, wait_for

BOUND = 60.0  # s: a bound on real conditions, never a sleep
WARNING = "multi-threaded, use of fork()"
SHOWN = "This process:DeprecationWarning"  # the -W filter that prints the fork warning

# Records each fork: pid of the forking process and its thread count then.
RECORDER = r"""
import os, threading, sys, json, time
_log = os.open(os.environ["FORK_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)

def _threads():
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2:].split()[17])
    except (OSError, ValueError, IndexError):
        return threading.active_count()

def _before_fork():
    os.write(_log, f"{os.getpid()} {_threads()}\n".encode())

os.register_at_fork(before=_before_fork)

def pid(_=None):
    return os.getpid()
"""

FUTURES = (
    RECORDER
    + r"""
import multiprocessing, signal
from pipepool import ProcessPoolExecutor

if __name__ == "__main__":
    fork = multiprocessing.get_context("fork")
    out = {}
    with ProcessPoolExecutor(2, mp_context=fork) as ex:
        set(ex.map(pid, range(50)))
        started = set(ex.worker_pids())
        for p in started:
            os.kill(p, signal.SIGKILL)
        out["killed"] = sorted(started)
        out["ran"] = sorted(set(ex.map(pid, range(50))))  # on replacements
    # Recycling after max_tasks_per_child, from the driver thread.
    with ProcessPoolExecutor(2, mp_context=fork, max_tasks_per_child=2) as ex:
        out["recycled"] = len(set(ex.map(pid, range(12))))
    print(json.dumps(out))
"""
)

LOCAL = (
    RECORDER
    + r"""
from pipepool import LocalExecutor

if __name__ == "__main__":
    ex = LocalExecutor(2, start_method="fork", max_tasks_per_child=2)
    ex.start()
    for i in range(12):
        ex.queue(i, pid)
    pids = set()
    deadline = time.monotonic() + 60
    while ex.has_work() and time.monotonic() < deadline:
        ex.sync(timeout=0.01)
    for event in ex.get_event_buffer().values():
        pids.add(event.result)
    ex.end()
    print(json.dumps({"recycled": len(pids), "started": ex.stats()["workers_started"]}))
"""
)


@pytest.fixture
def executors(one_impl: str):
    """Fork LocalExecutors, each terminated after the test."""
    made = Executors(one_impl, "fork")
    yield made
    made.close()


def result_of(ex, key, fn, *args):
    """Queue one task and run rounds until its outcome; its result."""
    ex.queue(key, fn, *args)
    rec = Recorder(ex)
    rec.run_until(lambda: key in rec.terminal, BOUND)
    event = rec.terminal[key]
    assert event.exception is None, event.exception
    return event.result


def run_program(source: str, tmp_path) -> tuple[dict, list[tuple[int, int]], str]:
    """Run ``source`` in a fresh interpreter, DeprecationWarnings errors but the fork
    warning's, which is printed; its JSON output, its forks (pid, threads), its stderr."""
    log = tmp_path / "forks.log"
    env = dict(ENV, FORK_LOG=str(log))
    proc = subprocess.run(
        # Every other DeprecationWarning an error; the fork warning printed each time:
        # made an error, CPython swallows it in os.fork() (it cannot raise there).
        [sys.executable, "-W", "error::DeprecationWarning", "-W", f"always:{SHOWN}", "-c", source],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=BOUND * 2,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    forks = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    return json.loads(proc.stdout.splitlines()[-1]), forks, proc.stderr  # type: ignore[return-value]


def test_futures_replacements_fork_from_a_single_threaded_process(tmp_path):
    """Killed workers are replaced, and recycled ones too, without one fork from the
    parent while its driver thread runs: each fork's process had one thread."""
    out, forks, stderr = run_program(FUTURES, tmp_path)
    assert out["ran"] and not set(out["ran"]) & set(out["killed"])
    assert out["recycled"] >= 6  # 12 tasks, 2 per worker
    assert forks, "no fork recorded"
    threaded = [f for f in forks if f[1] != 1]
    assert not threaded, f"forks from a multi-threaded process (pid, threads): {threaded}"
    assert WARNING not in stderr


def test_local_executor_recycling_forks_single_threaded(tmp_path):
    """A LocalExecutor recycling its workers (max_tasks_per_child) in a program without
    threads: every fork single-threaded, no warning."""
    out, forks, stderr = run_program(LOCAL, tmp_path)
    assert out["recycled"] >= 6 and out["started"] >= 6
    assert all(threads == 1 for _, threads in forks), forks
    assert WARNING not in stderr


SETTLE = (
    RECORDER
    + r"""
import _thread
from pipepool.host import thread_listed
from pipepool.worker import zygote

real_sleep = time.sleep
naps = []
time.sleep = lambda s: (naps.append(s), real_sleep(s))[1]
# A C library's thread (numpy's BLAS starts one at import): the kernel counts it,
# threading does not, and it never ends.
held = _thread.allocate_lock()
held.acquire()
_thread.start_new_thread(held.acquire, ())
while zygote.threads() < 2:
    real_sleep(0.001)
zygote.settle()
library = len(naps)
# A thread a pool here ended (a joined driver), still running its last instructions.
told = _thread.allocate_lock()
told.acquire()
tids = []
def ending():
    tids.append(threading.get_native_id())
    told.release()
    real_sleep(0.02)
_thread.start_new_thread(ending, ())
told.acquire()
zygote.ended(tids[0])
zygote.settle()
print(json.dumps({"library": library, "ending": len(naps) - library,
                  "listed_after": thread_listed(tids[0])}))
"""
)


def test_the_zygote_waits_for_a_thread_a_pool_ended_and_not_for_a_librarys(tmp_path):
    """``settle`` (before the zygote's fork) waits for a thread a pool here joined to be
    gone from the kernel's count, and not for a thread of a C library, which never ends:
    it waited for any thread the kernel counted and Python did not, so every fork pool
    in a program that imported numpy waited the whole bound (50 ms) before its zygote."""
    out, _, _ = run_program(SETTLE, tmp_path)
    assert out["library"] == 0, out
    assert out["ending"] > 0 and out["listed_after"] is False, out


# Each fork of the parent with whether a task was in flight then (the zygote's must come
# after the first task was sent), and where each worker came from.
ORDER = r"""
import json, os, sys, time
import pipepool
from pipepool import LocalExecutor, ProcessPoolExecutor
import multiprocessing

forks = []
pools = []

def _before():
    if os.getpid() != parent:
        return
    ex = pools[-1] if pools else None
    sent = bool(ex) and any(w.in_flight for w in ex._workers.values())
    forks.append({"workers": len(ex._workers) if ex else 0, "sent": sent})

def ppid(_=None):
    return os.getppid()

if __name__ == "__main__":
    parent = os.getpid()
    os.register_at_fork(before=_before)
    out = {}
    if sys.argv[1] == "futures":
        with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("fork")) as pool:
            pools.append(pool._driver.executor)
            out["first"] = pool.submit(ppid).result()
            out["zygote"] = pools[-1]._zygote.process.pid
            out["later"] = sorted(set(pool.map(ppid, range(200))))
    else:
        ex = LocalExecutor(2, start_method="fork")
        pools.append(ex)
        ex.start()
        out["at_start"] = len(forks)
        ex.queue("a", ppid)
        while ex.has_work():
            ex.sync(timeout=0.01)
        out["first"] = ex.get_event_buffer()["a"].result
        out["zygote"] = ex._zygote.process.pid
        ex.end()
    out["parent"] = parent
    out["forks"] = forks
    print(json.dumps(out))
"""


def test_the_zygote_is_forked_after_the_first_task_is_sent(tmp_path):
    """Issue 44.1: a fork pool's first result waits for one fork, not the zygote's too.
    ProcessPoolExecutor's first submit forks one worker from the parent and sends it the
    call, then forks the zygote, which forks every later worker; a LocalExecutor in a
    program without threads forks nothing at start(), and its first round forks the
    worker the task needs, sends it the task, then forks the zygote."""
    for face in ("futures", "local"):
        proc = subprocess.run(
            [sys.executable, "-c", ORDER, face],
            capture_output=True,
            text=True,
            env=ENV,
            cwd=tmp_path,
            timeout=BOUND * 2,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.splitlines()[-1])
        forks = out["forks"]
        assert out["first"] == out["parent"], f"{face}: the first worker is the parent's child"
        # One worker for the one task, then the zygote, with that task sent already.
        assert forks == [{"workers": 0, "sent": False}, {"workers": 1, "sent": True}], face
        if face == "futures":  # every other worker came from the zygote
            assert out["later"] and set(out["later"]) <= {out["parent"], out["zygote"]}
            assert out["zygote"] in out["later"], out
        else:
            assert out["at_start"] == 0


QUICK = r"""
import multiprocessing
from pipepool import ProcessPoolExecutor

if __name__ == "__main__":
    fork = multiprocessing.get_context("fork")
    for _ in range(30):
        with ProcessPoolExecutor(2, mp_context=fork) as pool:
            pool.submit(abs, -1).result()
    print("done")
"""


def test_a_pool_closed_at_once_leaves_its_zygote_nothing_to_say(tmp_path):
    """Short-lived fork pools: each one's zygote is told to exit (shutdown closes its
    socket beside the workers' pipes) maybe before it has said a word; it exits quietly
    (it printed a BrokenPipeError traceback when its READY found the socket closed)."""
    proc = subprocess.run(
        [sys.executable, "-c", QUICK],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=BOUND * 2,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    assert proc.stderr == "", proc.stderr


_SEEN = "at start"


def seen(_=None) -> str:
    return _SEEN


@pytest.mark.filterwarnings(
    "ignore:This process.*multi-threaded:DeprecationWarning"
)  # its own thread
def test_a_replacement_sees_the_program_as_the_zygote_forked_it(executors):
    """A worker the zygote forks is a copy of the program when the pool's first round
    forked the zygote, not of the program now (docs/guides/futures.md, the differences
    table). The pool's first worker is forked from here, threads or not."""
    global _SEEN
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="a user thread")
    thread.start()  # the parent is threaded: workers after the first come from the zygote
    try:
        ex = executors(1)
        first = result_of(ex, "a", os.getpid)
        assert first in proc_table.children(os.getpid()), "the first worker is not forked here"
        assert ex._zygote is not None
        _SEEN = "changed after the first round"
        os.kill(first, signal.SIGKILL)
        assert result_of(ex, "b", seen) == "at start"
    finally:
        _SEEN = "at start"
        stop.set()
        thread.join()


@pytest.mark.filterwarnings(
    "ignore:This process.*multi-threaded:DeprecationWarning"
)  # its own thread
def test_a_stale_fd_number_never_closes_the_zygotes_own_end(executors):
    """The zygote closes the parent's pipepool fds it inherited (their numbers, noted when
    opened); its own end of its socket pair is new, and may reuse a number on that list
    if one closed without leaving it: a fresh-clone CI run had the zygote close its own
    socket ("Bad file descriptor") and the pool fail. Every closed number below 512 on
    the list, the zygote still serves every replacement."""
    from pipepool.executor import _state

    stale = {fd for fd in range(3, 512) if not tasks.is_open(fd)} - _state._PARENT_FDS
    _state._PARENT_FDS.update(stale)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="a user thread")
    thread.start()  # the parent is threaded: workers come from the zygote
    try:
        ex = executors(1, max_tasks_per_child=1)  # every task after the first: a replacement
        pids = {result_of(ex, i, os.getpid) for i in range(4)}
        assert len(pids) == 4
        assert ex.stats()["worker_crashes"] == 0
        assert ex._zygote is not None and not ex._zygote.dead  # they came from it
    finally:
        stop.set()
        thread.join()
        _state._PARENT_FDS.difference_update(stale)


def test_the_zygote_and_its_workers_die_with_the_parent(tmp_path):
    """SIGKILL the parent: its zygote and the workers the zygote forked exit (lifeline)."""
    script = (
        RECORDER
        + r"""
import threading
from pipepool import LocalExecutor
if __name__ == "__main__":
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    ex = LocalExecutor(2, start_method="fork")
    ex.start()
    for i in range(2):
        ex.queue(i, time.sleep, 3600)
    deadline = time.monotonic() + 60
    while len(ex.running) < 2 and time.monotonic() < deadline:
        ex.sync(timeout=0.01)
    print(ex._zygote.process.pid, *ex.worker_pids(), flush=True)
    time.sleep(3600)
"""
    )
    env = dict(ENV, FORK_LOG=str(tmp_path / "forks.log"))
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]  # type: ignore[union-attr]
    finally:
        proc.kill()
        proc.wait(BOUND)
        proc.stdout.close()  # type: ignore[union-attr]
    assert len(pids) == 3, pids
    gone = wait_for(lambda: not any(proc_table.alive(p) for p in pids), timeout=10)
    left = [p for p in pids if proc_table.alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert gone, f"outlived their parent: {left}"


@pytest.mark.filterwarnings(
    "ignore:This process.*multi-threaded:DeprecationWarning"
)  # its own thread
def test_a_pool_whose_zygote_died_forks_its_workers_itself(executors):
    """The zygote killed: the workers it forked are still seen to exit (with LOST_EXIT)
    and replaced, by forks from the parent, and the pool runs on."""
    from pipepool.worker.zygote import LOST_EXIT

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="a user thread")
    thread.start()
    try:
        ex = executors(1)
        first = result_of(ex, "a", os.getpid)
        zygote = ex._zygote
        assert first not in {os.getpid(), zygote.process.pid}
        os.kill(zygote.process.pid, signal.SIGKILL)
        assert wait_for(lambda: zygote.process.exitcode is not None, BOUND)
        os.kill(first, signal.SIGKILL)
        second = result_of(ex, "b", os.getpid)
        assert second != first
        assert zygote.dead and zygote.exitcode(first) == LOST_EXIT
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_only_fork_pools_have_a_zygote(executors, method):
    ex = executors(1, start_method=method)
    assert ex._zygote is None


@pytest.mark.filterwarnings("ignore:This process.*multi-threaded:DeprecationWarning")  # its thread
def test_the_exit_of_a_worker_the_zygote_forked_is_seen(executors):
    """A worker the zygote forked exits at once, its replacement is forked in the same
    breath: the zygote's two replies (its exit, the new pid) may come in one read, and
    the exit must not wait in the buffer for a later one (it did: the pool hung)."""
    from pipepool import WorkerLostError

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="a user thread")
    thread.start()
    try:
        for _ in range(10):
            ex = executors(1)
            ex.queue("before", os.getpid)
            ex.queue("exit", os._exit, 3)
            for i in range(3):
                ex.queue(i, os.getpid)
            rec = Recorder(ex)
            rec.run_until(lambda rec=rec: len(rec.terminal) == 5, BOUND)
            error = rec.terminal["exit"].exception
            assert isinstance(error, WorkerLostError) and error.exitcode == 3
            ex.end()
    finally:
        stop.set()
        thread.join()
