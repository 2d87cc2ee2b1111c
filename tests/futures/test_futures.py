"""pipepool.ProcessPoolExecutor: the concurrent.futures contract.

The contract tests run against both pipepool's class and the standard library's, on
every start method: a test that passes on the stdlib tests the real contract, not
pipepool's reading of it; and a pickling failure costs one future. Then pipepool's
promises at the edges of the interpreter: Ctrl-C, exit, a killed parent. What else only
pipepool promises (a lighter Future; a dead worker costs one future; per-task timeout and
kill) is in test_pipepool.py; the fixtures both use are this folder's conftest.py's.
Real processes throughout; every test is bounded by pytest-timeout.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import gc
import inspect
import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

import futures_tasks as ft
import pipepool
import proc_table
from helpers import FUTURE_WAIT, read_pid, wait_for, warm_up
from pipepool import TaskPicklingError, TaskUnpicklingError

WAIT = FUTURE_WAIT  # s: upper bound on any single result in these tests; a hang fails
TESTS_DIR = Path(__file__).resolve().parents[1]
SRC_DIR = TESTS_DIR.parent / "src"
POOLS = {"pipepool": pipepool.ProcessPoolExecutor, "stdlib": cf.ProcessPoolExecutor}
# The fork server and resource tracker up before any leak check (conftest.py).
pytestmark = pytest.mark.usefixtures("_shared_helpers_running")


alive = proc_table.alive  # running, not a zombie: /proc, or ps on macOS


def line_of(fn, text: str) -> int:
    """The file line number of the first source line of ``fn`` containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# == the concurrent.futures contract: both classes, every start method ======================


def test_submit_returns_results_and_reraises_with_remote_traceback(make_pool):
    pool = make_pool()
    assert pool.submit(ft.square, 7).result(timeout=WAIT) == 49
    assert pool.submit(ft.add, 2, b=3).result(timeout=WAIT) == 5
    f = pool.submit(ft.fail, 42)
    with pytest.raises(ft.TaskError) as info:
        f.result(timeout=WAIT)
    assert info.value.code == 42
    assert info.value.args == ("task failed on purpose", 42)
    assert isinstance(f.exception(), ft.TaskError)
    # The worker's traceback is the cause, naming the file and line that raised.
    line = line_of(ft.fail, "raise TaskError")
    assert f'futures_tasks.py", line {line}, in fail' in str(info.value.__cause__)
    # Whatever its type: a task's own CancelledError is not mistaken for a cancellation.
    f = pool.submit(ft.raise_cancelled)
    with pytest.raises(cf.CancelledError, match="raised by the task itself"):
        f.result(timeout=WAIT)
    assert not f.cancelled()


def test_map_keeps_order_with_any_chunksize(make_pool):
    pool = make_pool()
    expected = [i * i for i in range(50)]
    assert list(pool.map(ft.square, range(50), timeout=WAIT)) == expected
    assert list(pool.map(ft.square, range(50), chunksize=7, timeout=WAIT)) == expected
    assert list(pool.map(ft.add, [1, 2, 3], [10, 20], timeout=WAIT)) == [11, 22]  # shortest
    assert list(pool.map(ft.square, [], timeout=WAIT)) == []
    # One iterable: each item is the one argument, a tuple too (pipepool queues the
    # items themselves and makes each call's tuple later: docs/design.md, "Map calls").
    pairs = [(1, 2), (3, 4, 5), ()] * 200
    assert list(pool.map(len, pairs, timeout=WAIT)) == [2, 3, 0] * 200
    # An exception comes out at its own position, after the results before it.
    got = []
    with pytest.raises(ValueError, match="bad item 5"):
        for value in pool.map(ft.fail_if, range(10), itertools.repeat(5), timeout=WAIT):
            got.append(value)
    assert got == [0, 1, 4, 9, 16]
    with pytest.raises(ValueError):
        pool.map(ft.square, range(3), chunksize=0)


def test_map_submits_what_it_read_before_its_input_raised(make_pool, tmp_path):
    """An input that raises part way: ``map()`` raises its error, and every call read
    before it runs, as the stdlib's one-by-one submits do (pipepool submits the calls of
    ``map(chunksize=1)`` in bursts of 256: 600 of them end part way through the third)."""
    pool = make_pool()
    marks = tmp_path / "marks"
    marks.mkdir()

    def calls():
        for i in range(600):
            yield str(marks / f"mark-{i}")
        raise LookupError("the input broke")

    with pytest.raises(LookupError, match="the input broke"):
        pool.map(ft.sleep_then_touch, calls(), itertools.repeat(0.0))
    pool.shutdown(wait=True)
    assert sorted(os.listdir(marks)) == sorted(f"mark-{i}" for i in range(600))


def test_map_timeout_counts_from_the_call(make_pool):
    pool = make_pool()
    warm_up(pool)
    results = pool.map(ft.sleep_return, [0.0, 1.5], timeout=0.7)
    assert next(results) == 0.0
    start = time.monotonic()
    with pytest.raises(cf.TimeoutError):
        next(results)
    assert time.monotonic() - start < 1.2


def test_map_consumer_wakes_when_shutdown_cancels_its_items(make_pool, tmp_path):
    """A map iterator waiting on an item that shutdown(cancel_futures=True) cancels
    raises CancelledError instead of waiting forever; what was handed over finishes."""
    pool = make_pool(1)
    gate = tmp_path / "gate"
    results = pool.map(ft.wait_for_file, [str(gate)] * 30, range(30), timeout=WAIT)
    got: list = []
    ended: list[BaseException] = []

    def consume() -> None:
        try:
            got.extend(results)
        except BaseException as exc:  # what the iterator ended with is the point
            ended.append(exc)

    consumer = threading.Thread(target=consume)
    consumer.start()
    pool.shutdown(wait=False, cancel_futures=True)
    gate.touch()
    consumer.join(WAIT)
    assert not consumer.is_alive()
    assert len(ended) == 1 and isinstance(ended[0], cf.CancelledError)
    assert got == list(range(len(got))) and len(got) < 30


def test_shutdown_cancelling_a_map_waiting_behind_another_cancels_its_calls(make_pool, tmp_path):
    """A map whose calls wait behind another's (none sent to a worker yet):
    shutdown(cancel_futures=True) cancels them, and its iterator raises CancelledError
    at once rather than ending empty (pipepool makes a map's records as the pool has
    room: docs/design.md, "Map calls")."""
    pool = make_pool(1)
    gate = tmp_path / "gate"
    first = pool.map(ft.wait_for_file, [str(gate)] * 10, range(10), timeout=WAIT)
    second = pool.map(ft.square, range(100), timeout=WAIT)
    pool.shutdown(wait=False, cancel_futures=True)
    with pytest.raises(cf.CancelledError):
        next(second)
    gate.touch()
    with pytest.raises(cf.CancelledError):
        list(first)


def test_cancel_pending_futures(make_pool, tmp_path):
    pool = make_pool(1)
    gate = tmp_path / "gate"
    first = pool.submit(ft.wait_for_file, str(gate), "first")
    assert wait_for(first.running), "the first task is not running"
    fs = [pool.submit(ft.square, i) for i in range(10)]
    # The last ones are certainly still pending (stdlib and pipepool hand at most a few
    # futures ahead to the workers): they cancel, and never run.
    assert all(f.cancel() for f in fs[5:])
    assert all(f.cancelled() and f.done() for f in fs[5:])
    assert not first.cancel()  # running futures cannot be cancelled
    gate.touch()
    assert first.result(timeout=WAIT) == "first"
    assert [f.result(timeout=WAIT) for f in fs[:5]] == [0, 1, 4, 9, 16]
    for f in fs[5:]:
        with pytest.raises(cf.CancelledError):
            f.result(timeout=0)


def test_shutdown_wait_finishes_all_work_then_refuses_more(make_pool):
    pool = make_pool()
    fs = [pool.submit(ft.sleep_return, 0.1, i) for i in range(6)]
    pool.shutdown(wait=True)
    assert all(f.done() for f in fs)
    assert [f.result() for f in fs] == list(range(6))
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(ft.square, 2)
    with pytest.raises(RuntimeError):
        pool.map(ft.square, range(3))
    pool.shutdown()  # twice is fine


def test_context_manager_shuts_down_waiting(make_pool):
    with make_pool() as pool:
        fs = [pool.submit(ft.sleep_return, 0.1, i) for i in range(4)]
    assert [f.result(timeout=0) for f in fs] == list(range(4))
    with pytest.raises(RuntimeError):
        pool.submit(ft.square, 2)


def test_shutdown_without_wait_returns_at_once_and_work_completes(make_pool):
    pool = make_pool()
    warm_up(pool)
    fs = [pool.submit(ft.sleep_return, 0.5, i) for i in range(3)]
    start = time.monotonic()
    pool.shutdown(wait=False)
    assert time.monotonic() - start < 0.3
    assert [f.result(timeout=WAIT) for f in fs] == [0, 1, 2]
    with pytest.raises(RuntimeError):
        pool.submit(ft.square, 2)


@pytest.mark.parametrize("wait", [True, False], ids=["wait", "nowait"])
def test_shutdown_cancel_futures_cancels_pending_only(make_pool, flavor, tmp_path, wait):
    pool = make_pool(1)
    gate = tmp_path / "gate"
    first = pool.submit(ft.wait_for_file, str(gate), "first")
    assert wait_for(first.running), "the first task is not running"
    fs = [pool.submit(ft.square, i) for i in range(20)]
    opener = threading.Timer(0.3, gate.touch)
    opener.start()
    try:
        pool.shutdown(wait=wait, cancel_futures=True)
        if not wait and flavor == "stdlib":  # its manager thread cancels them, soon after
            assert wait_for(lambda: all(f.cancelled() for f in fs[5:])), "no cancellation"
        # pipepool cancels them before shutdown() returns, waiting or not.
        assert all(f.cancelled() for f in fs[5:]), "pending futures were not cancelled"
        assert first.result(timeout=WAIT) == "first"
        if not wait:
            pool.shutdown(wait=True)
    finally:
        opener.join()
    for i, f in enumerate(fs):
        if not f.cancelled():  # the few handed to workers before the shutdown still ran
            assert f.result(timeout=WAIT) == i * i
    if flavor == "pipepool":
        # Its cancelled futures are also notified, so wait() does not hang on them (the
        # stdlib's stay CANCELLED without notifying waiters, and wait() blocks).
        assert not cf.wait(fs, timeout=5).not_done


def test_as_completed_and_wait(make_pool):
    pool = make_pool()
    warm_up(pool)
    fs = [pool.submit(ft.sleep_return, d) for d in (0.8, 0.0, 0.3)]
    order = [f.result() for f in cf.as_completed(fs, timeout=WAIT)]
    assert order == [0.0, 0.3, 0.8]

    fast, slow = pool.submit(ft.sleep_return, 0.0), pool.submit(ft.sleep_return, 1.0)
    done, not_done = cf.wait([fast, slow], timeout=WAIT, return_when=cf.FIRST_COMPLETED)
    assert fast in done and slow in not_done
    failing = pool.submit(ft.fail, 1)
    done, _ = cf.wait([slow, failing], timeout=WAIT, return_when=cf.FIRST_EXCEPTION)
    assert failing in done
    done, not_done = cf.wait([slow], timeout=WAIT)
    assert done == {slow} and not not_done


def test_asyncio_run_in_executor(make_pool):
    pool = make_pool()

    async def main():
        loop = asyncio.get_running_loop()
        return await asyncio.gather(*(loop.run_in_executor(pool, ft.square, i) for i in range(10)))

    assert asyncio.run(main()) == [i * i for i in range(10)]


def test_done_callbacks_run_and_may_submit_more(make_pool):
    pool = make_pool()
    seen: list[int] = []
    chained: list[cf.Future] = []
    done = threading.Event()

    def callback(f: cf.Future) -> None:
        seen.append(f.result())
        chained.append(pool.submit(ft.square, f.result()))  # re-entrant submit: no deadlock
        done.set()

    pool.submit(ft.square, 3).add_done_callback(callback)
    assert done.wait(WAIT)
    assert seen == [9]
    assert chained[0].result(timeout=WAIT) == 81


def test_submit_from_many_threads(make_pool):
    pool = make_pool()
    results: dict[int, list[int]] = {}

    def client(n: int) -> None:
        fs = [pool.submit(ft.add, n * 1000, i) for i in range(100)]
        results[n] = [f.result(timeout=WAIT) for f in fs]

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert results == {n: [n * 1000 + i for i in range(100)] for n in range(4)}


def test_initializer_runs_in_each_worker(make_pool):
    pool = make_pool(initializer=ft.init_set, initargs=("ready",))
    assert set(pool.map(ft.get_initialized, range(8), timeout=WAIT)) == {"ready"}


def test_initializer_failure_breaks_the_pool(make_pool):
    pool = make_pool(initializer=ft.init_fail)
    f = pool.submit(ft.square, 2)
    with pytest.raises(BrokenProcessPool):
        f.result(timeout=WAIT)
    with pytest.raises(BrokenProcessPool):
        pool.submit(ft.square, 3)


def test_max_tasks_per_child_recycles_workers(make_pool, flavor, start_method):
    if flavor == "stdlib" and start_method == "fork":
        with pytest.raises(ValueError, match="fork"):
            make_pool(max_tasks_per_child=1)
        return  # the stdlib refuses this combination; pipepool allows it
    # Above 1 the stdlib deadlocks on Python 3.11 to 3.13 (CPython gh-115634).
    for limit in [1] if flavor == "stdlib" else [1, 3]:
        pool = make_pool(max_tasks_per_child=limit)
        pids = [f.result(timeout=WAIT) for f in [pool.submit(ft.pid_of) for _ in range(9)]]
        served = collections.Counter(pids)
        assert max(served.values()) <= limit, served
        assert len(served) >= 9 // limit


def test_constructor_and_map_argument_checks(flavor):
    cls = POOLS[flavor]
    with pytest.raises(ValueError):
        cls(0)
    with pytest.raises(TypeError):
        cls(1, initializer=5)
    with pytest.raises(ValueError):
        cls(1, max_tasks_per_child=0)
    with pytest.raises(TypeError):
        cls(1, max_tasks_per_child="3")


def test_map_buffersize_reads_input_lazily(make_pool, flavor):
    if flavor == "stdlib" and sys.version_info < (3, 14):
        pytest.skip("the stdlib has buffersize from Python 3.14")
    pool = make_pool()
    taken: list[int] = []

    def source():
        for i in itertools.count():
            taken.append(i)
            yield i

    results = pool.map(ft.square, source(), buffersize=4, timeout=WAIT)
    assert [next(results) for _ in range(10)] == [i * i for i in range(10)]
    assert len(taken) <= 10 + 4
    results.close()  # stops reading; the buffered futures are cancelled or finish

    taken.clear()
    chunked = pool.map(ft.square, source(), chunksize=3, buffersize=2, timeout=WAIT)
    assert [next(chunked) for _ in range(9)] == [i * i for i in range(9)]
    assert len(taken) <= (3 + 2 + 1) * 3
    chunked.close()
    with pytest.raises(ValueError):
        pool.map(ft.square, range(3), buffersize=0)
    with pytest.raises(TypeError):
        pool.map(ft.square, range(3), buffersize=2.0)


@pytest.mark.parametrize("chunksize, buffersize", [(1, None), (3, None), (1, 2), (4, 2)], ids=str)
def test_map_frees_each_result_once_yielded(make_pool, flavor, chunksize, buffersize):
    """A result the consumer has dropped is garbage at once: a long map of big results
    holds one at a time, not all of them (issue 14). A result only a reference cycle
    still holds counts as freed (the collector would free it): the full collection runs
    only then, as it costs seconds a test in an xdist worker with a big heap."""
    if buffersize is not None and flavor == "stdlib" and sys.version_info < (3, 14):
        pytest.skip("the stdlib has buffersize from Python 3.14")
    pool = make_pool()
    kwargs = {} if buffersize is None else {"buffersize": buffersize}
    refs = []
    for obj in pool.map(ft.make_payload, range(10), timeout=WAIT, chunksize=chunksize, **kwargs):
        assert obj.n == len(refs)
        refs.append(weakref.ref(obj))
        del obj
        alive_now = [r().n for r in refs if r() is not None]
        if alive_now:
            gc.collect()
            alive_now = [r().n for r in refs if r() is not None]
        assert not alive_now, f"results still referenced after they were yielded: {alive_now}"
    assert len(refs) == 10


# == pickling failures: one future each ======================================================

# row id: (how to submit it, shared with the stdlib, pipepool's error type, its .part)
PICKLING_CASES = {
    "lambda": (lambda pool: pool.submit(lambda: 1), True, TaskPicklingError, "function"),
    "unpicklable argument": (
        lambda pool: pool.submit(ft.identity, threading.Lock()),
        True,
        TaskPicklingError,
        "arguments",
    ),
    "unpicklable result": (
        lambda pool: pool.submit(ft.return_lock),
        True,
        TaskPicklingError,
        "result",
    ),
    # The stdlib breaks the whole pool on the rows below: pipepool's rows only.
    "exception that cannot be unpickled": (
        lambda pool: pool.submit(ft.raise_two_arg_error),
        False,
        TaskUnpicklingError,
        "exception",
    ),
    "result that cannot be unpickled": (
        lambda pool: pool.submit(ft.return_unloadable),
        False,
        TaskUnpicklingError,
        "result",
    ),
    "argument the worker cannot unpickle": (
        lambda pool: pool.submit(ft.identity, ft.Unloadable()),
        False,
        TaskUnpicklingError,
        "task",
    ),
}


@pytest.mark.parametrize(
    ("flavor", "case"),
    [
        (flavor, case)
        for case, (_, shared, _, _) in PICKLING_CASES.items()
        for flavor in POOLS
        if shared or flavor == "pipepool"
    ],
)
def test_pickling_failures_fail_only_their_own_future(make_pool, flavor, case):
    """The bad future fails (pipepool: with its typed error naming the part), and the
    100 submitted right behind it all succeed. One row per case, so one failure hides
    none of the others."""
    submit_bad, _, error_type, part = PICKLING_CASES[case]
    pool = make_pool()
    bad = submit_bad(pool)
    following = [pool.submit(ft.square, i) for i in range(100)]
    error = bad.exception(timeout=WAIT)
    assert error is not None, "the future did not fail"
    if flavor == "pipepool":
        assert isinstance(error, error_type), repr(error)
        assert error.part == part, f"part {error.part!r}, not {part!r}"
    results = [f.result(timeout=WAIT) for f in following]
    assert results == [i * i for i in range(100)], "a following task failed"


# == pipepool only: Ctrl-C, and no worker outliving the interpreter ==========================

SCRIPT = textwrap.dedent("""
    import multiprocessing, sys, threading, time
    import futures_tasks as ft
    from pipepool import ProcessPoolExecutor

    def announce_waiting(path):
        # Write ``path`` once the main thread waits inside Future.result(): on a
        # Condition, or driving the pool's loop itself (its wait between two rounds,
        # LocalExecutor._idle).
        main = threading.main_thread().ident
        while True:
            frame, names = sys._current_frames().get(main), set()
            while frame is not None:
                names.add(frame.f_code.co_name)
                frame = frame.f_back
            if "result" in names and names & {"wait", "_idle"}:
                open(path, "w").close()
                return
            time.sleep(0.001)

    if __name__ == "__main__":
        method, mode, tmp = sys.argv[1:4]
        pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(method))
        if mode == "exit":  # fall off the end: the submitted work still completes
            pool.submit(ft.sleep_then_touch, tmp + "/done", 0.3)
            pool.submit(ft.announce_and_sleep, tmp + "/w0", 0.5)
            sys.exit(0)
        if mode == "exit-crash":  # and survives losing a worker meanwhile
            pool.submit(ft.sleep_then_sigkill, 0.2)
            pool.submit(ft.announce_and_sleep, tmp + "/w0", 0.5)
            for i in range(6):
                pool.submit(ft.sleep_then_touch, f"{tmp}/done{i}", 0.1)
            sys.exit(0)
        fs = [pool.submit(ft.announce_and_sleep, f"{tmp}/w{i}", 60) for i in range(2)]
        fs += [pool.submit(ft.sleep_return, 60) for _ in range(10)]
        threading.Thread(target=announce_waiting, args=(tmp + "/waiting",), daemon=True).start()
        if mode == "with":
            with pool:
                fs[0].result()
        else:
            fs[0].result()
""")


def run_script(tmp_path: Path, start_method: str, mode: str) -> subprocess.Popen:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC_DIR), str(TESTS_DIR)]))
    return subprocess.Popen(
        [sys.executable, str(script), start_method, mode, str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("mode", ["result", "with"])
def test_ctrl_c_interrupts_promptly_and_stops_the_workers(tmp_path, start_method, mode):
    proc = run_script(tmp_path, start_method, mode)
    try:
        pids = [read_pid(tmp_path / f"w{i}") for i in range(2)]
        waiting = tmp_path / "waiting"
        assert wait_for(waiting.exists, WAIT), "the main thread did not wait in result()"
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=WAIT)
        assert time.monotonic() - start < 5, "Ctrl-C took too long"
    finally:
        proc.kill()
        proc.wait()
    assert "KeyboardInterrupt" in err, err
    assert wait_for(lambda: not any(alive(p) for p in pids), 5), "the workers did not exit"


def test_workers_exit_when_the_parent_is_killed(tmp_path, start_method):
    proc = run_script(tmp_path, start_method, "result")
    try:
        pids = [read_pid(tmp_path / f"w{i}") for i in range(2)]
        proc.kill()
        proc.wait(WAIT)
    finally:
        proc.kill()
        proc.communicate()
    assert wait_for(lambda: not any(alive(p) for p in pids), 5), "orphaned workers live on"


@pytest.mark.parametrize("mode", ["exit", "exit-crash"])
def test_interpreter_exit_finishes_submitted_work(tmp_path, start_method, mode):
    # "exit-crash" loses a worker while the interpreter shuts down, when Python 3.12
    # refuses to fork a replacement: the work must still complete on the others.
    proc = run_script(tmp_path, start_method, mode)
    try:
        _, err = proc.communicate(timeout=WAIT)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    done = ["done"] if mode == "exit" else [f"done{i}" for i in range(6)]
    missing = [name for name in done if not (tmp_path / name).exists()]
    assert not missing, f"submitted work did not complete at exit: {missing}\n{err}"
    pid = read_pid(tmp_path / "w0", 0)
    assert wait_for(lambda: not alive(pid), 5), "the worker did not exit"
