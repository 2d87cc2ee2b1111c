"""The hook of the names a face loads on first use (``pipepool._lazy``), on a package
and a plain module made for the test: the name resolves from its module, only when
used, and is kept; ``dir()`` lists it before; any other name is an AttributeError that
names the module. The package's own faces use this hook (``test_the_faces_use_it``)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import pipepool
from pipepool import _lazy, errors, host, measure, run

FACE = """\
from pipepool import _lazy

_LAZY = {"Part": "_part", "helper": "_part"}
__getattr__, __dir__ = _lazy.exports(globals(), _LAZY)
"""
PLAIN = """\
from pipepool import _lazy

__getattr__, __dir__ = _lazy.exports(globals(), {"Part": "_part"})
"""
PART = """\
class Part:
    pass

def helper():
    return "helped"
"""


@pytest.fixture
def face(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package ``lazy_face`` whose names come from its ``_part``, and a module
    ``lazy_face.plain`` whose name does; forgotten again afterwards."""
    (tmp_path / "lazy_face").mkdir()
    (tmp_path / "lazy_face" / "__init__.py").write_text(FACE)
    (tmp_path / "lazy_face" / "plain.py").write_text(PLAIN)
    (tmp_path / "lazy_face" / "_part.py").write_text(PART)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "lazy_face"
    for name in [m for m in sys.modules if m.split(".")[0] == "lazy_face"]:
        del sys.modules[name]


def test_a_lazy_name_loads_on_first_use_and_is_kept(face: str) -> None:
    package = importlib.import_module(face)
    assert f"{face}._part" not in sys.modules  # not loaded by the import
    assert "Part" in dir(package) and "helper" in dir(package)  # listed before use
    part = package.Part
    assert part is sys.modules[f"{face}._part"].Part
    assert vars(package)["Part"] is part  # kept: the next read never reaches the hook
    assert "helper" not in vars(package)  # only what was used
    assert package.helper() == "helped"


def test_a_plain_module_loads_from_its_package(face: str) -> None:
    plain = importlib.import_module(f"{face}.plain")
    assert plain.Part is importlib.import_module(f"{face}._part").Part
    assert "Part" in vars(plain) and "Part" in dir(plain)


@pytest.mark.parametrize("module", ["lazy_face", "lazy_face.plain"])
def test_another_name_is_an_attribute_error_naming_the_module(face: str, module: str) -> None:
    loaded = importlib.import_module(module)
    with pytest.raises(AttributeError, match=rf"^module '{module}' has no attribute 'nope'$"):
        loaded.nope  # noqa: B018
    assert not hasattr(loaded, "_part_of_nothing")
    assert f"{face}._part" not in sys.modules  # a wrong name loads nothing


FACES = [pipepool, errors, host, measure, run]


@pytest.mark.parametrize("face_module", FACES, ids=lambda m: m.__name__)
def test_the_faces_use_it(face_module: ModuleType) -> None:
    """Every face with lazy names takes its hook from ``_lazy``: one copy, not one each
    (``pipepool.airflow``'s too, which needs Airflow only on first use)."""
    hook = vars(face_module)["__getattr__"]
    assert hook.__module__ == _lazy.__name__, face_module
    assert vars(face_module)["__dir__"].__module__ == _lazy.__name__
