"""``LocalExecutor.cancel(key)`` of a task sent to a worker and not started, when the
worker cannot answer (its task holds the GIL): with the compiled loop the parent claims
the task in shared memory and it ends cancelled in the same call, nothing asked; with
the pure loop a CANCEL goes out and the task stays being cancelled until the worker
answers or dies (docs/design.md, "Cancel claims"). Every start method, both loops.
"""

from __future__ import annotations

from concurrent.futures import CancelledError

import pytest

import tasks
from helpers import Recorder, runs, sent_ahead
from pipepool import TaskKilledError

pytestmark = pytest.mark.portable


@pytest.mark.timeout(120)
def test_cancel_of_a_task_behind_one_holding_the_gil(make, impl, tmp_path):
    log = str(tmp_path / "runs")
    ex = make(1, prefetch=4)
    ex.queue("hog", tasks.hog_gil, log, "hog")
    for key in "abc":
        ex.queue(key, tasks.record, log, key)
    rec = Recorder(ex)
    sent_ahead(ex, rec, ["hog", *"abc"])
    rec.run_until(lambda: "hog" in runs(log))  # it holds the GIL: no frame is answered
    (worker,) = ex._workers.values()
    assert ex.cancel("b") == 1
    rec.take()
    if impl == "cython":  # claimed: ended now, nothing asked, the others where they were
        assert type(rec.terminal["b"].exception) is CancelledError
        assert not worker.asked and ex.stats()["tasks_running"] == 3
    else:  # asked: no answer can come while the hog runs
        assert "b" not in rec.terminal and worker.asked
    assert ex.kill("hog") == 1
    rec.finish()
    assert isinstance(rec.terminal["hog"].exception, TaskKilledError)
    assert type(rec.terminal["b"].exception) is CancelledError  # either way: never ran
    assert runs(log) == {"hog": 1, "a": 1, "c": 1}
    assert not rec.duplicates and ex.stats()["tasks_revoked"] == 0
