"""``pipepool run`` drives ``run/_executor.JobExecutor``, which both ``LocalExecutor`` and
``ClusterExecutor`` must be: mypy checks it where the runner is handed either; this checks
the classes themselves (every declared member there, each method taking the declared
parameters, any more of its own optional), Dask or not."""

from __future__ import annotations

import inspect

import pytest

from pipepool.cluster import ClusterExecutor
from pipepool.executor import LocalExecutor
from pipepool.run._executor import JobExecutor

pytestmark = pytest.mark.timeout(30)


def declared(protocol: type) -> dict[str, object]:
    return {
        name: value
        for name, value in vars(protocol).items()
        if isinstance(value, property)
        or (inspect.isfunction(value) and value.__qualname__ == f"{protocol.__name__}.{name}")
    }


@pytest.mark.parametrize("cls", [LocalExecutor, ClusterExecutor])
def test_both_executors_are_the_one_the_runner_drives(cls):
    members = declared(JobExecutor)
    assert {"queue_call", "sync", "kill", "cancel", "running", "parallelism"} <= set(members)
    executor = cls(1) if cls is LocalExecutor else cls(None, n_workers=1)  # never started
    for name, want in members.items():
        assert hasattr(executor, name), f"{cls.__name__} has no {name}"
        if isinstance(want, property):  # an attribute or a property: read, as the runner does
            assert getattr(executor, name) is not None, name
            continue
        got = getattr(cls, name)
        assert callable(want) and callable(got)
        want_params = list(inspect.signature(want).parameters.values())
        got_params = list(inspect.signature(got).parameters.values())
        shared = [(p.name, p.kind, p.default) for p in got_params[: len(want_params)]]
        assert shared == [(p.name, p.kind, p.default) for p in want_params], name
        extra = got_params[len(want_params) :]
        assert all(p.default is not inspect.Parameter.empty for p in extra), name
