"""``--wait-quiet MAX``: a job starts only once others leave its CPUs alone (or MAX ran
out), and its record says how long it waited and whether quiet came.

The busy path uses real CPU hogs, one pinned to each CPU the run may use, so the job's
CPUs are busy whatever else runs on this shared machine; the assertions are about order
(the job started after the hogs were killed), not durations, so load from other test
runs can only make them slower. The quiet path reads a /proc/stat the test controls
(its counters do not move: nobody else ran), so it does not depend on the machine."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import ENV, joblog_rows, run_cli, wait_for
from pipepool.measure import _quiet
from pipepool.measure._noise import Sample

linux = pytest.mark.skipif(
    not os.path.exists("/proc/stat") or not hasattr(os, "sched_setaffinity"),
    reason="needs /proc/stat and CPU affinity (Linux)",
)

HOG = (
    "import os, pathlib, sys, time; os.sched_setaffinity(0, {int(sys.argv[1])}); "
    "pathlib.Path(sys.argv[2]).touch(); t = time.monotonic()\n"
    "while time.monotonic() - t < 90: pass"
)
JOB = """\
import pathlib, sys, time
folder = pathlib.Path(sys.argv[2])
if sys.argv[1] == "1":  # say it started, then wait (bounded) for the test's go
    (folder / "started1").touch()
    t = time.monotonic()
    while not (folder / "go").exists() and time.monotonic() - t < 60:
        time.sleep(0.01)
else:  # when it started
    (folder / "stamp").write_text(repr(time.time()))
"""


def _start_hogs(folder: Path) -> list[subprocess.Popen]:
    """One busy process pinned to each CPU this process may use; returns once all burn."""
    ready = [folder / f"hog{cpu}" for cpu in sorted(os.sched_getaffinity(0))]
    hogs = [
        subprocess.Popen(
            [sys.executable, "-c", HOG, r.name[3:], str(r)],
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # autogroup: a session of its own, as a neighbour's
        )
        for r in ready
    ]
    assert wait_for(lambda: all(r.exists() for r in ready), timeout=60), "hogs not up"
    return hogs


def _kill(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        hog.kill()
    for hog in hogs:
        hog.wait(timeout=30)


# --wait-quiet's bound in the test below. On a loaded machine (the README pytest's 3 xdist
# workers on 2 cores) neither job ever sees quiet, so each waits all of it: job 1 before it
# starts (the test cannot begin before), job 2 while the hogs burn. Job 2 must still be
# waiting when the hogs are killed, which comes about 2 s after job 1 ended (the joblog
# row, then the 2 s the test looks for a start beside the hogs): 20 s leaves it 18 s to
# spare (30 s made the test take 62 s under load).
BOUND = 20


@linux
def test_a_job_waits_while_a_hog_burns_its_cpus_and_starts_after_it_is_killed(
    tmp_path: Path,
) -> None:
    started1, go, stamp, log = (tmp_path / n for n in ("started1", "go", "stamp", "log"))
    job = tmp_path / "job.py"
    job.write_text(JOB)
    run = subprocess.Popen(
        [sys.executable, "-m", "pipepool", "run", "-j", "1", "--wait-quiet", str(BOUND), "--json",
         "--joblog", str(log), f"{sys.executable} {job} {{}} {tmp_path}", ":::", "1", "2"],
        env=ENV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    hogs: list[subprocess.Popen] = []
    try:
        assert wait_for(started1.exists, timeout=90), "job 1 never started"
        hogs = _start_hogs(tmp_path)
        go.touch()  # job 1 ends; the worker turns to job 2 and finds its CPUs busy
        assert wait_for(lambda: log.exists() and len(joblog_rows(log)) == 1, timeout=60)
        assert not wait_for(stamp.exists, timeout=2.0), "job 2 started beside the hogs"
        _kill(hogs)
        killed = time.time()
        out, err = run.communicate(timeout=90)
    finally:
        _kill(hogs)
        if run.poll() is None:
            run.kill()
        run.communicate()  # and its pipes closed
    assert run.returncode == 0, err
    assert float(stamp.read_text()) > killed  # it started only once the hogs were gone
    summary = json.loads(out.splitlines()[-1])
    assert summary["records"][1]["start"] > killed  # its record's start: after the wait
    second = summary["records"][1]["wait_quiet"]
    # held while the hogs burned: its wait began before they were killed (job 2 was
    # queued in the worker beside job 1, so the wait began as job 1 ended, before its
    # joblog row appeared and at least 2 s before the kill)
    assert second["looks"] > 1
    assert summary["records"][1]["start"] - second["waited"] < killed
    # quiet came after the kill, or (a loaded machine) the bound ran out: either way the
    # record says which
    assert second["quiet"] is True or (second["quiet"] is False and second["waited"] >= BOUND)
    assert summary["wait_quiet"]["jobs"] == 2 and summary["wait_quiet"]["held"] >= 1
    assert "wait for quiet:" in err


@linux
def test_a_bound_that_runs_out_starts_the_job_and_says_it_was_not_quiet(
    tmp_path: Path,
) -> None:
    hogs = _start_hogs(tmp_path)
    try:
        result = run_cli("run", "--wait-quiet", "0.6", "--json", "true", ":::", "1", timeout=90)
    finally:
        _kill(hogs)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    wait = summary["records"][0]["wait_quiet"]
    assert wait["quiet"] is False and wait["waited"] >= 0.6
    assert wait["others"] > _quiet.QUIET and wait["why"] == "not quiet after 0.6 s"
    assert summary["wait_quiet"]["not_quiet"] == 1
    assert "1 started without quiet" in result.stderr


def test_quiet_cpus_start_the_job_after_one_look(tmp_path: Path) -> None:
    from pipepool.measure import Measurement, MeasureOptions
    from pipepool.run._options import RunOptions
    from pipepool.run._runner import Runner
    from pipepool.run._template import Template, build_jobs

    stat = tmp_path / "stat"  # counters that do not move: nothing else ran
    cpus = "".join(f"cpu{n} 10 0 10 500 0 0 0 0 0 0\n" for n in range(os.cpu_count() or 1))
    stat.write_text(f"cpu  10 0 10 500 0 0 0 0 0 0\n{cpus}procs_running 1\n")
    marker = tmp_path / "ran"
    jobs = build_jobs(Template(()), [(f"touch {marker}",)])
    options = RunOptions(jobs=1, progress=False, summary=False)
    measuring = Measurement(MeasureOptions(wait_quiet=60.0, proc_stat=str(stat)))
    runner = Runner(jobs, options, measuring=measuring, stdout=io.BytesIO(), stderr=io.StringIO())
    summary = runner.run()
    assert marker.exists()
    wait = summary.outcomes[0].measured["wait_quiet"]
    assert wait is not None
    assert wait["quiet"] is True and wait["looks"] == 1 and wait["others"] == 0
    assert wait["waited"] < 60 and wait["procs_running"] == 1
    assert summary.as_dict()["wait_quiet"] == {
        "jobs": 1, "held": 0, "seconds": wait["waited"], "not_quiet": 0,
    }  # fmt: skip


def test_the_share_is_of_the_cpus_left_to_the_job() -> None:
    before = Sample(0.0, 0.0, 0.0, None, None, 1)
    after = Sample(1.0, 1.0, 0.0, None, None, 2)  # one CPU's worth of busy in 1 s
    assert _quiet.share(before, after, width=2) == 0.5  # half of two CPUs
    assert _quiet.share(before, after, width=2, allowance=1) == 0.0  # the sibling's
    busier = Sample(1.0, 2.0, 0.0, None, None, 3)
    assert _quiet.share(before, busier, width=2, allowance=1) == 1.0  # and a hog


def test_no_cpu_left_to_judge_starts_at_once_and_says_so() -> None:
    wait = _quiet.wait_quiet((0, 1), 60.0, allowance=2)
    assert wait == {
        "waited": 0.0, "quiet": None, "others": None, "looks": 0,
        "why": "-j at least the CPUs without --pin",
    }  # fmt: skip


def test_wait_quiet_names_the_option_and_the_form() -> None:
    result = run_cli("run", "--wait-quiet", "soon", "true")
    assert result.returncode == 255
    assert "argument --wait-quiet: 'soon' is not a duration" in result.stderr
