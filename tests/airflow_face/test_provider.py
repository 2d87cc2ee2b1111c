"""pipepool as an Airflow provider, and the executor's version gates, against the real
installed Airflow (whichever 3.x it is): the entry point Airflow discovers, the provider
dict checked with Airflow's own schema and by Airflow's own ProvidersManager, the
methods Airflow 3.4 deprecates left alone, and the ImportError that says why the
executor cannot load (Airflow 2.x, no compiled loop)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from . import airflow_env  # first: sets AIRFLOW_HOME before Airflow is imported

airflow_env.require_airflow()


def test_entry_point_gives_the_provider_info():
    found = [
        ep
        for ep in metadata.entry_points(group="apache_airflow_provider")
        if ep.dist is not None and ep.dist.name == "pipepool"
    ]
    assert len(found) == 1, found
    from pipepool.airflow.provider import get_provider_info

    assert found[0].load()() == get_provider_info()


def test_provider_info_passes_airflows_schema():
    import airflow
    import jsonschema
    from packaging.utils import canonicalize_name

    from pipepool.airflow.provider import OPTIONS, SECTION, get_provider_info

    info = get_provider_info()
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
    # ProvidersManager refuses a package-name that is not the canonical distribution name.
    assert info["package-name"] == canonicalize_name(metadata.distribution("pipepool").name)
    assert info["executors"] == ["pipepool.airflow.PipepoolExecutor"]
    options = info["config"][SECTION]["options"]
    assert set(options) == {
        "queue_ahead",
        "max_tasks_per_child",
        "max_rss_mib",
        "gc_freeze",
        "term_grace",
    }
    assert set(options) == set(OPTIONS)
    for name, option in options.items():
        assert option["description"], name
        assert option["default"] is None or isinstance(option["default"], str), name


def test_cli_functions_import_and_return_commands():
    """Airflow 3.2+ calls each ``cli`` path for its commands; an empty list of paths
    counts as none (every ``airflow`` command would warn), so there is one."""
    import importlib

    from pipepool.airflow.provider import get_provider_info

    paths = get_provider_info()["cli"]
    assert paths
    for path in paths:
        module, name = path.rsplit(".", 1)
        assert getattr(importlib.import_module(module), name)() == []


def test_providers_manager_lists_the_executor():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert "pipepool" in manager.providers
    assert "pipepool.airflow.PipepoolExecutor" in manager.executor_class_names


def test_methods_airflow_3_4_deprecates_are_not_overridden():
    """Airflow 3.4 turns these into deprecation shims that warn when overridden."""
    from airflow.executors.base_executor import BaseExecutor

    from pipepool.airflow.executor import DEPRECATED_IN_3_4, PipepoolExecutor

    assert {"trigger_tasks", "order_queued_tasks_by_priority"} <= set(DEPRECATED_IN_3_4)
    for name in DEPRECATED_IN_3_4:
        assert getattr(PipepoolExecutor, name) is getattr(BaseExecutor, name), name


def test_queue_workload_is_overridden():
    """Airflow 3.0's scheduler hands workloads only to an executor that overrides it."""
    from airflow.executors.base_executor import BaseExecutor

    from pipepool.airflow import PipepoolExecutor

    assert PipepoolExecutor.queue_workload is not BaseExecutor.queue_workload


def test_version_gates_match_the_installed_airflow():
    from airflow.executors import workloads
    from airflow.executors.base_executor import BaseExecutor

    from pipepool.airflow import _versions

    version = tuple(int(p) for p in metadata.version("apache-airflow-core").split(".")[:2])
    assert version == _versions.VERSION
    assert hasattr(workloads, "ExecuteCallback") == _versions.V3_2
    assert hasattr(workloads, "TestConnection") == _versions.V3_3
    assert hasattr(BaseExecutor, "run_workload") == _versions.V3_3


def test_airflow_2_is_refused_with_a_reason():
    from pipepool.airflow import _versions

    with pytest.raises(ImportError, match=r"apache-airflow 3\.0 or newer .*2\.10"):
        _versions.check((2, 10), compiled=True)
    _versions.check((3, 0), compiled=True)  # no error


def test_a_missing_compiled_loop_is_refused_with_a_reason():
    """Without pipepool.loop._loop (a pure build) the executor does not import, and says
    why: Airflow hides an executor that fails to import."""
    code = (
        "import sys\n"
        "sys.modules['pipepool.loop._loop'] = None  # as if never built\n"
        "try:\n"
        "    import pipepool.airflow.executor\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "needs pipepool's compiled loop" in out, out


def test_the_gc_freeze_is_shared_by_every_executor_in_the_process():
    """Two team executors fork in one scheduler: the first freeze holds until the last
    one is done (gc.freeze() is process-wide, a lone unfreeze would end both)."""
    from pipepool.airflow._rounds import _FREEZE

    assert gc.get_freeze_count() == 0
    _FREEZE.enter()  # team a forks
    _FREEZE.enter()  # team b forks meanwhile
    try:
        _FREEZE.exit()  # team a done
        assert gc.get_freeze_count() > 0  # b still forking: still frozen
    finally:
        _FREEZE.exit()
    assert gc.get_freeze_count() == 0
