"""Collects joblib's suite outcomes per backend and holds the known differences."""

from __future__ import annotations

import re

import pytest

SUITE_FILE = "test_parallel_suite.py"

# Tests of joblib's suite that fail with pipepool where their loky twin passes, with
# why (docs/joblib.md lists the same). Each is a strict xfail: it must keep failing
# (else it leaves this list), and a difference that is not listed fails the run.
# Patterns match test names; "*" is the only wildcard.
NESTED_IN_WORKER = (
    "a nested Parallel(backend='pipepool') inside a pipepool worker runs sequentially, "
    "with a warning, by design (docs/joblib.md, 'Nested calls'); loky's workers nest "
    "loky pools"
)
MULTIPROCESSING_NESTS = (
    "inside a pipepool worker joblib's multiprocessing backend starts its nested pool "
    "without a warning (the worker may have children); inside a loky worker joblib "
    "refuses to mix the two and warns"
)
BY_REFERENCE = (
    "the loky worker imports this test's function by reference from joblib's unpatched "
    "module, which never imports pipepool.joblib, so the name 'pipepool' is unknown "
    "there; a module that names the backend imports pipepool.joblib itself "
    "(test_backend.py::test_name_resolves_inside_a_loky_worker)"
)
SHARED_POOL_SURVIVES = (
    "joblib expects the loky executor to be shut down by the garbage-collected first "
    "generator, so the second call fails; pipepool's abort stops only the first call's "
    "tasks and the second call succeeds (the behaviour joblib expects of threading)"
)
KNOWN_DIFFERENCES: dict[str, str] = {
    "test_nested_parallel_warnings[pipepool-pipepool-False]": NESTED_IN_WORKER,
    "test_nested_parallel_warnings[pipepool-multiprocessing-True]": MULTIPROCESSING_NESTS,
    "test_nested_loop[loky-pipepool]": BY_REFERENCE,
    "test_nested_loop[back_compat_backend-pipepool]": BY_REFERENCE,
    "test_backend_nesting_level[*-pipepool-loky]": BY_REFERENCE,
    "test_multiple_generator_call_separated_gc[*-pipepool-True]": SHARED_POOL_SURVIVES,
}


def _matches(name: str, pattern: str) -> bool:
    return re.fullmatch(re.escape(pattern).replace(r"\*", ".*"), name) is not None


def pytest_configure(config: pytest.Config) -> None:
    # joblib marks its suite with pytest-run-parallel's marker; register it here so
    # --strict-markers accepts it without that plugin.
    config.addinivalue_line("markers", "thread_unsafe: joblib's marker (pytest-run-parallel)")
    config.addinivalue_line("markers", "no_cover: joblib's marker (pytest-cov)")


def _flavour(value: object) -> str | None:
    """Which backend a parameter value names: "loky", "pipepool" or None."""
    if isinstance(value, str):
        return value if value in ("loky", "pipepool") else None
    name = type(value).__name__
    return {"LokyBackend": "loky", "PipepoolBackend": "pipepool"}.get(name)


def _twin_key(item: pytest.Item) -> tuple[str | None, tuple]:
    """(backend, key): the key is the same for a pipepool test and its loky twin."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    kinds = {_flavour(v) for v in params.values()} - {None}
    flavour = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else None)
    key = tuple(sorted((k, (_flavour(v) and "BACKEND") or repr(v)) for k, v in params.items()))
    return flavour, (getattr(item, "originalname", item.name), key)


def _in_suite(item: pytest.Item) -> bool:
    return item.path.name == SUITE_FILE


# joblib's own xfail (loky PR 255), which hangs with the multiprocessing backend until
# the per-test timeout ends the whole run; it says nothing about either backend here.
DESELECTED = ("test_nested_exception_dispatch",)
# Repetitions along an axis that is not the backend, kept once to hold CI's joblib run
# to a few minutes (each loky twin restarts loky's executor: about 2 s a test):
# verbose=11/100 of test_simple_parallel (verbose=2 stays), n_jobs=4 of the
# initializer tests (n_jobs=2 stays).
REPEATS = {
    "test_simple_parallel": ("verbose", (11, 100)),
    "test_initializer_context": ("n_jobs", (4,)),
    "test_initializer_parallel": ("n_jobs", (4,)),
}


def _repeat(item: pytest.Item) -> bool:
    axis = REPEATS.get(getattr(item, "originalname", ""))
    params = getattr(getattr(item, "callspec", None), "params", {})
    return axis is not None and params.get(axis[0]) in axis[1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the suite's tests that run loky or pipepool (the comparison), drop the rest
    (threading, multiprocessing, sequential: joblib's own business, and CI minutes)."""
    kept, dropped = [], []
    for item in items:
        if not _in_suite(item):
            kept.append(item)
            continue
        flavour, _ = _twin_key(item)
        if flavour is None or getattr(item, "originalname", "") in DESELECTED or _repeat(item):
            dropped.append(item)
            continue
        kept.append(item)
        if flavour not in ("pipepool", "mixed"):
            continue
        for pattern, reason in KNOWN_DIFFERENCES.items():
            if _matches(item.name, pattern):
                item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _outcomes.get("current", {}).get(report.nodeid)
    if entry is None:
        return
    if report.failed:
        entry[2] = "failed" if report.when == "call" else "error"
    elif report.skipped and entry[2] == "passed":
        entry[2] = "xfailed" if hasattr(report, "wasxfail") else "skipped"


_outcomes: dict[str, dict] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if _in_suite(item):
        table = _outcomes.setdefault("current", {})
        flavour, key = _twin_key(item)
        table[item.nodeid] = [flavour, key, "passed"]
    yield


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    table = _outcomes.get("current")
    if not table:
        return
    counts: dict[str, dict[str, int]] = {}
    by_key: dict[tuple, dict[str, str]] = {}
    for flavour, key, outcome in table.values():
        if flavour is None:
            flavour = "other"
        counts.setdefault(flavour, {}).setdefault(outcome, 0)
        counts[flavour][outcome] += 1
        by_key.setdefault(key, {})[flavour] = outcome
    tr = terminalreporter
    tr.section("joblib test_parallel.py: loky vs pipepool")
    for flavour in ("loky", "pipepool", "mixed", "other"):
        if flavour in counts:
            parts = ", ".join(f"{n} {o}" for o, n in sorted(counts[flavour].items()))
            tr.write_line(f"{flavour:>9}: {parts}")
    worse = [
        f"{name}[{', '.join(f'{k}={v}' for k, v in params)}]: pipepool {o['pipepool']}"
        for (name, params), o in sorted(by_key.items())
        if o.get("loky") == "passed" and o.get("pipepool") not in (None, "passed")
    ]
    tr.write_line(f"pipepool tests whose loky twin passed but they did not: {len(worse)}")
    for line in worse:
        tr.write_line(f"  {line}")


@pytest.fixture(autouse=True)
def _stop_per_test_pools(request: pytest.FixtureRequest):
    """After each test, stop pipepool's shared pool (its workers start in milliseconds),
    so that the leak check holds every test to what it started; and loky's executor if
    the test gave it an initializer: the next test cannot reuse it, and it holds the
    initializer's arguments (joblib's test_initializer_* pass a multiprocessing
    Manager's proxies, which keep the Manager's server process alive)."""
    yield
    import sys

    backend = sys.modules.get("pipepool.joblib")
    if backend is not None:
        backend.shutdown_pool()
    loky = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(loky, "_executor", None)
    if executor is not None and getattr(executor, "_initializer", None) is not None:
        executor.shutdown(wait=True, kill_workers=True)
        loky._executor = None  # its initializer's arguments go with it
    if request.node.name.startswith("test_initializer"):
        _shut_managers_down()


def _shut_managers_down() -> None:
    """joblib's test_initializer_* start a multiprocessing Manager and never shut it
    down: its server process would outlive the test for as long as anything holds one
    of its proxies."""
    import gc
    from multiprocessing.managers import BaseManager, State

    for obj in gc.get_objects():
        if isinstance(obj, BaseManager) and obj._state.value == State.STARTED:
            obj.shutdown()
            obj._process.close()  # its fds too, not when the Manager is collected


@pytest.fixture(scope="module", autouse=True)
def _stop_loky_executor():
    """After each module, stop loky's reusable executor, which joblib keeps between
    calls (restarting it costs about a second a test; the leak check names it), so that
    no later module inherits its workers."""
    yield
    import sys

    loky = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(loky, "_executor", None)
    if executor is not None:
        executor.shutdown(wait=True, kill_workers=True)
