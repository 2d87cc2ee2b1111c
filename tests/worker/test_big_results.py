"""Big results on the wire: pickled in pieces by the worker, read in place by the parent.

The worker sends a result's big bytes objects as pieces of their own (no copy into the
pickle) with one reused pickler, and the parent reads a big frame straight into the
buffer it unpickles from. What could break: a pickler memo that outlives a result (a
later result referring to an earlier one), a reference inside one result lost, a
mutable result sent by reference, a failed dump poisoning the next one.
"""

from __future__ import annotations

import pytest

import tasks
from helpers import Recorder
from pipepool import State, TaskPicklingError


@pytest.mark.timeout(60)
def test_big_results_arrive_whole_and_independent(make):
    ex = make(1)  # one worker: every result goes through the same pickler
    keys = []
    for i in range(3):
        keys += [("shared", i), ("twice", i), ("bytearray", i)]
        ex.queue(("shared", i), tasks.big_shared, i)
        ex.queue(("twice", i), tasks.big_twice, i)
        ex.queue(("bytearray", i), tasks.big_bytearray, i)
    ex.queue("fails", tasks.big_then_unpicklable)
    ex.queue("after", tasks.big_shared)
    rec = Recorder(ex)
    rec.finish()
    assert not rec.duplicates
    got = {k: e.result for k, e in rec.terminal.items()}
    for i in range(3):
        assert rec.terminal[("shared", i)].state is State.SUCCESS
        assert type(got[("shared", i)]) is bytes and got[("shared", i)] == tasks.BIG_SHARED
        first, second = got[("twice", i)]
        assert first == bytes([i]) * (1 << 17) and second is first  # one object, as sent
        assert type(got[("bytearray", i)]) is bytearray
        assert got[("bytearray", i)] == bytearray([i]) * (1 << 17)
    error = rec.terminal["fails"].exception
    assert isinstance(error, TaskPicklingError) and error.part == "result"
    assert rec.terminal["after"].state is State.SUCCESS
    assert got["after"] == tasks.BIG_SHARED
