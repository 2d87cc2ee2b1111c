"""Fixtures: both loop implementations, every start method, executor factories, the
shared Dask cluster, and the leak check every test runs under. Helpers are in helpers.py."""

from __future__ import annotations

import copyreg
import os
import signal
from pathlib import Path

import pytest

import leakcheck
import optional
from helpers import START_METHODS, Executors, SharedCluster, implementations, is_tblib
from pipepool import loop as _impl

_STRICT = pytest.StashKey[bool]()


@pytest.fixture(autouse=True)
def leak_check(request: pytest.FixtureRequest):
    """Fail any test that leaves a child process, an fd or a thread behind (what lives
    on purpose is named in leakcheck.py). Autouse, so it is set up before and torn down
    after the test's other function-scoped fixtures: their clean-up counts as the test's."""
    before = leakcheck.snapshot()
    yield
    strict = request.node.stash.get(_STRICT, False)
    left = leakcheck.leaks(before, grace=0.0 if strict else leakcheck.GRACE, collect=not strict)
    if left:
        pytest.fail("left behind by this test:\n  " + "\n  ".join(left), pytrace=False)


@pytest.fixture
def no_leaks(request: pytest.FixtureRequest) -> None:
    """The leak check, strict: for tests whose point is that nothing is left, the moment
    the executor returns from ``end()`` or ``terminate()``, with no grace period and no
    garbage collection to close what the code under test forgot."""
    request.node.stash[_STRICT] = True


@pytest.fixture(params=implementations())
def impl(request: pytest.FixtureRequest) -> str:
    """The loop implementation under test; "cython" fails loudly if it did not build."""
    _impl.load(request.param)  # raises ImportError when the compiled loop is missing
    return request.param


@pytest.fixture(params=implementations()[-1:])
def one_impl(request: pytest.FixtureRequest) -> str:
    """One loop implementation, for stress rows whose subject is what the twins share
    (the executor's bookkeeping; each twin's own part is tested on both elsewhere): the
    compiled loop users run, unless PIPEPOOL_IMPL pins the pure one."""
    _impl.load(request.param)
    return request.param


@pytest.fixture
def loop_module(impl: str):
    return _impl.load(impl)[1]


@pytest.fixture(params=START_METHODS)
def start_method(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make(impl: str, start_method: str):
    """``make(parallelism, **kwargs)``: a started LocalExecutor on this test's loop and
    start method; each is terminated after the test, whatever the test left behind."""
    executors = Executors(impl, start_method)
    yield executors
    executors.close()


@pytest.fixture
def pool(impl):
    """``pool(parallelism, start_method, **kwargs)``: a started LocalExecutor on ``impl``
    (fork unless told), terminated at teardown whatever the test did."""
    executors = Executors(impl, "fork")
    yield executors
    executors.close()


@pytest.fixture
def pool_on_one_loop(one_impl):
    """``pool`` on one loop implementation (conftest's ``one_impl``), for stress rows
    whose subject is bookkeeping both twins share."""
    executors = Executors(one_impl, "fork")
    yield executors
    executors.close()


@pytest.fixture(scope="session")
def _shared_cluster(tmp_path_factory: pytest.TempPathFactory):
    optional.require("distributed")
    cluster = SharedCluster(tmp_path_factory.mktemp("dask"))
    with leakcheck.keep("the shared Dask cluster", cluster.held):
        try:
            yield cluster
        finally:
            cluster.close()


@pytest.fixture
def pipes_only(monkeypatch):
    """Every payload through the pipes, as before the shared rings: for the tests of the
    pipe path (partial writes, a worker blocked in a big write). The parent writes the
    threshold into each region it makes, so this holds for every start method."""
    from pipepool.worker import _region

    monkeypatch.setattr(_region, "THRESHOLD", 1 << 62)


@pytest.fixture
def dask_cluster(_shared_cluster: SharedCluster):
    """The Dask cluster the ClusterExecutor tests share (helpers.ClusterHost: a
    LocalCluster of two worker processes, in a process of its own), with every worker
    there: a test may kill one, and the next one waits for its replacement."""
    import tblib.pickling_support

    tblib.pickling_support.install()  # as importing distributed did (undone below)
    return _shared_cluster.whole()


@pytest.fixture(scope="module", autouse=True)
def no_tblib_after_this_module():
    """Importing distributed registers tblib's reducer for every exception class in this
    process (copyreg), and so in LocalExecutor's forked workers, where SystemExit then
    loses its code. Later modules test LocalExecutor in a process without Dask: undo it."""
    yield
    for cls, reducer in list(copyreg.dispatch_table.items()):
        if is_tblib(reducer):
            del copyreg.dispatch_table[cls]


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (addopts): one worker more than this process' CPUs, up to addopts'
    --maxprocesses 4. Most of a worker's time goes to waiting on processes it started
    (pools' workers, Airflow's and Celery's processes, timeouts that must expire): with one
    worker a CPU, the CPUs were 81-86% busy over the README's pytest in fresh-clone CI runs
    of a4ff4fc and after it on the 2-core machine. PYTEST_XDIST_AUTO_NUM_WORKERS, as
    xdist reads it, still decides when set; a single CPU keeps one worker."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 1 if not cpus or cpus < 2 else cpus + 1


TESTS = Path(__file__).parent  # as pytest names the items: not resolved
_AIRFLOW_TESTS = str(TESTS / "airflow_face")


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C deliverable, however the suite was launched. A shell starts a background
    job (``pytest &``, a CI runner's step, nohup) with SIGINT ignored, and an ignored
    signal stays ignored across fork and exec: the tests that press Ctrl-C on this
    process or on a child they start would then test nothing and fail. A handled
    signal is reset to its default in an exec'd child, so Python's own handler there
    comes back too."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# The smoke subset (`pytest -m smoke`, issue 35): what .ci/run runs on the other Pythons
# this machine has (3.12, 3.13; the whole suite runs on the default one): the core
# modules (tests/core/), the loop twins, the futures face, pipepool run, the portable
# pass' core and the executor's basics, about a minute. Keyed by path under tests/ (a
# file's name is unique only in its room); tests/project/test_test_rooms.py fails on an
# entry that names no file, so a file that moves or is renamed cannot leave quietly.
SMOKE_FILES = frozenset(
    {
        "core/test_impl.py",
        "core/test_frames.py",
        "loop/test_loop.py",
        "loop/test_differential.py",
        "loop/test_twins.py",
        "futures/test_futures.py",
        "futures/test_driver.py",
        "executor/test_executor.py",
        "run/test_cli.py",
        "cli/test_io.py",
        "contract/test_portable.py",
        "core/test_platform.py",
        "project/test_profile_command.py",
        "contract/test_no_dev_shm.py",
        # Fresh interpreters under -W error::DeprecationWarning: a fork pool's replacements
        # come from a single-threaded process. The warning exists from 3.12 on, so only the
        # other Pythons' passes can see this fail (issue 35).
        "worker/test_fork_zygote.py",
    }
)
SMOKE_ROOMS = frozenset({"core"})  # every file in these folders


# Files that spend most of a long run waiting on processes of their own (Airflow's
# api-server, dag-processor and scheduler; Celery workers and their broker), with the
# machine's CPUs partly idle. Under xdist each goes to the front of the queue, paired with
# one of the longest busy files, so that it waits beside work that uses the CPU, not
# beside another waiter or alone at the end of the run: pytest-xdist orders files by
# their number of tests, which put these few-test files last, two at a time (the
# fresh-clone CI of a4ff4fc: the CPUs 40-70% busy for the last minute and beside the
# Airflow session, 86% over the whole run). The two Airflow files run Airflow's commands
# and never import it into the test process, so the rule that keeps airflow_face/ last
# (below) does not concern them. Longest first.
WAITING_FILES = (
    "airflow_face/test_versions_e2e.py",
    "celery_scenarios/test_prefork_hangs.py",
    "airflow_face/test_e2e.py",
    "celery_pool/test_docs_example.py",
)


def _where(item: pytest.Item) -> str:
    return item.path.relative_to(TESTS).as_posix() if item.path.is_relative_to(TESTS) else ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """tests/airflow_face/ runs last: importing Airflow makes each later fork of this
    process copy a much bigger address space, and the core suite forks workers by the
    thousand (tests/contract/test_stress.py recycles one per task). Marks the smoke subset
    (the files in SMOKE_FILES beside the tests marked in place) and the tests that behave
    differently without the integrations (optional.marked). Under xdist, orders the files
    for its queue (WAITING_FILES above)."""
    for item in items:
        where = _where(item)
        in_smoke = where in SMOKE_FILES or where.partition("/")[0] in SMOKE_ROOMS
        params = item.callspec.params if hasattr(item, "callspec") else {}
        # Not the stdlib's rows (the peer's behaviour, not ours), and one start method:
        # fork, these Pythons' default on Linux (the whole suite runs every one).
        if in_smoke and "stdlib" not in item.name and params.get("start_method", "fork") == "fork":
            item.add_marker(pytest.mark.smoke)
        # What behaves differently without the integrations the test extra lacks (Airflow)
        # and the programs .ci/run installs: .ci/run runs these in a venv with only .[test].
        if optional.marked(item.nodeid):
            item.add_marker(pytest.mark.without_integrations)
    # One order in every process: pytest-xdist's workers must collect the same list, and
    # a parametrization built from a set (joblib's own suite has some) comes out in hash
    # order, which PYTHONHASHSEED changes per process. So each function's cases are sorted
    # by id; files and functions keep their order.
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.partition("[")[0], i)
    items.sort(
        key=lambda item: (
            str(item.fspath).startswith(_AIRFLOW_TESTS),
            first[item.nodeid.partition("[")[0]],
            item.nodeid,
        )
    )
    if hasattr(config, "workerinput"):  # an xdist worker: its collection is the queue
        _order_files_for_xdist(items)


def _order_files_for_xdist(items: list[pytest.Item]) -> None:
    """The files in the order xdist hands them out (addopts' --no-loadscope-reorder
    keeps this one): the busy files by their number of tests, most first (xdist's own
    order, which keeps the long files from being left for the end), each of
    WAITING_FILES before the busy file of its rank, and airflow_face/'s other files last.
    Within a file, the order above."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(_where(item) or str(item.path), []).append(item)
    waiting = [f for f in WAITING_FILES if f in files]
    last = [f for f in files if f.startswith("airflow_face/") and f not in waiting]
    busy = sorted(
        (f for f in files if f not in waiting and f not in last), key=lambda f: -len(files[f])
    )
    order: list[str] = []
    for i, name in enumerate(busy):
        if i < len(waiting):
            order.append(waiting[i])
        order.append(name)
    order += waiting[len(busy) :] + last
    items[:] = [item for name in order for item in files[name]]
