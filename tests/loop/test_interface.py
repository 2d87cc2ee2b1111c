"""Both twins have the loop's declared interface (``pipepool.loop._interface``): every
member its Protocols declare, with the declared parameters (names, kinds, defaults), and
no public method beyond them.

mypy checks the pure twin and every call into the loop against the declarations; the
compiled twin has no source for it to read, so this is where it is held to them (the
twins against each other: tests/loop/test_differential.py).
"""

from __future__ import annotations

import inspect
import os

import pytest

from pipepool.frames import MAX_PAYLOAD
from pipepool.loop import _interface

pytestmark = pytest.mark.timeout(60)

OPERATORS = {"__contains__", "__len__"}  # reached through `in` and len(), not by name


def declared_methods(protocol: type) -> dict[str, inspect.Signature]:
    """The methods ``protocol``'s own body declares, by name."""
    return {
        name: inspect.signature(value)
        for name, value in vars(protocol).items()
        if inspect.isfunction(value) and value.__qualname__ == f"{protocol.__name__}.{name}"
    }


def parameters(signature: inspect.Signature) -> list[tuple[str, object, object]]:
    """``(name, kind, default)`` of each parameter after ``self``."""
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()][1:]


def public_methods(obj: object) -> set[str]:
    return {n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n))}


@pytest.fixture
def loop(loop_module):
    loop = loop_module.PipeLoop()
    yield loop
    loop.close()


@pytest.fixture
def reader(loop_module):
    r, w = os.pipe()
    yield loop_module.FrameReader(r)
    os.close(r)
    os.close(w)


def test_the_module_has_the_declared_classes(loop_module):
    declared = declared_methods(_interface.LoopModule)
    assert set(declared) == {"PipeLoop", "FrameReader", "chunk_results"}
    assert set(_interface.LoopModule.__annotations__) == {"Claims"}
    assert sorted(loop_module.__all__) == sorted([*declared, "Claims"])
    for name in ("PipeLoop", "FrameReader"):
        assert inspect.isclass(getattr(loop_module, name)), name
    assert callable(loop_module.chunk_results)
    # Compare-and-swap in the compiled twin only; the pure one says it has none.
    if loop_module.__name__.endswith("._pyloop"):
        assert loop_module.Claims is None
    else:
        assert inspect.isclass(loop_module.Claims)


def test_the_compiled_claims_have_the_declared_methods(loop_module):
    if loop_module.Claims is None:
        return  # the pure twin: checked above
    import mmap

    memory = mmap.mmap(-1, mmap.PAGESIZE)
    claims = loop_module.Claims(memory, 8, 4)
    try:
        declared = declared_methods(_interface.ClaimsAPI)
        assert public_methods(claims) == set(declared)
        assert claims.ring == 4
    finally:
        claims.release()
        memory.close()


def test_the_constructors_take_the_declared_arguments(loop_module):
    """By keyword, as declared; where the class's signature can be read (the pure twin),
    it is the declared one."""
    declared = declared_methods(_interface.LoopModule)
    assert parameters(declared["PipeLoop"]) == [
        ("max_payload", inspect.Parameter.POSITIONAL_OR_KEYWORD, MAX_PAYLOAD)
    ]
    loop = loop_module.PipeLoop(max_payload=1000)
    assert loop.max_payload == 1000
    loop.close()
    loop = loop_module.PipeLoop()
    assert loop.max_payload == MAX_PAYLOAD
    loop.close()
    r, w = os.pipe()
    try:
        reader = loop_module.FrameReader(fd=r, max_payload=1000)
        assert not reader.buffered()
    finally:
        os.close(r)
        os.close(w)
    for name, want in declared.items():
        try:
            got = inspect.signature(getattr(loop_module, name))
        except ValueError:  # a compiled class whose __init__ does not say: called above
            continue
        if list(got.parameters) == ["args", "kwargs"]:
            continue
        assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == parameters(want), (
            name
        )


@pytest.mark.parametrize(
    ("protocol", "instance"),
    [(_interface.PipeLoopAPI, "loop"), (_interface.FrameReaderAPI, "reader")],
    ids=["PipeLoop", "FrameReader"],
)
def test_every_declared_method_is_there_with_the_declared_parameters(
    protocol, instance, loop, reader
):
    obj = {"loop": loop, "reader": reader}[instance]
    declared = declared_methods(protocol)
    assert declared
    for name, want in declared.items():
        assert callable(getattr(obj, name, None)), f"{type(obj).__module__}: no {name}"
        if name in OPERATORS:
            continue
        got = inspect.signature(getattr(type(obj), name))
        assert parameters(got) == parameters(want), name
    # And nothing public beyond them: a method added to a twin is declared, or private.
    assert public_methods(obj) == {n for n in declared if n not in OPERATORS}


def test_the_declared_attributes_are_there(loop):
    assert set(_interface.PipeLoopAPI.__annotations__) == {"max_payload"}
    assert loop.max_payload == MAX_PAYLOAD
    loop.max_payload = 1 << 20  # declared settable
    assert loop.max_payload == 1 << 20


def test_the_operators_work(loop):
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    assert len(loop) == 0 and 7 not in loop
    loop.add(7, w1, r2)
    assert len(loop) == 1 and 7 in loop
    loop.remove(7)  # closes both ends
    os.close(r1)
    os.close(w2)
    assert len(loop) == 0 and 7 not in loop
