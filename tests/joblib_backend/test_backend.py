"""The "pipepool" joblib backend against the real joblib (and loky, which joblib ships)."""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
import warnings
from concurrent.futures.process import BrokenProcessPool

import pytest

import proc_table
from helpers import START_METHODS, wait_for

from .joblib_support import require

joblib = require("joblib")
np = require("numpy")

from joblib import Parallel, delayed, parallel_config  # noqa: E402
from joblib.externals.loky.process_executor import TerminatedWorkerError  # noqa: E402

import pipepool.joblib as pj  # noqa: E402  (after the require: it imports joblib)
from pipepool import LocalExecutor, WorkerLostError  # noqa: E402
from pipepool.joblib import _shared  # noqa: E402  (the shared pool, to see it kept)

BOUND = 60.0  # s: waits on real conditions end here, never by sleeping longer


@pytest.fixture(autouse=True)
def fresh_pool():
    """Each test starts without a shared pool and leaves none behind."""
    pj.shutdown_pool()
    yield
    pj.shutdown_pool()


def square(x):
    return x * x


def kill_self_at(i, target):
    if i == target:
        os.kill(os.getpid(), signal.SIGKILL)
    return i


def nested(backend):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = Parallel(n_jobs=2, backend=backend)(delayed(square)(i) for i in range(4))
    return result, [str(w.message) for w in caught]


def start_pipepool_pool():
    """Runs inside a loky worker, where multiprocessing's default context is "loky"."""
    import multiprocessing

    from pipepool import ProcessPoolExecutor

    with ProcessPoolExecutor(2) as pool:
        return multiprocessing.get_start_method(), pool.submit(square, 7).result()


def sleep_then(seconds, marker_dir):
    open(os.path.join(marker_dir, str(os.getpid())), "w").close()
    time.sleep(seconds)
    return seconds


def fail_soon():
    time.sleep(0.2)
    raise ValueError("first error")


def array_kind(a):
    return type(a).__name__, float(a.sum())


# -- the start-method fix in executor.py ----------------------------------------------------


def test_pipepool_starts_inside_a_loky_worker():
    # Inside a loky worker the default start method is "loky"; LocalExecutor used to
    # refuse it ("unknown start_method 'loky'"). Spawn and forkserver cannot start there.
    results = Parallel(n_jobs=2, backend="loky")(delayed(start_pipepool_pool)() for _ in range(2))
    assert results == [("loky", 49), ("loky", 49)]


def test_an_unregistered_start_method_is_still_an_error():
    with pytest.raises(ValueError, match=r"start_method must be .* got 'nonsense'"):
        LocalExecutor(1, start_method="nonsense")


# -- registration, results, nesting ----------------------------------------------------------


def test_registered_on_import_and_selected_by_name():
    assert joblib.parallel.BACKENDS["pipepool"] is pj.PipepoolBackend
    with parallel_config(backend="pipepool", n_jobs=2):
        p = Parallel()
        assert isinstance(p._backend, pj.PipepoolBackend)
        assert p(delayed(square)(i) for i in range(50)) == [i * i for i in range(50)]


def test_completion_callbacks_run_in_the_thread_that_settles_the_batch(monkeypatch):
    # No thread hop per batch: joblib's callback (which builds and submits the next
    # batch) runs in the pool's driver, whose next round sends that batch.
    threads = []
    retrieve = pj.PipepoolBackend.retrieve_result_callback

    def noting_the_thread(self, future):
        threads.append(threading.current_thread().name)
        return retrieve(self, future)

    monkeypatch.setattr(pj.PipepoolBackend, "retrieve_result_callback", noting_the_thread)
    out = Parallel(n_jobs=2, backend="pipepool", batch_size=1)(
        delayed(square)(i) for i in range(50)
    )
    assert out == [i * i for i in range(50)]
    assert len(threads) == 50
    assert {name.split("-")[:2] == ["pipepool", "driver"] for name in threads} == {True}, threads


@pytest.mark.parametrize("return_as", ["list", "generator", "generator_unordered"])
def test_return_as_modes(return_as):
    out = Parallel(n_jobs=2, backend="pipepool", return_as=return_as)(
        delayed(square)(i) for i in range(200)
    )
    values = list(out)
    if return_as == "generator_unordered":
        values.sort()
    assert values == [i * i for i in range(200)]


@pytest.mark.parametrize("start_method", START_METHODS)
def test_backend_name_resolves_inside_workers(start_method):
    # A task's nested Parallel(backend="pipepool") must find the name in the worker:
    # under spawn and forkserver that is a fresh interpreter, registered only because
    # unpickling the task imported pipepool.joblib. It falls back to sequential there.
    with parallel_config(backend="pipepool", n_jobs=2, start_method=start_method):
        results = Parallel()(delayed(nested)("pipepool") for _ in range(2))
    for values, messages in results:
        assert values == [0, 1, 4, 9]
        assert any("setting n_jobs=1" in m for m in messages)


@pytest.mark.parametrize("backend", ["loky", "multiprocessing"])
def test_joblibs_process_backends_nest_inside_a_pipepool_worker(backend):
    # A pipepool worker may have children (docs/containment.md, "Pools inside tasks"):
    # joblib's own process backends start their nested pool there, without a warning.
    with parallel_config(backend="pipepool", n_jobs=2):
        results = Parallel()(delayed(nested)(backend) for _ in range(2))
    assert results == [([0, 1, 4, 9], [])] * 2


def test_name_resolves_inside_a_loky_worker():
    # This module imports pipepool.joblib, so a loky worker that unpickles ``nested``
    # (by reference) imports it too: the nested call runs on a pipepool pool started
    # inside the loky worker (forked: see test_pipepool_starts_inside_a_loky_worker).
    results = Parallel(n_jobs=2, backend="loky")(delayed(nested)("pipepool") for _ in range(2))
    assert results == [([0, 1, 4, 9], [])] * 2


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_lambdas_closures_and_initializer_travel_by_cloudpickle(start_method, tmp_path):
    offset = 10
    marker = tmp_path / "init"

    def init():  # a local function: plain pickle could not send it under spawn
        marker.with_name(f"init-{os.getpid()}").touch()

    out = Parallel(n_jobs=2, backend="pipepool", start_method=start_method, initializer=init)(
        delayed(lambda x: x + offset)(i) for i in range(20)
    )
    assert out == [i + offset for i in range(20)]
    assert list(tmp_path.glob("init-*"))


def test_pool_is_reused_across_calls_and_replaced_when_arguments_change():
    def pids_of_a_call(n_jobs):
        return set(
            Parallel(n_jobs=n_jobs, backend="pipepool")(delayed(os.getpid)() for _ in range(50))
        )

    before = pids_of_a_call(2)
    first = _shared._pool
    after = pids_of_a_call(2)
    assert _shared._pool is first
    assert after <= set(first.worker_pids()) and before <= set(first.worker_pids())
    assert os.getpid() not in before
    pids_of_a_call(3)
    assert _shared._pool is not first


def fail_while_exists(path):
    if os.path.exists(path):
        raise RuntimeError("initializer failed on purpose")


def test_a_pool_whose_initializer_fails_is_replaced_by_the_next_call(tmp_path):
    """Ten times over, as the second call's failure came at random: the broken pool
    cancels the first call's other tasks in its own thread, maybe after that call has
    ended, and joblib's abort flag is the ``Parallel`` object's, reset per call. Such a
    late outcome reached joblib during the second call, which then returned [] (4 of 15
    times in a loop like this one) until the backend stopped passing on outcomes of an
    aborted call."""
    for attempt in range(10):
        flag = tmp_path / f"fail{attempt}"
        flag.touch()
        call = Parallel(
            n_jobs=2, backend="pipepool", initializer=fail_while_exists, initargs=(str(flag),)
        )
        with pytest.raises(BrokenProcessPool, match="initializer"):
            call(delayed(square)(i) for i in range(4))
        flag.unlink()
        # Same arguments: a broken pool would be reused (and fail again) were it still
        # shared.
        assert call(delayed(square)(i) for i in range(4)) == [0, 1, 4, 9], attempt
        pj.shutdown_pool()


# -- a worker that dies ---------------------------------------------------------------------


def test_a_killed_worker_fails_its_batch_with_a_named_error_and_the_pool_goes_on():
    with pytest.raises(pj.WorkerCrashedError) as info:
        Parallel(n_jobs=2, backend="pipepool")(delayed(kill_self_at)(i, 500) for i in range(1000))
    err = info.value
    assert isinstance(err, TerminatedWorkerError)  # loky's type: loky-era code still works
    assert isinstance(err, WorkerLostError)
    assert err.signal == "SIGKILL" and err.exitcode == -signal.SIGKILL
    # The error names the batch: its first calls and its last, around the killer.
    first, last = (int(c.split("(")[1].split(",")[0]) for c in (err.calls[0], err.calls[-1]))
    assert first <= 500 <= last
    assert "kill_self_at(" in str(err) and "SIGKILL" in str(err)
    assert err.cause == "signal" and "Cause: a signal, sent by the task itself" in str(err)
    pool = _shared._pool
    # The next call runs on the same pool: no restart.
    assert Parallel(n_jobs=2, backend="pipepool")(delayed(square)(i) for i in range(10)) == [
        i * i for i in range(10)
    ]
    assert _shared._pool is pool
    again = pickle.loads(pickle.dumps(err))
    assert (again.pid, again.exitcode, again.calls, again.cause) == (
        err.pid,
        err.exitcode,
        err.calls,
        err.cause,
    )


def test_abort_kills_the_tasks_of_the_failed_call_and_keeps_the_pool(tmp_path):
    with pytest.raises(ValueError, match="first error"):
        Parallel(n_jobs=2, backend="pipepool", batch_size=1)(
            [delayed(sleep_then)(BOUND * 2, str(tmp_path)), delayed(fail_soon)()]
            + [delayed(sleep_then)(BOUND * 2, str(tmp_path)) for _ in range(4)]
        )
    pool = _shared._pool
    started = [int(p.name) for p in tmp_path.iterdir()]
    assert started
    # No worker is left running the aborted call: the ones that ran its sleeps die.
    assert wait_for(lambda: not any(proc_table.alive(p) for p in started), BOUND), (
        "the aborted tasks' workers live on"
    )
    assert Parallel(n_jobs=2, backend="pipepool")(delayed(square)(3) for _ in range(4)) == [9] * 4
    assert _shared._pool is pool


# -- arrays -----------------------------------------------------------------------------------


def test_large_arrays_travel_as_memmaps_and_their_files_go_with_the_call(tmp_path):
    a = np.arange(300_000, dtype=np.float64)  # 2.4 MB, above the default max_nbytes (1M)
    out = Parallel(n_jobs=2, backend="pipepool", temp_folder=str(tmp_path))(
        delayed(array_kind)(a) for _ in range(3)
    )
    assert out == [("memmap", float(a.sum()))] * 3
    # Removed once the call ended, off the caller's clock (as loky's tracker does).
    assert wait_for(lambda: os.listdir(tmp_path) == []), "the call's memmapped files stay"


def test_returned_arrays_arrive_intact_and_writable():
    out = Parallel(n_jobs=2, backend="pipepool")(
        delayed(np.full)(1000, i, dtype=np.int32) for i in range(8)
    )
    for i, arr in enumerate(out):
        assert arr.dtype == np.int32 and arr.shape == (1000,) and (arr == i).all()
        arr[0] = -1  # a copy the caller owns


def omp_threads(_):
    from threadpoolctl import threadpool_info

    return os.environ.get("OMP_NUM_THREADS"), [
        p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"
    ]


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_inner_max_num_threads_limits_the_workers_thread_pools(start_method):
    require("threadpoolctl")
    with parallel_config(
        backend="pipepool", n_jobs=2, inner_max_num_threads=1, start_method=start_method
    ):
        out = Parallel()(delayed(omp_threads)(i) for i in range(4))
    for env, blas in out:
        assert env == "1"
        assert all(n == 1 for n in blas)  # numpy's BLAS, whatever loaded it first
