"""Every argument is checked where it is given, by the rule of its kind
(``pipepool._checks``), with the same rule for the same parameter on every face: a
TypeError for the wrong type, a ValueError for a wrong value, each naming the argument.

Each row is a value that broke later, or not at all, before it was checked at the call
(issue 41, item 4): ``parallelism=1.5`` failed at the first ``sync()`` and again in
``__exit__``, ``max_workers=2.5`` served a submit and broke the pool at a map, a list as
``kwargs`` failed in the worker, ``with_options(timeout=True)`` meant one second."""

from __future__ import annotations

import concurrent.futures
import math
import multiprocessing
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

import tasks
from pipepool import LocalExecutor, ProcessPoolExecutor
from pipepool.cluster import ClusterExecutor
from pipepool.executor import RecordExecutor

# -- counts -------------------------------------------------------------------------------

COUNT_FACES: dict[str, Callable[[Any], object]] = {
    "LocalExecutor(parallelism)": lambda v: LocalExecutor(v),
    "LocalExecutor(prefetch)": lambda v: LocalExecutor(1, prefetch=v),
    "LocalExecutor(pipe_size)": lambda v: LocalExecutor(1, pipe_size=v),
    "LocalExecutor(max_tasks_per_child)": lambda v: LocalExecutor(1, max_tasks_per_child=v),
    "RecordExecutor(parallelism)": lambda v: RecordExecutor(v),
    "RecordExecutor(max_tasks_per_child)": lambda v: RecordExecutor(1, max_tasks_per_child=v),
    "ProcessPoolExecutor(max_workers)": lambda v: ProcessPoolExecutor(v),
    "ProcessPoolExecutor(max_tasks_per_child)": lambda v: ProcessPoolExecutor(
        1, max_tasks_per_child=v
    ),
    "ClusterExecutor(max_in_flight)": lambda v: ClusterExecutor(max_in_flight=v),
}
BAD_COUNTS = [
    (1.5, TypeError),  # parallelism=1.5: an internal TypeError at the first sync() before
    (2.0, TypeError),
    ("2", TypeError),  # a bare comparison error before
    (True, TypeError),  # bool is not a count
    (math.nan, TypeError),
    (0, ValueError),
    (-1, ValueError),
]


def name_of(face: str) -> str:
    return face.split("(")[1].rstrip(")")


@pytest.mark.parametrize("face", list(COUNT_FACES))
@pytest.mark.parametrize(("value", "error"), BAD_COUNTS)
def test_a_bad_count_is_refused_where_it_is_given(face, value, error):
    with pytest.raises(error) as caught:
        COUNT_FACES[face](value)
    name = name_of(face)
    assert type(caught.value) is error
    message = str(caught.value)
    assert message.startswith(f"{name} must be "), message
    assert message.endswith(f"got {value!r}"), message


def test_a_good_count_is_taken_as_an_int():
    assert LocalExecutor(3, prefetch=3).parallelism == 3
    np = pytest.importorskip("numpy")
    ex = LocalExecutor(np.int64(3), max_tasks_per_child=np.int32(2))
    assert (ex.parallelism, ex.max_tasks_per_child) == (3, 2)
    assert type(ex.parallelism) is int and type(ex.max_tasks_per_child) is int


def test_max_workers_of_two_and_a_half_is_refused_at_once_as_by_the_stdlib():
    """The stdlib refuses it at once; pipepool used to serve one submit, then break the
    pool at a map."""
    with pytest.raises(TypeError):
        concurrent.futures.ProcessPoolExecutor(2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^max_workers must be an integer >= 1 or None, got 2.5"):
        ProcessPoolExecutor(2.5)  # type: ignore[arg-type]


STDLIB_ROWS = [
    ({"max_workers": 0}, ValueError),
    ({"max_workers": -1}, ValueError),
    ({"max_workers": "2"}, TypeError),
    ({"max_workers": 2.5}, TypeError),
    ({"max_tasks_per_child": 0}, ValueError),
    ({"max_tasks_per_child": 1.5}, TypeError),
    ({"initializer": 5}, TypeError),
]


@pytest.mark.parametrize(("kwargs", "error"), STDLIB_ROWS)
def test_the_pool_refuses_what_the_stdlib_refuses_with_its_error_type(kwargs, error):
    with pytest.raises(error):
        concurrent.futures.ProcessPoolExecutor(**kwargs)
    with pytest.raises(error) as caught:
        ProcessPoolExecutor(**kwargs)
    assert type(caught.value) is error
    assert str(caught.value).startswith(next(iter(kwargs)))


def test_the_stdlib_words_for_max_workers_lead_the_message():
    """CPython's own test (test_max_workers_negative) matches these words."""
    for number in (0, -1):
        with pytest.raises(ValueError, match="max_workers must be greater than 0"):
            ProcessPoolExecutor(max_workers=number)


def test_mp_context_must_be_a_context():
    with pytest.raises(TypeError, match=r"^mp_context must be a multiprocessing context"):
        ProcessPoolExecutor(1, mp_context="spawn")
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    pool.shutdown()


# -- seconds: a task's timeout, sync's timeout ---------------------------------------------

BAD_TASK_TIMEOUTS = [
    (True, TypeError),  # with_options took it as 1 s
    ("2", TypeError),
    (1j, TypeError),
    (math.inf, ValueError),  # with_options took it, queue_call refused it
    (math.nan, ValueError),
    (0, ValueError),
    (-1, ValueError),
]


@pytest.fixture
def ex():
    ex = LocalExecutor(1, start_method="fork", loop_impl="python")
    ex.start()
    yield ex
    ex.terminate()


@pytest.fixture
def ppe():
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    yield pool
    pool.shutdown()


@pytest.mark.parametrize(("value", "error"), BAD_TASK_TIMEOUTS)
def test_a_tasks_timeout_has_one_rule_on_every_face(ex, ppe, value, error):
    with pytest.raises(error) as by_queue_call:
        ex.queue_call("k", tasks.echo, (1,), timeout=value)
    with pytest.raises(error) as by_with_options:
        ppe.with_options(timeout=value)
    message = str(by_queue_call.value)
    assert message == str(by_with_options.value)
    assert message.startswith(
        f"timeout must be a finite number of seconds > 0 or None, got {value!r}"
    )
    assert not ex.has_work()


@pytest.mark.parametrize("value", [0.5, 2, Fraction(3, 2), None])
def test_a_good_tasks_timeout_is_taken_on_every_face(ex, ppe, value):
    ex.queue_call("k", tasks.echo, (1,), timeout=value)
    assert ppe.with_options(timeout=value).submit(tasks.echo, 7).result(timeout=60) == 7


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("x", TypeError),
        (True, TypeError),
        (None, TypeError),
        (-1, ValueError),
        (math.inf, ValueError),
    ],
)
def test_a_bad_sync_timeout_is_refused_before_the_round(ex, value, error):
    ex.queue("k", tasks.echo, 1)
    with pytest.raises(error, match=r"^timeout must be a finite number of seconds >= 0, got"):
        ex.sync(timeout=value)
    assert ex.queued == {"k"}  # no round ran: nothing dispatched


def test_a_bad_wait_until_done_timeout_is_refused(ex):
    with pytest.raises(
        ValueError, match=r"^timeout must be a finite number of seconds >= 0 or None"
    ):
        ex.wait_until_done(-1)
    with pytest.raises(TypeError, match=r"^timeout must be"):
        ex.wait_until_done("1")
    assert ex.wait_until_done(Fraction(1, 2))


# -- callables, mappings, sequences --------------------------------------------------------

CALL_FACES: dict[str, Callable[..., object]] = {
    "LocalExecutor": lambda **kw: LocalExecutor(1, **kw),
    "RecordExecutor": lambda **kw: RecordExecutor(1, **kw),
    "ProcessPoolExecutor": lambda **kw: ProcessPoolExecutor(1, **kw),
}


@pytest.mark.parametrize("face", list(CALL_FACES))
def test_initializer_and_initargs_are_checked_on_every_face(face):
    make = CALL_FACES[face]
    with pytest.raises(TypeError, match=r"^initializer must be a callable or None, got 5$"):
        make(initializer=5)
    with pytest.raises(TypeError, match=r"^initargs must be a tuple \(or list\).*got 5$"):
        make(initializer=print, initargs=5)
    with pytest.raises(TypeError, match=r"^initargs must be .*got 'ab'$"):
        make(initializer=print, initargs="ab")  # two arguments, 'a' and 'b', before


def test_a_call_is_checked_where_it_is_queued(ex):
    with pytest.raises(TypeError, match=r"^args must be a tuple \(or list\) .*got 5$"):
        ex.queue_call("k", tasks.echo, 5)
    with pytest.raises(TypeError, match=r"^kwargs must be a mapping .*got \[1, 2\] \(a list\)$"):
        ex.queue_call("k", tasks.echo, (1,), [1, 2])  # failed in the worker before
    with pytest.raises(TypeError, match=r"^kwargs must have strings as keys"):
        ex.queue_call("k", tasks.echo, (1,), {1: 2})
    with pytest.raises(TypeError, match=r"^fn must be a callable, got 5$"):
        ex.queue_call("k", 5)
    with pytest.raises(TypeError, match=r"^fn must be a callable, got 5$"):
        ex.queue("k", 5)
    for queue in (ex.queue, lambda k, f: ex.queue_call(k, f)):
        with pytest.raises(TypeError, match=r"^key must be hashable, got \[1\] \(a list\)$"):
            queue([1], tasks.echo)
    assert not ex.has_work() and ex.queued == set()


def test_a_calls_other_sequences_and_mappings_are_taken(ex):
    from types import MappingProxyType

    ex.queue_call("list", tasks.echo, [1])
    ex.queue_call("range", tasks.echo, range(1, 2))
    ex.queue_call("proxy", tasks.echo, (), MappingProxyType({"x": 3}))
    assert ex.wait_until_done(60)
    events = ex.get_event_buffer()
    assert {k: e.result for k, e in events.items()} == {"list": 1, "range": 1, "proxy": 3}


def test_keys_and_key_are_checked(ex):
    with pytest.raises(TypeError, match=r"^keys must be an iterable of keys"):
        ex.get_event_buffer("k")  # one key: silently nothing before
    with pytest.raises(TypeError, match=r"^keys must be an iterable of keys"):
        ex.get_event_buffer(5)
    for verb in (ex.cancel, ex.kill):
        with pytest.raises(TypeError, match=r"^key must be hashable"):
            verb([1])  # 0 before: no task has that key, and none could


def test_help_shows_no_private_parameter():
    import inspect

    assert not [p for p in inspect.signature(LocalExecutor).parameters if p.startswith("_")]
