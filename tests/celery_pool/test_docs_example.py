"""docs/celery.md works as written: its command starts a worker on its example project
(``docs/examples/celery/``) with the environment variable set, the example task runs,
and ``celery inspect stats`` shows the pool; then the page's other two routes (the
``worker_pool`` setting, ``pool_cls=`` from Python). Redis is this module's own (Celery's
CELERY_BROKER_URL and CELERY_RESULT_BACKEND point the project at it)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ENV

from .celery_support import HERE, POOL, alive, client, require, wait_for

require()  # skip without Celery locally; with CI=true, fail

pytestmark = pytest.mark.timeout(240)

ROOT = HERE.parents[1]
PAGE = ROOT / "docs" / "celery.md"
PROJECT = ROOT / "docs" / "examples" / "celery"
START_LIMIT = 90.0


def page_command() -> str:
    """The page's command that starts a worker with ``-P custom``."""
    found = re.findall(
        r"^(CELERY_CUSTOM_WORKER_POOL=\S+ celery -A proj worker -P custom)$",
        PAGE.read_text(),
        re.MULTILINE,
    )
    assert len(set(found)) == 1, found
    return found[0]


class Started:
    """A command the page gives, started from the project's folder as a user would."""

    def __init__(self, command: list[str] | str, env: dict, log: Path) -> None:
        self.log_file = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                command,
                shell=isinstance(command, str),
                cwd=PROJECT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        # The page's command logs at Celery's default level (no "ready." line): a ping
        # answered says the worker is up.
        app = client(env["CELERY_BROKER_URL"], env["CELERY_RESULT_BACKEND"])
        if not wait_for(
            lambda: self.proc.poll() is not None or bool(app.control.ping(timeout=0.5)),
            START_LIMIT,
            0.1,
        ):
            self.kill()
            pytest.fail(f"no worker:\n{self.log()[-4000:]}")
        assert self.proc.poll() is None, self.log()[-4000:]
        self.children = descendants(self.proc.pid)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.kill()

    def gone(self) -> bool:
        """Nothing of the session it was started in is left (its pool's children, which
        lead groups of their own, end with it: their lifeline)."""

        def ended() -> bool:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return True
            return False

        return wait_for(ended, 30) and not any(alive(pid) for pid in self.children)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now (/proc's children files, walked down)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{parent}/task"):
                with contextlib.suppress(OSError), open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = {int(p) for p in f.read().split()} - found
                    found |= kids
                    todo += kids
    return found


@pytest.fixture
def project_env(redis_server):
    return {
        **ENV,
        "PYTHONPATH": os.pathsep.join([str(PROJECT), ENV.get("PYTHONPATH", "")]),
        "CELERY_BROKER_URL": redis_server.db(0),
        "CELERY_RESULT_BACKEND": redis_server.db(1),
        # The `celery` command of this Python's environment, as an activated one gives.
        "PATH": os.pathsep.join((os.path.dirname(sys.executable), os.environ["PATH"])),
    }


def run(command: list[str], env: dict) -> str:
    done = subprocess.run(
        command,
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def add(env: dict) -> str:
    """The page's way to run the example task (the project's docstring says it)."""
    return run(
        [sys.executable, "-c", "import proj; print(proj.add.delay(2, 3).get(timeout=30))"], env
    )


def test_the_page_command_starts_a_worker_on_the_pool(project_env, tmp_path):
    worker = Started(page_command(), project_env, tmp_path / "worker.log")
    try:
        assert add(project_env).strip() == "5"
        stats = run([sys.executable, "-m", "celery", "-A", "proj", "inspect", "stats"], project_env)
        assert f'"implementation": "{POOL}"' in stats, stats
        assert '"driven-by": "hub"' in stats
    finally:
        worker.stop()
    assert worker.gone()


@pytest.mark.parametrize("route", ["setting", "pool_cls"])
def test_the_pages_other_routes(project_env, tmp_path, route):
    if route == "setting":
        command = [sys.executable, "-m", "celery", "-A", "proj_setting", "worker"]
    else:
        command = [sys.executable, "run_worker.py"]
    worker = Started(command, project_env, tmp_path / "worker.log")
    try:
        assert add(project_env).strip() == "5"
        stats = run([sys.executable, "-m", "celery", "-A", "proj", "inspect", "stats"], project_env)
        assert f'"implementation": "{POOL}"' in stats, stats
    finally:
        worker.stop()
    assert worker.gone()
