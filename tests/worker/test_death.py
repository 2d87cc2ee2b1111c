"""Issue 23, 7: a worker's death says its cause. A signal (sent by the task itself or from
outside: the kernel does not say which, and the words do not guess), a segfault (a
crash, quoted with its frames), an exit and the kernel's OOM killer each read
differently, and ``WorkerLostError.cause`` names which; ``pipepool run`` tells a job
that was killed from a job whose worker was.

OOM kills are told by a count the kernel keeps (``pipepool._oom``). The executor takes
the files to read as a parameter, so most tests here raise a fake count themselves; one
test meets the real OOM killer, in a memory cgroup of its own, where the machine lets it
make one (root and cgroup v1's memory controller).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import death_tasks
import tasks
from helpers import remove_cgroup
from pipepool import WorkerLostError
from pipepool._oom import Counter, _own_cgroups, rise, snapshot
from pipepool.executor import REAP_INTERVAL


def outcomes(ex, count: int, limit: float = 60.0) -> dict:
    """Run rounds until ``count`` keys ended; each ends once."""
    ended: dict = {}
    deadline = time.monotonic() + limit
    while len(ended) < count:
        assert time.monotonic() < deadline, f"only {sorted(ended)} ended within {limit} s"
        ex.sync(0.05)
        for key, event in ex.get_event_buffer().items():
            if event.state.terminal:
                assert key not in ended, f"{key!r} ended twice"
                ended[key] = event
    return ended


@pytest.fixture
def counter(tmp_path: Path) -> Counter:
    """A fake count of OOM kills, laid out as cgroup v2's memory.events is."""
    path = tmp_path / "memory.events"
    path.write_text("low 0\nhigh 0\nmax 0\noom 7\noom_kill 0\n")
    return Counter(str(path), "fake cgroup /test")


# -- each cause reads as itself --------------------------------------------------------------

DEATHS = {
    # cause: (task, args, exit code, words the message has, words it must not have)
    # The task kills its own worker: the kernel does not tell the parent who sent the
    # signal, so the words name both senders and claim neither.
    "signal": (
        tasks.kill_self,
        (signal.SIGKILL,),
        -signal.SIGKILL,
        [
            "killed by SIGKILL while running task 'victim', sent by the task itself or "
            "from outside",
            "the kernel does not say which",
            "counted no OOM kill",
        ],
        ["SIGKILL from outside", "crashed", "OOM killer", "exited"],
    ),
    "signal SIGTERM": (
        tasks.kill_self,
        (signal.SIGTERM,),
        -signal.SIGTERM,
        ["killed by SIGTERM while running task 'victim', sent by the task itself or from outside"],
        ["SIGTERM from outside", "crashed", "OOM killer", "exited"],
    ),
    "crash": (
        tasks.segfault,
        (),
        -signal.SIGSEGV,
        ["crashed", "killed by SIGSEGV", "Fatal Python error: Segmentation fault", " in segfault"],
        ["from outside", "OOM killer", "exited"],
    ),
    "exit": (
        tasks.exit_process,
        (3,),
        3,
        ["exited with code 3", "ended itself"],
        ["killed by", "crashed", "OOM killer"],
    ),
}


@pytest.mark.parametrize("cause", list(DEATHS))
def test_each_death_names_its_cause(make, counter: Counter, cause: str) -> None:
    task, args, exitcode, says, never = DEATHS[cause]
    ex = make(1)
    ex._oom_counters = (counter,)  # before any worker starts
    ex.queue("victim", task, *args)
    ex.queue("after", tasks.echo, 5)
    ended = outcomes(ex, 2)
    error = ended["victim"].exception
    assert type(error) is WorkerLostError, error
    assert error.cause == cause.split()[0] and error.exitcode == exitcode
    message = str(error)
    assert "'victim'" in message
    for words in says:
        assert words in message, f"{words!r} not in {message!r}"
    for words in never:
        assert words not in message, f"{words!r} in {message!r}"
    assert ended["after"].result == 5  # only its own task failed


# -- the OOM killer ------------------------------------------------------------------------


def test_a_rise_is_read_from_the_counter_file(counter: Counter, tmp_path: Path) -> None:
    before = snapshot((counter,))
    assert before == (0,)  # the oom_kill line, not "oom 7" above it
    assert rise(before, (counter,)) is None
    Path(counter.path).write_text("low 0\nhigh 0\nmax 0\noom 8\noom_kill 2\n")
    assert rise(before, (counter,)) == "the OOM kill count of fake cgroup /test rose from 0 to 2"
    gone = Counter(str(tmp_path / "missing"), "gone")
    assert snapshot((gone,)) == (None,) and rise((None,), (gone,)) is None
    # Several counters: the first that rose is named, an unreadable one never is.
    assert rise((None, 0), (gone, counter)) == (
        "the OOM kill count of fake cgroup /test rose from 0 to 2"
    )


def test_sigkill_while_the_count_rises_names_the_oom_killer(make, counter: Counter) -> None:
    ex = make(1)
    ex._oom_counters = (counter,)  # before any worker starts
    ex.queue("hog", death_tasks.count_then_die, counter.path)
    error = outcomes(ex, 1)["hog"].exception
    assert isinstance(error, WorkerLostError) and error.cause == "oom"
    assert "killed by the kernel's OOM killer while running task 'hog'" in str(error)
    assert "fake cgroup /test rose from 0 to 1" in str(error)


def test_a_count_that_rose_before_the_task_began_is_not_its_cause(make, counter: Counter) -> None:
    # The count rises while the worker is idle (another process's OOM kill): the
    # worker's baseline moves with it, and its later SIGKILL is no OOM kill.
    ex = make(1)
    ex._oom_counters = (counter,)  # before any worker starts
    ex.queue("first", tasks.echo, 1)
    outcomes(ex, 1)
    Path(counter.path).write_text("oom_kill 5\n")
    idle_until = time.monotonic() + 3 * REAP_INTERVAL  # a periodic reap reads the count
    while time.monotonic() < idle_until:
        ex.sync(0.05)
    ex.queue("killed", tasks.kill_self, signal.SIGKILL)
    error = outcomes(ex, 1)["killed"].exception
    assert error.cause == "signal" and "killed by SIGKILL while running task" in str(error)
    assert "counted no OOM kill" in str(error)


def test_where_nothing_counts_oom_kills_the_message_says_so(make) -> None:
    ex = make(1)
    ex._oom_counters = ()  # before any worker starts
    ex.queue("killed", tasks.kill_self, signal.SIGKILL)
    error = outcomes(ex, 1)["killed"].exception
    assert error.cause == "signal"
    assert "by the OOM killer, or sent by the task itself or from outside" in str(error)
    assert "does not count OOM kills" in str(error)


def _own_memory_cgroup() -> str | None:
    """This process's cgroup v1 memory group, if the test may make one inside it."""
    own = _own_cgroups()[1]
    if sys.platform != "linux" or os.geteuid() != 0 or own is None:
        return None
    path = death_tasks.CGROUP_V1_MEMORY + own.rstrip("/")
    if not os.path.isfile(os.path.join(path, "memory.limit_in_bytes")):
        return None
    return path if os.access(path, os.W_OK) else None


# The real OOM killer needs a memory cgroup of its own: root and cgroup v1's memory
# controller. Where there is none, the fake-count tests above cover the detection.
needs_memory_cgroup = pytest.mark.skipif(
    _own_memory_cgroup() is None,
    reason="the real OOM killer needs a memory cgroup of its own: root and cgroup v1's "
    "memory controller (the fake-count tests above cover the detection everywhere)",
)


@needs_memory_cgroup
def test_the_real_oom_killer_is_named() -> None:
    # The victim moves its worker into a new 64 MiB cgroup inside this process's own and
    # fills it: the kernel kills it there, and nothing outside that cgroup feels the
    # pressure. Its count (v1) is the new cgroup's own, so the machine's count
    # (/proc/vmstat) is the one that rises.
    from pipepool import LocalExecutor

    parent = _own_memory_cgroup()
    assert parent is not None
    group = os.path.join(parent, f"pipepool-test-oom-{os.getpid()}")
    try:
        with LocalExecutor(1, start_method="fork") as ex:
            ex.queue("hog", death_tasks.fill_own_cgroup, group, 64 << 20)
            ex.queue("after", tasks.echo, 7)
            ended = outcomes(ex, 2)
    finally:
        remove_cgroup(group)
    error = ended["hog"].exception
    assert isinstance(error, WorkerLostError) and error.cause == "oom", error
    assert "killed by the kernel's OOM killer while running task 'hog'" in str(error)
    assert ended["after"].result == 7


# -- pipepool run: the job, or its worker --------------------------------------------------


JOBS = [":::", "kill -9 $$", "kill -9 $PPID"]  # the job's shell; its parent, the worker


def test_run_tells_a_killed_job_from_a_killed_worker(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pipepool", "run", "-j", "1", "--json", *JOBS],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("failed (2)"))
    listed = {line.split()[0]: line for line in lines[start + 1 : start + 3]}
    assert "the job was killed by SIGKILL" in listed["#1"], proc.stderr
    # The job killed its own worker: the words do not claim it came from outside.
    assert "its worker pid" in listed["#2"] and "killed by SIGKILL" in listed["#2"]
    assert "sent by the task itself or from outside" in listed["#2"]
    assert "the job was" not in listed["#2"] and "its worker" not in listed["#1"]
    records = {r["seq"]: r for r in json.loads(proc.stdout.splitlines()[-1])["records"]}
    assert records[1]["error"] is None and records[1]["signal_name"] == "SIGKILL"
    assert records[1]["oom"] is None  # no count of OOM kills rose: a plain SIGKILL
    assert records[2]["error"].startswith("its worker pid")
    assert "counted no OOM kill" in records[2]["error"] or "OOM kills" in records[2]["error"]


@needs_memory_cgroup
@pytest.mark.parametrize(
    ("options", "said", "record"),
    [
        (["--no-shell"], "the job was killed by the kernel's OOM killer (the OOM kill count", 9),
        ([], "exit 137, a process of the job killed by the kernel's OOM killer (the OOM", 0),
    ],
    ids=["the-job", "its-shells-child"],
)
def test_run_names_the_oom_killer_of_a_job(
    tmp_path: Path, options: list[str], said: str, record: int
) -> None:
    # The job's Python process moves itself into a 64 MiB cgroup and fills it. Without a
    # shell, the OOM killer's victim is the job itself (SIGKILL); with one, the shell
    # reports its child's death as exit 137. A plain SIGKILL reads as one: test above.
    parent = _own_memory_cgroup()
    assert parent is not None
    group = os.path.join(parent, f"pipepool-test-run-oom-{os.getpid()}")
    code = f"import death_tasks; death_tasks.fill_own_cgroup({group!r}, 64 << 20)"
    hog = shlex.join(["env", f"PYTHONPATH={Path(__file__).parents[1]}", sys.executable, "-c", code])
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pipepool", "run", "-j1", "--json", *options, ":::", hog],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    finally:
        remove_cgroup(group)
    assert proc.returncode == 1, proc.stderr
    assert said in proc.stderr, proc.stderr
    (row,) = json.loads(proc.stdout.splitlines()[-1])["records"]
    assert row["signal"] == record and row["error"] is None, row
    assert row["oom"].startswith("the OOM kill count of ") and "rose from" in row["oom"], row


# -- start-up ------------------------------------------------------------------------------

CANNOT_START = """\
import multiprocessing

from pipepool import LocalExecutor

if multiprocessing.current_process().name != "MainProcess":  # imported again, in a worker
    raise RuntimeError("this module refuses to run in a child")

if __name__ == "__main__":
    with LocalExecutor(1, start_method="spawn") as ex:
        ex.queue("k", abs, -1)
        ex.wait_until_done(60)
        print(ex.get_event_buffer()["k"].exception)
"""


def test_workers_that_cannot_start_blame_no_initializer(tmp_path: Path) -> None:
    script = tmp_path / "cannot_start.py"
    script.write_text(CANNOT_START)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout.strip()
    assert said.startswith("workers failed to start 3 times in a row: WorkerLostError: "), said
    assert "exited with code 1 during start-up, before running any task" in said
    assert "initializer" not in said
