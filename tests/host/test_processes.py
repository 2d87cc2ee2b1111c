"""The process table and one process as ``pipepool.host`` reads them: from a /proc tree
the test writes (a command name with spaces and parentheses, a zombie, a process tree
with CPU time), and from this machine where the answer is known."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pipepool import host

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def stat_line(pid: int, comm: str, state: str, ppid: int, pgid: int, ticks: int) -> str:
    """A /proc/<pid>/stat line: utime stime cutime cstime are fields 14-17."""
    rest = [state, ppid, pgid, 0, 0, 0, 0, 0, 0, 0, 0, ticks, 0, 0, 0, 20, 0, 3]
    return f"{pid} ({comm}) " + " ".join(map(str, rest)) + " 0 0\n"


def proc_tree(root: Path) -> str:
    table = {
        1: ("init", "S", 0, 1, 0),
        100: ("a (b) c", "S", 1, 100, TICK),  # spaces and parentheses in its name
        101: ("worker", "R", 100, 100, 2 * TICK),
        102: ("job", "Z", 101, 102, 4 * TICK),
        200: ("other", "S", 1, 200, 8 * TICK),
    }
    for pid, (comm, state, ppid, pgid, ticks) in table.items():
        folder = root / "proc" / str(pid)
        folder.mkdir(parents=True)
        (folder / "stat").write_text(stat_line(pid, comm, state, ppid, pgid, ticks))
        (folder / "environ").write_bytes(b"HOME=/\0" + (b"TOKEN=7\0" if pid == 102 else b""))
    (root / "proc/self").mkdir()
    (root / "proc/self/stat").write_text(stat_line(100, "a (b) c", "R", 1, 100, 0))
    (root / "proc/100/statm").write_text("1000 25 3 1 0 9 0\n")
    (root / "proc/100/task/100").mkdir(parents=True)
    (root / "proc/100/task/100/children").write_text("101 ")
    (root / "proc/100/task/105").mkdir(parents=True)
    (root / "proc/100/task/105/children").write_text("300 301 ")
    (root / "proc/loadavg").write_text("0.52 0.58 0.59 3/345 12345\n")
    (root / "proc/self/environ").write_bytes(b"")
    return str(root)


def test_the_process_table_of_a_captured_tree(tmp_path: Path) -> None:
    root = proc_tree(tmp_path)
    table = {p.pid: p for p in host.processes(root) or []}
    assert sorted(table) == [1, 100, 101, 102, 200]  # "self" is no pid
    assert table[100] == host.Process(100, 1, 100, "S", 1.0)
    assert table[102].state == "Z" and table[102].pgid == 102
    assert host.tree_cpu_seconds(100, root) == 6.0  # 101 and 102, not itself nor 200
    assert host.holding_environ(b"TOKEN=7", root) == [(102, 102)]
    assert host.children(100, {100, 105}, root) == {101, 300, 301}
    assert host.children(100, {104}, root) == set()


def test_one_process_of_a_captured_tree(tmp_path: Path) -> None:
    root = proc_tree(tmp_path)
    assert host.process_state(102, root) == "Z"
    assert host.process_state(999, root) == ""  # no such process
    assert host.thread_count(root) == 3
    assert host.runnable_threads(root) == 3
    nothing = str(tmp_path / "nothing")  # no /proc: unknown, not "gone"
    assert host.process_state(102, nothing) is None and host.thread_count(nothing) is None
    assert host.processes(nothing) is None and host.runnable_threads(nothing) is None


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc (Linux)")
def test_this_machine_s_table_knows_this_process_and_its_child() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        table = {p.pid: p for p in host.processes() or []}
        assert table[child.pid].ppid == os.getpid() and table[os.getpid()].pgid == os.getpgrp()
        assert host.process_state(child.pid) in ("R", "S", "D")
        stop = threading.Event()
        extra = threading.Thread(target=stop.wait)
        extra.start()
        try:
            # the kernel counts every thread, Python's among them
            assert (host.thread_count() or 0) >= threading.active_count() >= 2
        finally:
            stop.set()
            extra.join()
        rss = host.rss_bytes(child.pid)
        assert rss is not None and rss > 1 << 20
    finally:
        child.kill()
        child.wait()
    assert host.process_state(child.pid) == ""
