"""Arguments checked where they are given (issue 30): ``queue_call``'s ``timeout`` at
the call, ``queue()``'s keywords the task's, and an Event's repr a summary."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

import tasks
from helpers import Recorder
from pipepool import Event, LocalExecutor, State


@pytest.fixture
def ex():
    ex = LocalExecutor(1, start_method="fork", loop_impl="python")
    ex.start()
    yield ex
    ex.terminate()


@pytest.mark.parametrize(
    ("timeout", "error"),
    [
        (-1, ValueError),
        (0, ValueError),
        (0.0, ValueError),
        (math.nan, ValueError),
        (math.inf, ValueError),
        ("2", TypeError),
        (True, TypeError),
        ([1], TypeError),
        (1j, TypeError),
    ],
)
def test_a_bad_timeout_is_refused_at_the_call(ex, timeout, error):
    with pytest.raises(error, match="timeout"):
        ex.queue_call("k", tasks.echo, (1,), timeout=timeout)
    assert ex.queued == set() and not ex.has_work()  # nothing queued, nothing held
    ex.queue_call("k", tasks.echo, (1,), exclusive=True)  # the key is free


@pytest.mark.parametrize("timeout", [1, 2.5, Fraction(3, 2), None])
def test_a_good_timeout_is_taken(ex, timeout):
    ex.queue_call("k", tasks.echo, (1,), timeout=timeout)
    (t,) = ex._queue
    assert t.timeout == (None if timeout is None else float(timeout))
    rec = Recorder(ex)
    rec.finish()
    assert rec.terminal["k"].result == 1


def test_a_numpy_scalar_timeout_is_taken(ex):
    np = pytest.importorskip("numpy")
    ex.queue_call("k", tasks.echo, (1,), timeout=np.float32(2.0))
    ex.queue_call("j", tasks.echo, (1,), timeout=np.int64(2))
    with pytest.raises(ValueError, match="timeout"):
        ex.queue_call("n", tasks.echo, (1,), timeout=np.float64("nan"))
    assert [t.timeout for t in ex._queue] == [2.0, 2.0]


def test_queue_passes_its_keywords_to_the_task_and_says_so(ex):
    """``timeout=`` given to queue() is the task's own argument, as its docstring says."""
    assert "queue_call" in LocalExecutor.queue.__doc__
    assert "keyword" in LocalExecutor.queue.__doc__
    ex.queue("k", tasks.sleep, 0, timeout=0.5)  # tasks.sleep takes no timeout
    rec = Recorder(ex)
    rec.finish()
    assert isinstance(rec.terminal["k"].exception, TypeError)
    assert "timeout" in str(rec.terminal["k"].exception)


def test_an_events_repr_summarises_its_result():
    big = Event("k", State.SUCCESS, b"x" * 1_000_000, None, 123, 2)
    text = repr(big)
    assert len(text) < 200
    for part in ("'k'", "dispatch=2", "success", "pid=123", "bytes", "1000000"):
        assert part in text
    assert "xxxx" not in text
    failed = repr(Event("k", State.FAILED, None, ValueError("boom" * 10_000), None))
    assert len(failed) < 200 and "ValueError" in failed
    assert "list of 3 items" in repr(Event("k", State.SUCCESS, [1, 2, 3]))
    assert "result=7" in repr(Event("k", State.SUCCESS, 7))
