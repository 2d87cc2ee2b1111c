"""The tests' rooms are packages (pyproject.toml says why): a test module imports as
``tests.ROOM.NAME``, a function defined in one reaches a worker of every start method by
that name, and what tests/conftest.py marks by path names a file that is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipepool import LocalExecutor

from .. import conftest

TESTS = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(120)


def test_every_folder_of_tests_is_a_package() -> None:
    """A folder without ``__init__.py`` would put itself on ``sys.path`` (pytest's prepend
    mode) and import its files by their bare names again, which clash across rooms."""
    folders = sorted({path.parent for path in TESTS.rglob("test_*.py")})
    assert len(folders) > 10, folders  # the walk found the rooms
    missing = [
        f.relative_to(TESTS.parent).as_posix() for f in folders if not (f / "__init__.py").is_file()
    ]
    assert (TESTS / "__init__.py").is_file() and not missing, f"not packages: {missing}"


def test_the_smoke_files_are_there() -> None:
    """An entry naming no file would drop that file from the smoke subset unseen."""
    gone = sorted(name for name in conftest.SMOKE_FILES if not (TESTS / name).is_file())
    assert not gone, f"tests/conftest.py SMOKE_FILES names files that are not there: {gone}"


def test_the_waiting_files_are_there() -> None:
    """An entry naming no file would leave that file to xdist's count order unseen."""
    gone = sorted(name for name in conftest.WAITING_FILES if not (TESTS / name).is_file())
    assert not gone, f"tests/conftest.py WAITING_FILES names files that are not there: {gone}"


def where_and_square(x: int) -> tuple[str, int]:
    """A task defined in a test module: the module's name where it ran, and ``x * x``."""
    return __name__, x * x


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_a_task_defined_in_a_test_module_runs_on_every_start_method(start_method: str) -> None:
    """A spawn or forkserver worker unpickles the task by importing its module by name:
    the package name the parent imported it under must be importable there too."""
    assert __name__ == "tests.project.test_test_rooms"
    with LocalExecutor(1, start_method=start_method) as ex:
        ex.queue("task", where_and_square, 7)
        assert ex.wait_until_done(60)
        event = ex.get_event_buffer()["task"]
    assert event.state.value == "success", event.exception
    assert event.result == (__name__, 49)
