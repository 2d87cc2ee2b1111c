"""``pipepool run`` for benchmark suites: pinned job slots, each job's resource use from
the kernel's accounting of its whole process tree, ``--repeat``, and the start gates
``--load``/``--memfree`` (driven through files the test controls, in place of /proc)."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
from pathlib import Path

import pytest

from helpers import joblog_rows, marked, run_cli, survivors, wait_for

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")

MiB = 1 << 20
PY = sys.executable


@pytest.fixture
def mark():
    yield from marked()


def records(proc) -> dict[int, dict]:
    assert proc.returncode == 0, proc.stderr
    return {r["seq"]: r for r in json.loads(proc.stdout.splitlines()[-1])["records"]}


# -- --pin ------------------------------------------------------------------------------------

AFFINITY = 'python3 -c "import os; print(sorted(os.sched_getaffinity(0)))"'


def test_pin_gives_each_job_one_core_and_overlapping_jobs_different_ones(tmp_path: Path) -> None:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two usable cores")
    # The command, as typed: one core per job.
    proc = run_cli("run", "-j", "2", "--pin", AFFINITY, ":::", "a", "b", "c", "d")
    assert proc.returncode == 0, proc.stderr
    seen = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(seen) == 4 and all(len(s) == 1 and s[0] in cores[:2] for s in seen), seen
    # Jobs meet in pairs (each waits for its partner's file), so each pair surely runs
    # at once; the affinity is read in a grandchild (sh -> sh -> python).
    meet = tmp_path / "meet"
    meet.mkdir()
    cmd = (
        f"touch {meet}/{{#}}; p=$(( ({{#}} + 1) / 2 * 4 - 1 - {{#}} )); n=0; "
        f"until [ -e {meet}/$p ] || [ $n -gt 2000 ]; do sleep 0.01; n=$((n+1)); done; "
        f"echo {{#}} $(sh -c '{AFFINITY}; true') $([ -e {meet}/$p ] && echo met)"
    )
    proc = run_cli("run", "-j", "2", "--pin", cmd, ":::", *"abcdef")
    assert proc.returncode == 0, proc.stderr
    core = {}
    for line in proc.stdout.splitlines():
        seq, affinity, met = (
            line.split(" ", 2)[0],
            line[line.index("[") : line.index("]") + 1],
            line.endswith("met"),
        )
        assert met, line
        assert len(json.loads(affinity)) == 1, line
        core[int(seq)] = affinity
    assert sorted(core) == [1, 2, 3, 4, 5, 6]
    for a in (1, 3, 5):
        assert core[a] != core[a + 1], core


def test_pin_refuses_more_jobs_than_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    proc = run_cli("run", "-j", str(cores + 1), "--pin", "true", ":::", "x")
    assert proc.returncode == 255
    assert f"-j {cores + 1}" in proc.stderr and f"use -j {cores} or fewer" in proc.stderr
    proc = run_cli("run", "-j", "1", "--cpus-per-job", str(cores + 1), "true", ":::", "x")
    assert proc.returncode == 255 and "fewer --cpus-per-job" in proc.stderr


def test_cpus_per_job_gives_each_slot_its_own_cores() -> None:
    cores = sorted(os.sched_getaffinity(0))
    proc = run_cli("run", "-j", "1", "--cpus-per-job", str(len(cores)), AFFINITY, ":::", "x")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == cores


# -- resource use --------------------------------------------------------------------------------

ALLOCATE = (
    "import subprocess, sys; subprocess.run([sys.executable, '-c', "
    "'b = bytearray(200 << 20); b[::4096] = bytes(len(b) // 4096)'], check=True)"
)
BURN = (
    "import resource\n"
    "while resource.getrusage(resource.RUSAGE_SELF).ru_utime < 0.5:\n"
    "    sum(range(10000))\n"
)


def test_max_rss_of_a_child_allocating_200_mib(tmp_path: Path) -> None:
    script = tmp_path / "alloc.py"
    script.write_text(ALLOCATE)
    proc = run_cli("run", "--json", "--no-summary", f"{PY} {script}", ":::", "x")
    record = records(proc)[1]
    assert record["maxrss"] >= 200 * MiB, record
    assert record["status"] == "ok"


def test_user_time_of_a_grandchild_burning_half_a_second(tmp_path: Path) -> None:
    burn = tmp_path / "burn.py"
    burn.write_text(BURN)
    done = tmp_path / "done"
    proc = run_cli(
        "run",
        "--json",
        "--no-summary",
        ":::",
        # a grandchild its parent waits for: in the job's own wait4 accounting
        f"sh -c '{PY} {burn}; true'",
        # a grandchild left behind in the background, reparented to the worker and
        # reaped by its sweep: the job's tree all the same
        f"( sh -c '{PY} {burn}; touch {done}' & ); until [ -e {done} ]; do sleep 0.01; done",
    )
    for seq, record in records(proc).items():
        assert record["user"] >= 0.4, (seq, record)
        assert record["user"] < 30 and record["sys"] >= 0, record


def test_usage_in_results_dir_summary_and_joblog(tmp_path: Path) -> None:
    script = tmp_path / "alloc.py"
    script.write_text(ALLOCATE)
    res, log, done = tmp_path / "res", tmp_path / "log", tmp_path / "done"
    proc = run_cli(
        "run",
        "-j",
        "3",
        "--results",
        str(res),
        "--joblog",
        str(log),
        "-k",
        ":::",
        f"{PY} {script}; touch {done}",
        f"until [ -e {done} ]; do sleep 0.01; done; sleep 0.3",  # ends 0.3 s after #1
        "true",
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads((res / "1" / "job.json").read_text())
    assert record["seq"] == 1 and record["maxrss"] >= 200 * MiB and record["user"] > 0
    assert json.loads((res / "2" / "job.json").read_text())["runtime"] >= 0.3
    # the end-of-run summary names the slowest and the most memory-hungry jobs
    slowest = proc.stderr.split("slowest:\n", 1)[1].splitlines()[0]
    assert slowest.lstrip().startswith("#2 ") and "max RSS" in slowest, proc.stderr
    hungriest = proc.stderr.split("most memory:\n", 1)[1].splitlines()[0]
    assert hungriest.lstrip().startswith("#1 ") and "max RSS" in hungriest, proc.stderr
    assert len(joblog_rows(log)) == 3  # GNU parallel's nine columns, checked there


# -- --repeat ----------------------------------------------------------------------------------


def test_repeat_interleaves_and_reports_median_and_spread(tmp_path: Path) -> None:
    log = tmp_path / "log"
    proc = run_cli(
        "run",
        "-j",
        "1",
        "--repeat",
        "3",
        "--joblog",
        str(log),
        "--json",
        "sleep {}",
        ":::",
        "0.05",
        "0.15",
    )
    assert proc.returncode == 0, proc.stderr
    rows = sorted(joblog_rows(log), key=lambda r: float(r[2]))  # in start order
    assert [r[8] for r in rows] == ["sleep 0.05", "sleep 0.15"] * 3  # interleaved
    assert sorted(int(r[0]) for r in rows) == [1, 2, 3, 4, 5, 6]  # each its own row
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert [(r["job"], r["rep"]) for r in summary["records"]] == [
        (1, 1),
        (2, 1),
        (1, 2),
        (2, 2),
        (1, 3),
        (2, 3),
    ]
    stats = {s["job"]: s for s in summary["repetitions"]}
    assert stats[1]["runs"] == stats[2]["runs"] == 3
    assert 0.05 <= stats[1]["median"] < stats[2]["median"]
    assert stats[2]["min"] <= stats[2]["median"] <= stats[2]["max"]
    assert "per job over 3 runs: median wall time" in proc.stderr
    assert "job 2 " in proc.stderr and "sleep 0.15" in proc.stderr


# -- --load and --memfree, against files the test controls -------------------------------------


def _start_runner(tmp_path: Path, commands: list[str], **options):
    """A Runner in a thread (the CLI reads /proc; this one reads the test's files)."""
    from pipepool.run._options import RunOptions
    from pipepool.run._runner import Runner
    from pipepool.run._template import Template, build_jobs

    jobs = build_jobs(Template(()), [(c,) for c in commands])
    err_path = tmp_path / "stderr"
    err = open(err_path, "w")  # noqa: SIM115 (closed by the caller's finish())
    out = io.BytesIO()
    runner = Runner(
        jobs, RunOptions(jobs=1, progress=False, json=True, **options), stdout=out, stderr=err
    )
    result: list = []
    thread = threading.Thread(target=lambda: result.append(runner.run()), daemon=True)
    thread.start()

    def finish():
        thread.join(60)
        err.close()
        assert not thread.is_alive()
        return result[0], out.getvalue().decode(), err_path.read_text()

    return err_path, finish


def test_load_waits_while_too_many_processes_run(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3\nprocs_running 9\nprocs_blocked 2\n")  # load 10
    started = tmp_path / "started"
    err_path, finish = _start_runner(tmp_path, [f"touch {started}"], load=4.0, proc_stat=str(stat))
    assert wait_for(
        lambda: "waiting to start jobs: --load 4: 10 processes running" in err_path.read_text()
    )
    assert not started.exists()  # the gate is shut: nothing ran
    stat.write_text("cpu  1 2 3\nprocs_running 4\nprocs_blocked 0\n")  # load 3 (less this one)
    summary, _, _ = finish()
    assert started.exists() and summary.exit_status() == 0


def test_memfree_waits_then_kills_the_youngest_and_runs_it_again(tmp_path: Path, mark: str) -> None:
    meminfo = tmp_path / "meminfo"
    gib = 1 << 20  # kB
    meminfo.write_text(f"MemTotal: {8 * gib} kB\nMemFree: {gib // 2} kB\nCached: 0 kB\n")
    attempts, gate = tmp_path / "attempts", tmp_path / "gate"
    job = f"echo run >> {attempts}; until [ -e {gate} ]; do sleep 0.{mark}; done"
    err_path, finish = _start_runner(
        tmp_path, [job], memfree=1 << 30, retries=1, meminfo=str(meminfo)
    )
    # 0.5 GiB free < --memfree 1G: no job starts
    assert wait_for(lambda: "--memfree 1.0 GiB: 512.0 MiB free" in err_path.read_text())
    assert not attempts.exists()
    meminfo.write_text(f"MemFree: {gib} kB\nBuffers: {gib // 4} kB\nCached: {gib // 4} kB\n")
    assert wait_for(lambda: attempts.exists())  # 1.5 GiB free (GNU's sum): it starts
    meminfo.write_text(f"MemFree: {gib // 4} kB\n")  # 256 MiB: below half of --memfree
    assert wait_for(lambda: "killing job 1 to run it later" in err_path.read_text())
    assert wait_for(lambda: not survivors(mark), timeout=5)  # the job's tree is gone
    gate.touch()
    meminfo.write_text(f"MemFree: {2 * gib} kB\n")  # room again: it runs a second time
    summary, _, _ = finish()
    assert attempts.read_text() == "run\nrun\n"
    (outcome,) = summary.outcomes
    assert outcome.status == "ok" and outcome.attempts == 2


def test_memfree_kill_without_retries_fails_the_job(tmp_path: Path, mark: str) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemFree: 4194304 kB\n")  # 4 GiB
    job = f"sleep 1000.{mark}"
    _, finish = _start_runner(tmp_path, [job], memfree=1 << 30, meminfo=str(meminfo))
    assert wait_for(lambda: len(survivors(mark, jobs_only=True)) >= 1)
    meminfo.write_text("MemFree: 1024 kB\n")
    summary, _, _ = finish()
    (outcome,) = summary.outcomes
    assert outcome.status == "failed" and "--memfree" in outcome.error
    assert summary.exit_status() == 1
