"""PipepoolExecutor against the real Airflow, in the style of Airflow's own
``tests/unit/executors/test_local_executor.py``: the supervisor entry points are mocked
(``fakes``), everything else (BaseExecutor, workloads, config, pipepool's workers and
pipes) is real. Each behaviour the executor promises has a test here."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from unittest import mock

import pytest

from . import airflow_env  # first: sets AIRFLOW_HOME before Airflow is imported

airflow_env.require_airflow()

import proc_table  # noqa: E402
from helpers import remove_cgroup  # noqa: E402
from leakcheck import multiprocessing_helpers  # noqa: E402

from . import fakes  # noqa: E402

# Airflow is imported by the tests, not at collection: the rest of the suite forks many
# thousands of workers, each fork slower with Airflow loaded (conftest.py runs these
# tests last). Airflow's states are str enums: "success" == "success".
if TYPE_CHECKING:
    from pipepool.airflow import PipepoolExecutor

pytestmark = pytest.mark.skipif(
    os.name != "posix" or not hasattr(os, "fork"), reason="the fakes are patched in before fork"
)
BOUND = 60.0  # s any wait in these tests may take before it fails


def task(name: str) -> Any:
    from airflow.executors import workloads
    from uuid6 import uuid7

    ti = workloads.TaskInstance(
        id=uuid7(),
        dag_version_id=uuid7(),
        task_id=name,
        dag_id="mydag",
        run_id="run1",
        try_number=1,
        state="queued",
        pool_slots=1,
        queue="default",
        priority_weight=1,
        map_index=-1,
        start_date=datetime.now(UTC),
    )
    return workloads.ExecuteTask(
        token="",
        ti=ti,
        dag_rel_path="some/path",
        log_path=None,
        bundle_info=dict(name="hi", version="hi"),
    )


def callback(name: str) -> Any:
    from airflow.executors import workloads
    from airflow.executors.workloads.callback import CallbackDTO
    from uuid6 import uuid7

    return workloads.ExecuteCallback(
        token="",
        callback=CallbackDTO(id=str(uuid7()), fetch_method="import_path", data={"path": name}),
        dag_rel_path="some/path",
        log_path=None,
        bundle_info=dict(name="hi", version="hi"),
    )


def connection_test(name: str) -> Any:
    from airflow.executors import workloads

    return workloads.TestConnection(
        token="", connection_test_id=uuid.uuid4(), connection_id=name, timeout=10
    )


def entry_points() -> dict[str, Any]:
    """The supervisor entry points this Airflow's runner calls, each with its fake: from
    3.3 one per workload kind (``BaseExecutor.run_workload``); before, the task SDK's
    ``supervise`` and (3.2) the in-process callback runner."""
    from pipepool.airflow._versions import V3_2, V3_3

    if V3_3:
        return {
            "airflow.sdk.execution_time.supervisor.supervise_task": fakes.supervise_task,
            "airflow.sdk.execution_time.callback_supervisor.supervise_callback": (
                fakes.supervise_callback
            ),
            "airflow.sdk.execution_time.connection_test_supervisor.supervise_connection_test": (
                fakes.supervise_connection_test
            ),
        }
    found = {"airflow.sdk.execution_time.supervisor.supervise": fakes.supervise_task}
    if V3_2:
        found["airflow.executors.workloads.callback.execute_callback_workload"] = (
            fakes.execute_callback_workload
        )
    return found


def workload_kinds() -> list[str]:
    from pipepool.airflow._versions import V3_2, V3_3

    return ["task"] + ["callback"] * V3_2 + ["connection_test"] * V3_3


@pytest.fixture
def fake_log(tmp_path, monkeypatch):
    """The fakes' record file and gate; the supervisor entry points patched to them."""
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PIPEPOOL_FAKE_LOG", str(log))
    monkeypatch.setenv("PIPEPOOL_FAKE_GATE", str(tmp_path / "gate"))
    with contextlib.ExitStack() as stack:
        for target, fake in entry_points().items():
            stack.enter_context(mock.patch(target, fake))
        yield log


@pytest.fixture
def make(fake_log):
    """Started executors; each is terminated after the test, and no child outlives it."""
    from pipepool.airflow import PipepoolExecutor

    made: list[PipepoolExecutor] = []
    before = proc_table.children(os.getpid())  # what earlier tests left is not ours

    def factory(parallelism: int) -> PipepoolExecutor:
        ex = PipepoolExecutor(parallelism=parallelism)
        ex.start()
        made.append(ex)
        return ex

    yield factory
    for ex in made:
        ex.terminate()
    deadline = time.monotonic() + 10

    def leftover() -> list[int]:
        # The resource tracker a fork pool starts (when this test is the process's first
        # to start one) lives as long as the process: not the executor's.
        new = proc_table.children(os.getpid()) - before - multiprocessing_helpers().pids
        return [p for p in new if proc_table.alive(p)]

    while leftover() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not leftover(), f"processes outlived the executor: {leftover()}"


def submit(ex: PipepoolExecutor, *items) -> None:
    session = mock.MagicMock()
    for workload in items:
        ex.queue_workload(workload, session=session)


def drive(ex: PipepoolExecutor, until, what: str) -> None:
    """Heartbeat like the scheduler until ``until()`` holds; fail after BOUND seconds."""
    deadline = time.monotonic() + BOUND
    while not until():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        ex.heartbeat()
        time.sleep(0.01)


def records(log, event: str | None = None) -> list[dict]:
    return [r for r in fakes.read_log(log) if event is None or r["event"] == event]


def key(workload: Any) -> Any:
    """The key the executor reports a workload under (as this Airflow keys it)."""
    from pipepool.airflow._workloads import _key

    return _key(workload)


def test_class_attributes():
    from pipepool.airflow import PipepoolExecutor
    from pipepool.airflow._versions import V3_2, V3_3

    assert PipepoolExecutor.is_local
    assert PipepoolExecutor.serve_logs  # the scheduler serves task logs, as for LocalExecutor
    assert PipepoolExecutor.supports_multi_team
    assert PipepoolExecutor.supports_callbacks == V3_2  # the workload kinds this Airflow has
    assert PipepoolExecutor.supports_connection_test == V3_3
    assert not getattr(PipepoolExecutor, "sentry_integration", "")
    assert not getattr(PipepoolExecutor, "supports_sentry", False)


@mock.patch.object(gc, "unfreeze")
@mock.patch.object(gc, "freeze")
def test_start_forks_every_worker_under_one_gc_freeze(mock_freeze, mock_unfreeze, make):
    ex = make(5)
    mock_freeze.assert_called_once()
    mock_unfreeze.assert_called_once()
    assert len(ex.pool.worker_pids()) == 5


def test_gc_freeze_can_be_turned_off(make, monkeypatch):
    monkeypatch.setenv("AIRFLOW__PIPEPOOL__GC_FREEZE", "False")
    with mock.patch.object(gc, "freeze") as mock_freeze:
        make(2)
    mock_freeze.assert_not_called()


def test_execution(make, fake_log):
    ex = make(2)
    ok = [task(f"ok_{i}") for i in range(5)]
    bad = task("fail_1")
    submit(ex, *ok, bad)
    ex._process_workloads(list(ex.queued_tasks.values()))  # as Airflow's own test does
    ex.end()
    assert len(ex.running) == 0
    for w in ok:
        assert ex.event_buffer[w.ti.key][0] == "success"
    state, info = ex.event_buffer[bad.ti.key]
    assert state == "failed"
    assert info == "RuntimeError: fake failure of fail_1"
    assert len({r["pid"] for r in records(fake_log, "start")}) <= 2


def test_every_workload_kind_through_its_supervisor(make, fake_log, monkeypatch):
    """Each kind this Airflow has (tasks; callbacks from 3.2; connection tests from 3.3)
    runs on a pipepool worker through that version's runner, with one outcome each."""
    from pipepool.airflow._workloads import _execution_api_server_url

    server = "http://custom-server:9999/execution/"
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", server)
    ex = make(2)
    makers = {"task": task, "callback": callback, "connection_test": connection_test}
    items = [makers[kind](f"ok_{kind}") for kind in workload_kinds()]
    submit(ex, *items)
    drive(ex, lambda: len(ex.event_buffer) == len(items) and not ex.running, "the outcomes")
    assert [ex.event_buffer[key(w)][0] for w in items] == ["success"] * len(items)
    starts = records(fake_log, "start")
    assert sorted(r["name"] for r in starts) == sorted(f"ok_{k}" for k in workload_kinds())
    # Task and connection-test runners get the api-server's URL (3.2 runs callbacks in
    # the worker itself, without one).
    assert {r["server"] for r in starts if r["name"] != "ok_callback"} == {server}
    assert _execution_api_server_url(ex.conf) == server


def test_callback_reports_running_first(make, fake_log):
    from pipepool.airflow._versions import V3_2

    if not V3_2:
        pytest.skip("Airflow < 3.2 has no callback workloads")
    ex = make(1)
    cb = callback("block_callback")
    submit(ex, cb)
    drive(ex, lambda: ex.event_buffer.get(key(cb), (None,))[0] == "running", "RUNNING")
    assert key(cb) in ex.running  # RUNNING keeps its slot
    open(os.environ["PIPEPOOL_FAKE_GATE"], "w").close()
    drive(ex, lambda: ex.event_buffer[key(cb)][0] == "success", "SUCCESS")
    assert key(cb) not in ex.running


@pytest.mark.parametrize(
    ("option", "value", "error", "words"),
    [
        (None, None, ValueError, "[core] parallelism must be an integer >= 1, got 0"),
        ("QUEUE_AHEAD", "-1", ValueError, "[pipepool] queue_ahead must be an integer >= 0"),
        ("MAX_TASKS_PER_CHILD", "-2", ValueError, "[pipepool] max_tasks_per_child must be"),
        ("MAX_RSS_MIB", "-1", ValueError, "[pipepool] max_rss_mib must be an integer >= 0"),
        ("TERM_GRACE", "inf", ValueError, "[pipepool] term_grace must be a finite number"),
        ("TERM_GRACE", "-1", ValueError, "[pipepool] term_grace must be a finite number"),
    ],
)
def test_a_bad_setting_is_refused_when_the_executor_is_made(
    monkeypatch, option, value, error, words
):
    """Checked by the pool's own rules (``pipepool._checks``) in the constructor, naming
    the setting: not at start(), nor in a worker. Parallelism 0 (Airflow's "unlimited")
    is refused: one worker a slot."""
    from pipepool.airflow import PipepoolExecutor

    if option is not None:
        monkeypatch.setenv(f"AIRFLOW__PIPEPOOL__{option}", value)
    with pytest.raises(error) as caught:
        PipepoolExecutor(parallelism=0 if option is None else 2)
    assert str(caught.value).startswith(words)


@pytest.mark.parametrize("queue_ahead", [0, 3])
def test_parallelism_is_exact(make, fake_log, monkeypatch, queue_ahead):
    """Airflow 56444/54830: every configured worker runs, never more; workloads beyond
    the slots wait (``queue_ahead`` of them in the scheduler's memory, the rest in
    Airflow's queue)."""
    monkeypatch.setenv("AIRFLOW__PIPEPOOL__QUEUE_AHEAD", str(queue_ahead))
    ex = make(3)
    items = [task(f"block_{i}") for i in range(7)]
    submit(ex, *items)
    ex.heartbeat()
    assert len(ex.running) == 3 + queue_ahead
    assert len(ex.queued_tasks) == 4 - queue_ahead
    # The scheduler queues at most [core] parallelism - slots_occupied more: the
    # workloads waiting ahead do not count, or none would ever be handed over ahead.
    assert ex.slots_occupied == 7 - queue_ahead
    drive(ex, lambda: len(records(fake_log, "start")) == 3, "three workloads to start")
    stats = ex.pool.stats()
    assert stats["tasks_running"] == 3 and stats["tasks_queued"] == queue_ahead
    open(os.environ["PIPEPOOL_FAKE_GATE"], "w").close()
    drive(ex, lambda: len(ex.event_buffer) == 7, "all seven outcomes")
    assert all(state == "success" for state, _ in ex.event_buffer.values())
    starts = {r["name"]: r for r in records(fake_log, "start")}
    ends = {r["name"]: r for r in records(fake_log, "end")}
    overlap = max(
        sum(1 for n in starts if starts[n]["at"] <= starts[m]["at"] < ends[n]["at"]) for m in starts
    )
    assert overlap == 3
    assert len({r["pid"] for r in starts.values()}) == 3  # all three workers served


def test_dead_worker_frees_its_slot_and_fails_only_its_workload(make, fake_log):
    """Airflow 43448: a worker that dies frees its slot; only its workload fails."""
    ex = make(2)
    victim = task("die_1")
    others = [task(f"ok_{i}") for i in range(4)]
    submit(ex, victim, *others)
    drive(ex, lambda: len(ex.event_buffer) == 5, "five outcomes")
    state, info = ex.event_buffer[victim.ti.key]
    assert state == "failed"
    assert "killed by SIGKILL while running task" in info
    assert all(ex.event_buffer[w.ti.key][0] == "success" for w in others)
    assert not ex.running and ex.slots_available == 2 + ex.queue_ahead
    assert ex.pool.stats()["worker_crashes"] == 1
    submit(ex, task("ok_after"))
    drive(ex, lambda: len(ex.event_buffer) == 6, "a workload after the death")


def test_oom_killed_worker_says_so(make, fake_log):
    """Airflow 55602: the real OOM killer (a 96 MiB memory cgroup) kills one worker."""
    if not fakes.oom_cgroup_writable():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true: this test needs root and a writable cgroup v1 memory controller")
        pytest.skip("needs root and a writable cgroup v1 memory controller")
    ex = make(2)
    victim, other = task("oom_1"), task("ok_2")
    submit(ex, victim, other)
    try:
        drive(ex, lambda: len(ex.event_buffer) == 2, "two outcomes")
    finally:
        for r in records(fake_log, "start"):
            group = os.path.join(fakes.OOM_CGROUP_ROOT, f"pipepool-oom-{r['pid']}")
            remove_cgroup(group)
    state, info = ex.event_buffer[victim.ti.key]
    assert state == "failed"
    assert "killed by the kernel's OOM killer" in info, info
    assert ex.event_buffer[other.ti.key][0] == "success"


def test_end_waits_for_running_workloads(make, fake_log):
    ex = make(2)
    items = [task("block_1"), task("block_2")]
    submit(ex, *items)
    drive(ex, lambda: len(records(fake_log, "start")) == 2, "two starts")

    def release():
        # end() is waiting once it logged; open the gate from another thread then.
        while not waiting.is_set():
            time.sleep(0.01)
        open(os.environ["PIPEPOOL_FAKE_GATE"], "w").close()

    waiting = threading.Event()
    opener = threading.Thread(target=release)
    opener.start()
    with mock.patch.object(ex.log, "info", side_effect=lambda *a, **k: waiting.set()):
        ex.end()
    opener.join(BOUND)
    assert [ex.event_buffer[w.ti.key][0] for w in items] == ["success"] * 2
    assert len(records(fake_log, "end")) == 2
    assert ex.pool is None


def _tree_pids(log) -> list[int]:
    return [pid for r in records(log, "tree") for pid in (r["runner"], r["sleeper"])]


def test_second_signal_during_end_kills_running_workloads(make, fake_log):
    ex = make(2)
    submit(ex, task("tree_1"), task("tree_2"))
    drive(ex, lambda: len(records(fake_log, "tree")) == 2, "two task trees")
    pids = _tree_pids(fake_log) + ex.pool.worker_pids()
    has_work = ex.pool.has_work
    calls = []

    def second_signal():  # the scheduler's handler raises on a second SIGINT in end()
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        calls.append(1)
        return has_work()

    with (
        mock.patch.object(ex.pool, "has_work", side_effect=second_signal),
        pytest.raises(KeyboardInterrupt),
    ):
        ex.end()
    assert ex.pool is None
    assert not [p for p in pids if proc_table.alive(p)]


def test_terminate_kills_each_workloads_process_group(make, fake_log):
    """Airflow 47011: the task runner's group (and the sleep it started) dies too."""
    ex = make(2)
    submit(ex, task("tree_1"), task("tree_2"))
    drive(ex, lambda: len(records(fake_log, "tree")) == 2, "two task trees")
    pids = _tree_pids(fake_log) + ex.pool.worker_pids()
    ex.terminate()
    deadline = time.monotonic() + BOUND
    while [p for p in pids if proc_table.alive(p)]:
        assert time.monotonic() < deadline, "processes survived terminate()"
        time.sleep(0.05)
    assert len(ex.event_buffer) == 2


def test_dead_worker_takes_its_task_group_along(make, fake_log):
    """A worker SIGKILLed mid-task (the OOM killer) leaves no orphan behind."""
    ex = make(1)
    t = task("tree_1")
    submit(ex, t)
    drive(ex, lambda: len(records(fake_log, "tree")) == 1, "the task tree")
    tree = records(fake_log, "tree")[0]
    drive(ex, lambda: tree["pgid"] in ex._groups.get(tree["worker"], ()), "the group scan")
    os.kill(tree["worker"], signal.SIGKILL)
    drive(ex, lambda: t.ti.key in ex.event_buffer, "the lost workload")
    assert ex.event_buffer[t.ti.key][0] == "failed"
    deadline = time.monotonic() + BOUND
    while proc_table.alive(tree["runner"]) or proc_table.alive(tree["sleeper"]):
        assert time.monotonic() < deadline, "the task's processes outlived their worker"
        time.sleep(0.05)


def test_workers_recycle_after_max_tasks_per_child(make, fake_log, monkeypatch):
    monkeypatch.setenv("AIRFLOW__PIPEPOOL__MAX_TASKS_PER_CHILD", "2")
    ex = make(1)
    submit(ex, *[task(f"ok_{i}") for i in range(5)])
    drive(ex, lambda: len(ex.event_buffer) == 5, "five outcomes")
    pids = [r["pid"] for r in records(fake_log, "start")]
    assert len(set(pids)) == 3 and pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
    assert ex.pool.stats()["worker_recycles"] >= 2


def test_workers_recycle_above_rss_limit(make, fake_log, monkeypatch):
    from pipepool.airflow._procs import rss_bytes

    limit_mib = rss_bytes() // (1024 * 1024) + 32  # a fresh worker is below, grow_ above
    monkeypatch.setenv("AIRFLOW__PIPEPOOL__MAX_RSS_MIB", str(limit_mib))
    ex = make(1)
    submit(ex, task("grow_1"), task("ok_2"), task("ok_3"))
    drive(ex, lambda: len(ex.event_buffer) == 3, "three outcomes")
    assert all(state == "success" for state, _ in ex.event_buffer.values())
    pids = [r["pid"] for r in records(fake_log, "start")]
    assert pids[0] != pids[1] == pids[2]  # recycled after growing, not after the others
    assert ex.pool.stats()["worker_recycles"] == 1


def test_revoke_task_drops_queued_and_running_workloads_without_events(make, fake_log, monkeypatch):
    monkeypatch.setenv("AIRFLOW__PIPEPOOL__QUEUE_AHEAD", "1")
    ex = make(1)
    running, waiting = task("block_1"), task("block_2")
    submit(ex, running, waiting)
    ex.heartbeat()
    drive(ex, lambda: len(records(fake_log, "start")) == 1, "the first start")
    worker = records(fake_log, "start")[0]["pid"]
    ex.revoke_task(ti=waiting.ti)  # still in the pool's queue: cancelled
    ex.revoke_task(ti=running.ti)  # started: its worker is killed
    assert not ex.running
    deadline = time.monotonic() + BOUND
    while proc_table.alive(worker):
        assert time.monotonic() < deadline, "the revoked workload's worker lives on"
        ex.heartbeat()
        time.sleep(0.01)
    submit(ex, task("ok_after"))
    drive(ex, lambda: len(ex.event_buffer) == 1, "the next workload's outcome")
    assert [k.task_id for k in ex.event_buffer] == ["ok_after"]  # none for the revoked
    assert [r["name"] for r in records(fake_log, "start")] == ["block_1", "ok_after"]


def test_a_workload_queued_again_while_its_key_runs_waits_for_that_run(make, fake_log):
    """The pool takes one task per key: a workload queued again while the first run of its
    key is held stays in queued_tasks (nothing raised into the scheduler's loop) and runs
    after the first one's outcome was read, never beside it."""
    ex = make(2)
    first = task("block_1")
    submit(ex, first)
    ex.heartbeat()
    drive(ex, lambda: len(records(fake_log, "start")) == 1, "the first start")
    submit(ex, first)  # the same key again, while it runs
    for _ in range(5):
        ex.heartbeat()
    assert list(ex.queued_tasks) == [first.ti.key] and ex.pool.running == {first.ti.key}
    assert len(records(fake_log, "start")) == 1
    open(os.environ["PIPEPOOL_FAKE_GATE"], "w").close()
    drive(ex, lambda: len(records(fake_log, "end")) == 2, "both runs to end")
    drive(ex, lambda: not ex.running and not ex.queued_tasks, "the second outcome")
    starts, ends = records(fake_log, "start"), records(fake_log, "end")
    assert ends[0]["at"] <= starts[1]["at"]  # one after the other, never both at once
    assert ex.event_buffer[first.ti.key][0] == "success"


def test_a_revoked_workload_queued_again_before_its_worker_died(make, fake_log):
    """revoke_task kills a running workload's worker; the scheduler may queue the key again
    before the pool has seen that worker die. The new run waits for it, then runs."""
    ex = make(1)
    victim = task("block_1")
    submit(ex, victim)
    ex.heartbeat()
    drive(ex, lambda: len(records(fake_log, "start")) == 1, "the first start")
    ex.revoke_task(ti=victim.ti)
    submit(ex, victim)
    ex.heartbeat()  # must not raise: the pool still holds the key
    open(os.environ["PIPEPOOL_FAKE_GATE"], "w").close()
    drive(ex, lambda: len(records(fake_log, "end")) == 1, "the second run to end")
    drive(ex, lambda: victim.ti.key in ex.event_buffer, "the second run's outcome")
    assert ex.event_buffer[victim.ti.key][0] == "success"
    assert len(records(fake_log, "start")) == 2


def test_two_team_executors_in_one_process(fake_log):
    """Multi-team: two executors in one scheduler, each with its team (``team_id`` on
    3.0, ``team_name`` from 3.1, passed through to BaseExecutor), its own pool, workers
    and outcomes; the process-wide GC freeze is released once both have forked."""
    from pipepool.airflow import PipepoolExecutor
    from pipepool.airflow._versions import V3_1

    keyword = "team_name" if V3_1 else "team_id"
    before = proc_table.children(os.getpid())
    teams = {name: PipepoolExecutor(parallelism=2, **{keyword: name}) for name in ("a", "b")}
    try:
        for ex in teams.values():
            ex.start()
        assert gc.get_freeze_count() == 0
        items = {name: [task(f"ok_{name}{i}") for i in range(3)] for name in teams}
        for name, ex in teams.items():
            assert ex.team == name and f"[{name}]" in ex._prefix
            submit(ex, *items[name])
        for name, ex in teams.items():
            drive(ex, lambda ex=ex: len(ex.event_buffer) == 3 and not ex.running, name)
            assert set(ex.event_buffer) == {key(w) for w in items[name]}  # its own only
        a, b = (set(ex.pool.worker_pids()) for ex in teams.values())
        assert len(a) == len(b) == 2 and not a & b
        by_worker = {r["pid"]: r["name"][3] for r in records(fake_log, "start")}
        assert {team for pid, team in by_worker.items() if pid in a} == {"a"}
        assert {team for pid, team in by_worker.items() if pid in b} == {"b"}
    finally:
        for ex in teams.values():
            ex.end()
    assert not [p for p in proc_table.children(os.getpid()) - before if proc_table.alive(p)]


def test_a_callback_event_key_is_one_the_scheduler_can_look_up(make, fake_log):
    """The scheduler looks each callback event's key up in its UUID-keyed ``callback``
    table: 3.2 passes the key as it is (on sqlite SQLAlchemy binds it with ``.hex``; a
    plain string killed the scheduler), 3.3 converts it to a UUID first. The same lookup
    on a real sqlite table."""
    from pipepool.airflow._versions import V3_2, V3_3

    if not V3_2:
        pytest.skip("Airflow < 3.2 has no callback workloads")
    import sqlalchemy as sa

    table = sa.Table("callback", sa.MetaData(), sa.Column("id", sa.Uuid(), primary_key=True))

    ex = make(1)
    cb = callback("ok_callback")
    submit(ex, cb)
    drive(ex, lambda: ex.event_buffer.get(key(cb), (None,))[0] == "success", "SUCCESS")
    (reported,) = ex.event_buffer
    engine = sa.create_engine("sqlite://")
    table.metadata.create_all(engine)
    looked_up = uuid.UUID(str(reported)) if V3_3 else reported  # as each scheduler does
    with engine.begin() as db:
        db.execute(table.insert().values(id=uuid.UUID(str(cb.callback.id))))
        assert db.execute(table.select().where(table.c.id == looked_up)).first()
    engine.dispose()
