"""The fork registry (``executor._state._PARENT_FDS``): the parent's pipepool fds, by
number, that a fork worker and a fork zygote close. A number listed after its fd closed
is another fd's once the number is reused, and the next fork closes that one: a file
the user's program holds, or the zygote's own socket (a fresh-clone CI run lost its pool
that way). So whatever a worker's end, every listed number names an open fd of this
process, a pool gives back every number it listed, and a pool made inside a worker
starts from none of its parent's."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest

import proc_table
import tasks
from helpers import ENV, Recorder, wait_for
from pipepool import TaskKilledError, WorkerLostError
from pipepool.executor import _state

pytestmark = pytest.mark.timeout(120)

BOUND = 60.0  # s for one task's outcome on a loaded machine
# Threads run here (a user's, or xdist's): fork warns; forking is the subject here.
FORK_WARNS = pytest.mark.filterwarnings("ignore:This process.*multi-threaded:DeprecationWarning")


def not_open() -> list[int]:
    """Listed numbers that name no open fd here."""
    return [fd for fd in sorted(_state._PARENT_FDS) if not tasks.is_open(fd)]


def run(ex, key, fn, *args):
    """Queue one task and run rounds until it ends; its terminal event."""
    ex.queue(key, fn, *args)
    rec = Recorder(ex)
    rec.run_until(lambda: key in rec.terminal, BOUND)
    return rec.terminal[key]


def test_every_worker_end_leaves_only_open_fds_listed(make):
    """A crash, a kill, a recycle and a stop (the pool's end, its zygote's too) each leave
    the registry naming open fds only, two pools sharing it; each pool's end gives back
    every number it listed."""
    before = set(_state._PARENT_FDS)
    other = make(1)
    assert run(other, "up", tasks.echo, 1).result == 1
    ex = make(1, max_tasks_per_child=2)
    assert run(ex, "a", tasks.echo, 1).result == 1
    assert not_open() == []
    assert isinstance(run(ex, "crash", tasks.kill_self).exception, WorkerLostError)
    assert not_open() == []
    ex.queue("held", tasks.sleep, 60)
    rec = Recorder(ex)
    rec.run_until(lambda: ex.kill("held") == 1, BOUND)
    rec.run_until(lambda: "held" in rec.terminal, BOUND)
    assert isinstance(rec.terminal["held"].exception, TaskKilledError)
    assert not_open() == []
    for i in range(3):  # two tasks a worker: one recycles
        assert run(ex, i, tasks.echo, i).result == i
    assert not_open() == []
    ex.end()
    assert not_open() == []
    other.end()
    assert not_open() == []
    assert before == _state._PARENT_FDS


@pytest.mark.parametrize("preload", [[], ["json"]])
def test_a_pool_ended_with_no_worker_gives_back_its_zygotes_fd(make, preload):
    """Its last worker recycled and not replaced, the pool ends with its zygote alone: it
    is told to exit first (its socket closed), and its number goes with it."""
    before = set(_state._PARENT_FDS)
    ex = make(1, max_tasks_per_child=1, preload=preload)
    assert run(ex, "a", tasks.echo, 1).result == 1
    Recorder(ex).run_until(lambda: not ex._workers, BOUND)
    if ex._zygote is None:  # spawn and forkserver make one only to preload
        assert ex.start_method != "fork" and not preload
    ex.end()
    assert not_open() == []
    assert before == _state._PARENT_FDS


def test_terminate_gives_back_every_listed_fd(make):
    before = set(_state._PARENT_FDS)
    ex = make(2)
    assert run(ex, "a", tasks.echo, 1).result == 1
    ex.queue("held", tasks.sleep, 60)
    rec = Recorder(ex)
    rec.run_until(lambda: ex.stats()["workers_busy"] == 1, BOUND)
    ex.terminate()
    assert not_open() == []
    assert before == _state._PARENT_FDS


@FORK_WARNS
@pytest.mark.parametrize("through", ["fork", "preload"])
def test_a_worker_inherits_no_listed_number(make, through):
    """A worker lists none of its parent's fds (a pool it makes lists only its own): the
    parent's it closed at start, or a later fd took their numbers."""
    ex = make(1, preload=["json"] if through == "preload" else [])
    assert run(ex, "up", tasks.echo, 1).result == 1
    assert _state._PARENT_FDS  # the parent lists its pool's
    assert run(ex, "listed", tasks.fork_registry).result == []


@FORK_WARNS
@pytest.mark.parametrize("through", ["fork", "preload"])
def test_no_worker_nor_zygote_holds_the_loops_wake_up_pipe(pool, through):
    """The loop's wake-up pipe is the parent's alone: a fork worker or zygote that kept
    its ends would hold another pool's write end (and its read end: bytes the parent
    waits for, a worker could take) for as long as it lives."""
    ex = pool(1, preload=["json"] if through == "preload" else [])
    assert ex._loop is not None
    readable, _ = ex._loop.watched()
    assert len(readable) == 1  # no worker's channel yet: the wake-up pipe's read end
    st = os.fstat(readable[0])
    wake = (st.st_dev, st.st_ino)
    held = run(ex, "pipes", tasks.pipes_held).result
    worker_at = sorted(fd for fd, pipe in held.items() if pipe == wake)
    assert ex._zygote is not None  # a fork pool's, once its first worker is started
    where = f"/proc/{ex._zygote.process.pid}/fd"

    def zygote_at() -> list[int]:
        found = []
        for fd in os.listdir(where):
            with contextlib.suppress(OSError):  # closed while listed: what it is for
                if os.readlink(f"{where}/{fd}") == f"pipe:[{wake[1]}]":
                    found.append(int(fd))
        return sorted(found)

    held_by_zygote: list[int] = []
    if proc_table.HAVE_PROC:  # another process's fds: /proc only
        # Forked after the first worker, maybe not serving yet: it closes them as it starts.
        wait_for(lambda: not zygote_at(), 10)
        held_by_zygote = zygote_at()
    assert (worker_at, held_by_zygote) == ([], []), "(worker's, zygote's) wake-up pipe fds"


# A fresh interpreter with one thread: its fork pool forks the first worker itself (the
# test process has threads, whose pools fork every worker from their zygote). The task
# gives its freed fd numbers to a file and makes a fork pool of its own.
NESTED = """
import json, sys
from pipepool import LocalExecutor
import tasks

ex = LocalExecutor(1, start_method="fork", loop_impl=sys.argv[1])
ex.start()
ex.queue("nested", tasks.nested_pool_keeps_my_files, sys.argv[2], sys.argv[1], 256)
while ex.has_work():
    ex.sync(timeout=0.05)
event = ex.get_event_buffer()["nested"]
ex.end()
if event.exception is not None:
    raise event.exception
from pipepool.executor import _state  # the pool ended: nothing of it listed
print(json.dumps([*event.result, sorted(_state._PARENT_FDS)]))
"""


def test_a_pool_in_a_worker_leaves_the_tasks_files_alone(impl, tmp_path):
    """A file a task holds under a number its worker freed (one of the parent's fds it
    closed at start) reaches the workers of a fork pool the task makes, open; and the
    outer pool, ended, lists nothing."""
    proc = subprocess.run(
        [sys.executable, "-c", NESTED, impl, str(tmp_path / "log")],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=BOUND * 2,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    given, lost, listed = json.loads(proc.stdout.splitlines()[-1])
    assert given > 0
    assert lost == []
    assert listed == []  # its zygote's socket too, though no worker came from it


@FORK_WARNS
def test_a_forked_child_starts_with_an_empty_registry(pool):
    """Any fork of this process (``os.fork`` too): the child's pools list only their own."""
    ex = pool(1)
    assert run(ex, "a", tasks.echo, 1).result == 1
    assert _state._PARENT_FDS
    pid = os.fork()
    if pid == 0:
        os._exit(0 if not _state._PARENT_FDS else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    ex.end()
