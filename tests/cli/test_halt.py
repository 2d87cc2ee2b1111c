"""``pipepool run --halt``: every form at ``-j 1`` and ``-j 4``, against GNU parallel's rule.

GNU parallel 20221122 (``should_we_halt`` and ``halt`` in ``/usr/bin/parallel``, and its
man page's EXIT STATUS) reaps every job that ended, checks the halt condition after
each, and only then starts more: once the condition is met no job starts, and the exit
status is decided at that moment (``fail=1``/``done=1``: the job's own status;
``fail=N``/``done=N``: the failures so far; ``N%``: the failures as a percentage of all
jobs; ``success``: 0).

Each row of ``ROWS`` is a batch of 8 jobs whose order of events is fixed by gates, not
by timing: a job touches ``S<seq>`` when it starts, and may wait for another job to
have started (``start k``) or for a job's row in the joblog (``row k``: the runner has
taken that job's outcome into account). A job the halt must kill waits for a file that
never comes. So the jobs that started are the same on every run, on a loaded machine
too. ``test_gnu_parallel_agrees`` runs the same rows through GNU parallel itself where it
is installed (Debian: ``apt-get install parallel``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import ENV, marked

pytestmark = pytest.mark.portable

JOBS = 8
WAIT_LIMIT = 3000  # polls of 10 ms a gate waits before the job gives up (GAVE-UP): a
# broken runner fails the row in 30 s, it does not hang it


@dataclass(frozen=True)
class Job:
    code: int = 0  # the job's exit status; -N: it kills itself with signal N
    wait: str = ""  # "", "start K [L ...]", "row K" or "never" (until the halt kills it)


@dataclass(frozen=True)
class Row:
    halt: str
    j: int
    jobs: tuple[Job, ...]
    started: tuple[int, ...]  # the jobs GNU parallel starts (seqs)
    exit: int  # and its exit status
    note: str = ""  # told apart in the test's name

    @property
    def id(self) -> str:
        return f"{self.halt}-j{self.j}{self.note}"


def batch(**special: Job) -> tuple[Job, ...]:
    """8 jobs that exit 0 at once, but for ``j3=Job(...)`` and the like."""
    return tuple(special.get(f"j{seq}", Job()) for seq in range(1, JOBS + 1))


def rows() -> list[Row]:
    out = []
    for when in ("soon", "now"):
        # -j 1: one job at a time, so no gate is needed; the job after the one that
        # meets the condition must not start.
        out += [
            Row(f"{when},fail=1", 1, batch(j2=Job(3)), (1, 2), 3),
            Row(f"{when},fail=2", 1, batch(j1=Job(3), j3=Job(4)), (1, 2, 3), 2),
            Row(f"{when},fail=25%", 1, batch(j1=Job(3), j3=Job(4)), (1, 2, 3), 25),
            Row(f"{when},success=2", 1, batch(j1=Job(3)), (1, 2, 3), 0),
            Row(f"{when},success=25%", 1, batch(j1=Job(3)), (1, 2, 3), 0),
            Row(f"{when},done=2", 1, batch(j2=Job(3)), (1, 2), 1),
            Row(f"{when},done=25%", 1, batch(j2=Job(3)), (1, 2), 13),
        ]

        # -j 4: job 1 ends once jobs 1-4 all run. Those still running when the
        # condition is met end once they see the deciding job's row (soon), or are
        # killed (now): with soon they may fail, which changes no exit status.
        def held(seq: int, code: int = 0, when: str = when) -> Job:
            return Job(code, f"row {seq}" if when == "soon" else "never")

        one = batch(j1=Job(3, "start 2 3 4"), j2=held(1), j3=held(1), j4=held(1))

        # job 1 (code c1) ends once all four run, job 2 (code c2) once job 5 took job
        # 1's slot; jobs 3-5 end after job 2 with code c3
        def two(c1: int, c2: int, c3: int, when: str = when) -> tuple[Job, ...]:
            rest = {f"j{seq}": held(2, c3, when) for seq in (3, 4, 5)}
            return batch(j1=Job(c1, "start 2 3 4"), j2=Job(c2, "start 5"), **rest)

        five = (1, 2, 3, 4, 5)
        out += [
            Row(f"{when},fail=1", 4, one, (1, 2, 3, 4), 3),
            Row(f"{when},fail=2", 4, two(3, 4, 0), five, 2),
            Row(f"{when},fail=25%", 4, two(3, 4, 0), five, 25),
            Row(f"{when},success=2", 4, two(0, 0, 1), five, 0),
            Row(f"{when},success=25%", 4, two(0, 0, 1), five, 0),
            Row(f"{when},done=2", 4, two(3, 0, 1), five, 1),
            Row(f"{when},done=25%", 4, two(3, 0, 1), five, 13),
        ]
    # The legacy spellings, a job killed by a signal, a percentage never reached.
    every = tuple(range(1, JOBS + 1))
    out += [
        Row("1", 1, batch(j2=Job(3)), (1, 2), 3),
        Row("2", 1, batch(j2=Job(3)), (1, 2), 3),
        Row("-1", 1, batch(j1=Job(3)), (1, 2), 0),
        Row("-2", 1, batch(j1=Job(3)), (1, 2), 0),
        Row("25%", 1, batch(j1=Job(3), j3=Job(4)), (1, 2, 3), 25),
        Row("soon,fail=1", 1, batch(j2=Job(-9)), (1, 2), 128 + 9, "-killed"),
        Row("now,done=1", 1, batch(j1=Job(5)), (1,), 5),
        Row("soon,fail=50%", 1, batch(j2=Job(3)), every, 13),
        Row("never", 1, batch(j2=Job(3)), every, 1),
    ]
    return out


ROWS = rows()


def commands(row: Row, folder: Path, log: Path) -> list[str]:
    """The shell command of each job of ``row``: the same text for both tools."""
    out = []
    for seq, job in enumerate(row.jobs, 1):
        kind, _, arg = job.wait.partition(" ")
        cond = {
            "": "",
            "start": " && ".join(f"[ -e {folder}/S{k} ]" for k in arg.split()),
            "row": f"cut -f1 {log} | grep -qx {arg}",
            "never": f"[ -e {folder}/never ]",
        }[kind]
        gate = (
            f"i=0; until {cond}; do i=$((i+1)); [ $i -gt {WAIT_LIMIT} ] && "
            f"{{ touch {folder}/GAVE-UP; exit 99; }}; "
            "sleep 0.01; done; "
            if cond
            else ""
        )
        end = f"kill -{-job.code} $$" if job.code < 0 else f"exit {job.code}"
        out.append(f"touch {folder}/S{seq}; {gate}{end}")
    return out


def started(folder: Path) -> tuple[int, ...]:
    return tuple(sorted(int(p.name[1:]) for p in folder.glob("S*")))


@pytest.fixture
def mark():
    yield from marked()


def run_row(row: Row, folder: Path, mark: str, argv: list[str], env: dict[str, str]):
    """Run ``row`` with the tool ``argv`` (its options before ``:::``); return the jobs
    that started and the exit status."""
    gates = folder / f"gates.{mark}"  # in every job's command line: survivors() sees them
    gates.mkdir()
    log = folder / "log"
    argv = [*argv, "-j", str(row.j), "--halt", row.halt, "--joblog", str(log)]
    proc = subprocess.run(
        [*argv, ":::", *commands(row, gates, log)],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )
    assert not (gates / "GAVE-UP").exists(), "a gate gave up waiting: " + proc.stderr
    return started(gates), proc.returncode, proc.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_halt_row(row: Row, impl: str, tmp_path: Path, mark: str):
    """No job starts once the condition is met; the exit status is GNU parallel's."""
    argv = [sys.executable, "-m", "pipepool", "run", "--no-summary"]
    ran, status, err = run_row(row, tmp_path, mark, argv, dict(ENV, PIPEPOOL_IMPL=impl))
    assert (ran, status) == (row.started, row.exit), err


GNU = shutil.which("parallel")


@pytest.mark.skipif(GNU is None, reason="GNU parallel is not installed (the table's source)")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_gnu_parallel_agrees(row: Row, tmp_path: Path, mark: str) -> None:
    """The table holds for GNU parallel itself: the rows say what it does."""
    ran, status, err = run_row(row, tmp_path, mark, [str(GNU), "--will-cite"], dict(os.environ))
    assert (ran, status) == (row.started, row.exit), err
