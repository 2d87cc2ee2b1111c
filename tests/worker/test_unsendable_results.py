"""A result that cannot go back to the parent fails its task with a ``TaskPicklingError``
that names what could not be pickled and why it had to be: "the task returned a
_thread.lock object, which cannot be sent back to the parent: a result goes back
pickled, and pickling it raised TypeError: cannot pickle '_thread.lock' object" (it
said "the task returned lock, which could not be sent back"). The worker serves on.
The same words come from a Dask worker (``ClusterExecutor``); one function makes them
(``pipepool._outcome.unsendable_result``)."""

from __future__ import annotations

import pytest

import fault_tasks
from helpers import Recorder, connect
from pipepool import TaskPicklingError

pytestmark = pytest.mark.timeout(60)

SENT_BACK = "which cannot be sent back to the parent: a result goes back pickled"
RESULTS = {  # task: the words its error has
    "lock": (fault_tasks.return_lock, ["the task returned a _thread.lock object", SENT_BACK]),
    "a dict holding a lock": (
        fault_tasks.return_dict_holding_a_lock,
        ["the task returned a dict object", SENT_BACK, "'_thread.lock' object"],
    ),
    "lambda": (fault_tasks.return_lambda, ["the task returned a function object", SENT_BACK]),
}


def check(error: BaseException | None, words: list[str]) -> None:
    assert type(error) is TaskPicklingError and error.part == "result", repr(error)
    for phrase in words:
        assert phrase in str(error), f"{phrase!r} not in {str(error)!r}"


def test_an_unsendable_result_says_what_and_why(make):
    ex = make(1)
    for name, (fn, _) in RESULTS.items():
        ex.queue(name, fn)
    ex.queue("after", fault_tasks.square, 3)
    rec = Recorder(ex)
    rec.finish(limit=60)
    for name, (_, words) in RESULTS.items():
        check(rec.terminal[name].exception, words)
    assert rec.terminal["after"].result == 9
    assert ex.stats()["workers_started"] == 1  # the worker served on


def test_a_dask_worker_says_the_same(dask_cluster):
    ex = connect(dask_cluster)
    try:
        ex.queue("lock", fault_tasks.return_lock)
        rec = Recorder(ex)
        rec.finish(limit=60)
    finally:
        ex.terminate()
    check(rec.terminal["lock"].exception, RESULTS["lock"][1])
