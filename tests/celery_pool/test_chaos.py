"""The chaos run: 10,000 tasks or more with acks_late (and reject_on_worker_lost) through a
real worker on Redis while its children are SIGKILLed from outside, every run of every task
written down. Nothing is lost, nothing runs twice but where a child was killed under it,
and at the end the worker's semaphore is back at the concurrency with no job left."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import defaultdict

import pytest

from .celery_support import alive, require, wait_for

require()  # skip without Celery locally; with CI=true, fail

pytestmark = pytest.mark.timeout(300)

TASKS = 10_000
KILL_EVERY = 0.25  # s between two SIGKILLs of a child
KILLS = 10  # at least: more tasks follow, a wave at a time, until this many were made
WAVE = 1_000  # tasks per wave after the first TASKS (a fast machine runs 10,000 in 3 s)
RECENT = 200  # the last runs' lines the killer picks its next victim from


def test_chaos(worker):
    w = worker("chaos", conf={"task_ignore_result": True})
    killed: set[int] = set()
    stop = threading.Event()

    def running_tasks() -> set[int]:
        """The children that ran a task lately, by the pids the runs name: a replacement
        may be the worker's child or its zygote's (one forked while the worker had other
        threads), which the worker's own children miss (a run made 2 kills in its whole
        batch); and the zygote, which runs none, is never picked."""
        return {int(words[2]) for words in w.runs()[-RECENT:] if words[0] == "start"}

    def killer() -> None:
        rng = random.Random(4711)
        while not stop.wait(KILL_EVERY):
            victims = sorted(pid for pid in running_tasks() - killed if alive(pid))
            if victims:
                pid = rng.choice(victims)
                killed.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    killed.discard(pid)

    def batch_done() -> bool:
        return len(w.count("done")) == sent

    sent = TASKS
    for key in range(sent):
        w.send("chaos", key)
    thread = threading.Thread(target=killer, name="chaos-killer")
    thread.start()
    try:
        began = time.monotonic()
        # The kills come by the clock, and a batch on a fast machine is over after a dozen
        # (8 in a CI run, 10 asserted): more waves until the run was chaotic enough.
        while True:
            assert wait_for(batch_done, 240 - (time.monotonic() - began), 0.5), (
                f"{len(w.count('done'))} of {sent} done after {time.monotonic() - began:.0f} s"
                f" and {len(killed)} kills"
            )
            if len(killed) >= KILLS:
                break
            for key in range(sent, sent + WAVE):
                w.send("chaos", key)
            sent += WAVE
    finally:
        stop.set()
        thread.join(30)
    starts: dict[str, list[int]] = defaultdict(list)
    dones: dict[str, list[int]] = defaultdict(list)
    for words in w.runs():
        if words[0] in ("start", "done"):
            (starts if words[0] == "start" else dones)[words[1]].append(int(words[2]))
    assert set(dones) == {str(k) for k in range(sent)}  # nothing lost
    twice = {}
    for key, pids in starts.items():
        # Every run but one was in a child that was killed: a run again is a redelivery
        # of a run cut short (or of one whose result the kill kept from the parent).
        survivors = [pid for pid in pids if pid not in killed]
        assert len(survivors) <= 1, (key, pids, dones[key])
        assert len([pid for pid in dones[key] if pid not in killed]) <= 1, (key, dones[key])
        if len(pids) > 1:
            twice[key] = pids
    # Let the queue drain (a redelivered duplicate may still run), then the semaphore:
    assert wait_for(lambda: w.pool()["pipepool"]["jobs"] == 0, 60)
    pool = w.pool()
    assert pool["pipepool"]["semaphore"] == {"value": 2, "initial": 2}
    # A kill loses at most the one task its child was running (none, when it caught the
    # child between two tasks: a loaded machine's CI run saw every kill land so, and
    # ``>= 1`` here hoped otherwise); what it held unstarted went to the other child.
    assert pool["pipepool"]["stats"]["tasks_lost"] <= len(killed)
    print(f"chaos: {sent} tasks, {len(killed)} kills, {len(twice)} tasks ran again after one")
