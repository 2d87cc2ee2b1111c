"""A throw-away Airflow installation for end-to-end runs: its own AIRFLOW_HOME with a
sqlite metadata database, the ``e2e_dag.py`` DAG, and Airflow's own processes (the
api-server, dag-processor and scheduler, or ``airflow dags test --use-executor``) on
127.0.0.1 only, each in a session of its own, every one bounded and killed at the end.

Used by tests/airflow_face/test_e2e.py (and once by a scheduler benchmark, since
retired: its figure is dated in docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import proc_table  # tests/ is on sys.path (pytest, or the benchmark)
from helpers import wait_for

HERE = Path(__file__).parent
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
DAG_ID = "pipepool_e2e"
PIPEPOOL = "pipepool.airflow.PipepoolExecutor"
LOCAL = "LocalExecutor"

# The state Airflow must give each task instance of e2e_dag.py.
EXPECTED = {"fail_": "failed", "after_fail": "upstream_failed", "sigkill": "failed"}
EXPECTED |= {"timeout": "failed", "ok_": "success", "last": "success"}


def expected_state(task_id: str) -> str:
    for prefix, state in EXPECTED.items():
        if task_id.startswith(prefix):
            return state
    raise KeyError(task_id)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Home:
    """An AIRFLOW_HOME under ``root`` configured for ``executor``."""

    def __init__(self, root: Path, executor: str, *, parallelism: int = 4, n_ok: int = 190):
        self.root = root
        self.port = free_port()
        root.mkdir(parents=True, exist_ok=True)
        (root / "dags").mkdir(exist_ok=True)
        shutil.copy(HERE / "e2e_dag.py", root / "dags" / "e2e_dag.py")
        url = f"http://127.0.0.1:{self.port}"
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PIPEPOOL_"))
        }
        self.env |= {
            "AIRFLOW_HOME": str(root),
            "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": executor,
            "AIRFLOW__CORE__PARALLELISM": str(parallelism),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(max(16, parallelism)),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": "pipepool-e2e-only",
            "AIRFLOW__API__SECRET_KEY": "pipepool-e2e-only",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "PIPEPOOL_E2E_OK": str(n_ok),
        }
        self.db = root / "airflow.db"

    def airflow(self, *args: str, timeout: float = 120, ok: tuple[int, ...] = (0,)) -> str:
        """Run an ``airflow`` command to completion; its output, or an error with it
        when its exit status is not in ``ok``."""
        proc = subprocess.run(
            [AIRFLOW, *args],
            env=self.env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )
        if proc.returncode not in ok:
            raise RuntimeError(
                f"airflow {' '.join(args)}: {proc.returncode}\n{proc.stderr[-3000:]}"
            )
        return proc.stdout

    def migrate(self, template: Path | None = None) -> None:
        """Create the metadata database, or copy ``template`` (one migrated before)."""
        if template is not None and template.exists():
            shutil.copy(template, self.db)
        else:
            self.airflow("db", "migrate", timeout=180)

    @contextlib.contextmanager
    def processes(self, *commands: tuple[str, ...]) -> Iterator[dict[str, subprocess.Popen]]:
        """Start ``airflow <command>`` for each, in sessions of their own; on exit SIGTERM
        each whole session, SIGKILL what is left after 10 s."""
        procs: dict[str, subprocess.Popen] = {}
        try:
            for command in commands:
                log = open(self.root / f"{command[0]}.log", "w")  # noqa: SIM115  (closed below)
                procs[command[0]] = subprocess.Popen(
                    [AIRFLOW, *command],
                    env=self.env,
                    cwd=self.root,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                log.close()
            yield procs
        finally:
            stop_sessions(procs.values())

    def wait_api(self, proc: subprocess.Popen, bound: float = 120) -> None:
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            assert proc.poll() is None, self.tail("api-server")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                return
            time.sleep(0.2)
        raise TimeoutError(f"the api-server did not listen in {bound} s\n{self.tail('api-server')}")

    def tail(self, name: str, n: int = 3000) -> str:
        path = self.root / f"{name}.log"
        return path.read_text()[-n:] if path.exists() else ""

    def query(self, sql: str, *args) -> list[tuple]:
        with contextlib.closing(sqlite3.connect(self.db, timeout=30)) as db:
            return db.execute(sql, args).fetchall()

    def task_states(self, run_id: str | None = None) -> dict[str, str | None]:
        if run_id is None:
            rows = self.query("select task_id, state from task_instance where dag_id = ?", DAG_ID)
        else:
            rows = self.query(
                "select task_id, state from task_instance where dag_id = ? and run_id = ?",
                DAG_ID,
                run_id,
            )
        return dict(rows)

    def run_state(self, run_id: str) -> str | None:
        rows = self.query("select state from dag_run where run_id = ?", run_id)
        return rows[0][0] if rows else None

    def dag_parsed(self) -> bool:
        with contextlib.suppress(sqlite3.Error):
            return bool(self.query("select 1 from serialized_dag where dag_id = ?", DAG_ID))
        return False


def stop_sessions(procs) -> None:
    procs = list(procs)
    for p in procs:
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.1, deadline - time.monotonic()))
        with contextlib.suppress(OSError):  # the session's leftovers too (task processes)
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)


def dags_test(home: Home, bound: float = 600) -> dict[str, str | None]:
    """``airflow dags test --use-executor`` against an api-server; the task states. It
    exits 1 when the run failed, as this DAG's must."""
    with home.processes(("api-server",)) as procs:
        home.wait_api(procs["api-server"])
        home.airflow("dags", "test", DAG_ID, "--use-executor", timeout=bound, ok=(0, 1))
    return home.task_states()


def state_table(states: dict[str, str | None]) -> str:
    """Markdown: per kind of task, how many, the state each must end in, what they got."""
    rows: dict[str, dict] = {}
    for task_id, state in sorted(states.items()):
        kind = next(p for p in EXPECTED if task_id.startswith(p))
        row = rows.setdefault(kind, {"n": 0, "got": {}})
        row["n"] += 1
        row["got"][state] = row["got"].get(state, 0) + 1
    lines = ["| tasks | count | must end | ended |", "| --- | ---: | --- | --- |"]
    for kind, row in rows.items():
        got = ", ".join(f"{s}: {n}" for s, n in sorted(row["got"].items(), key=str))
        lines.append(f"| {kind}* | {row['n']} | {EXPECTED[kind]} | {got} |")
    return "\n".join(lines)


def scheduler_run(home: Home, bound: float = 600) -> tuple[dict[str, str | None], float]:
    """Trigger one run of the DAG through a real scheduler; (task states, seconds from
    the first task's start to the last task's end, from the metadata database)."""
    with home.processes(
        ("api-server",), ("dag-processor",), ("scheduler", "--skip-serve-logs")
    ) as procs:
        home.wait_api(procs["api-server"])
        assert wait_for(home.dag_parsed, bound, 0.5), "the dag-processor never parsed the DAG"
        run_id = f"e2e_{int(time.time())}"
        home.airflow("dags", "trigger", DAG_ID, "--run-id", run_id)

        def finished() -> bool:
            for name, p in procs.items():
                assert p.poll() is None, f"{name} exited:\n{home.tail(name)}"
            return home.run_state(run_id) in ("success", "failed")

        assert wait_for(finished, bound, 1.0), "the DAG run did not finish"
    rows = home.query(
        "select min(julianday(start_date)), max(julianday(end_date)) from task_instance "
        "where dag_id = ? and run_id = ? and start_date is not null",
        DAG_ID,
        run_id,
    )
    first, last = rows[0]
    return home.task_states(run_id), (last - first) * 86400.0


def survivors(before: set[int], bound: float = 30) -> list[int]:
    """This process's children not in ``before`` still alive after up to ``bound`` s:
    none once a run's sessions were killed as a whole."""
    deadline = time.monotonic() + bound
    while True:
        left = [p for p in proc_table.children(os.getpid()) - before if proc_table.alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def no_survivors(before: set[int]) -> None:
    """Every process of a run is gone (its sessions were killed as a whole)."""
    left = survivors(before)
    assert not left, f"processes outlived the run: {left}"
