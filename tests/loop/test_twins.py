"""The loop's twins side by side, beyond the transcripts of test_differential.py: the
same surface (names, signatures, docstrings), and what the executor relies on (a signal
interrupts a wait and loses nothing; the compiled pump runs no Python code)."""

from __future__ import annotations

import inspect
import os
import pydoc
import time

import pytest

from helpers import twins
from pipepool.frames import MAX_PAYLOAD, encode_header

pytestmark = pytest.mark.timeout(120)
CLASSES = ("FrameReader", "PipeLoop")  # the twins' classes; chunk_results is a function


# -- the surface ------------------------------------------------------------------------------


def test_same_public_names_and_signatures():
    pure, compiled = twins()
    assert (
        sorted(compiled.__all__)
        == sorted(pure.__all__)
        == [
            "Claims",  # the compiled twin's compare-and-swap; None in the pure one
            "FrameReader",
            "PipeLoop",
            "chunk_results",
        ]
    )
    assert pure.Claims is None and inspect.isclass(compiled.Claims)
    for name in CLASSES:
        spec, twin = getattr(pure, name), getattr(compiled, name)
        methods = [m for m, v in vars(spec).items() if not m.startswith("_") and callable(v)]
        for method in methods:
            want = inspect.signature(getattr(spec, method))
            got = inspect.signature(getattr(twin, method))
            assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == [
                (p.name, p.kind, p.default) for p in want.parameters.values()
            ], method
    for loop_module in (pure, compiled):
        loop = loop_module.PipeLoop()
        assert loop.max_payload == MAX_PAYLOAD
        loop.close()
        loop.close()  # idempotent


def test_compiled_twin_carries_the_specification_docstrings():
    """help() on the compiled classes says what the pure loop says (docstrings are kept
    once, in the pure loop, and shared at import)."""
    pure, compiled = twins()
    assert compiled.chunk_results.__doc__ == pure.chunk_results.__doc__
    for name in CLASSES:
        spec, twin = getattr(pure, name), getattr(compiled, name)
        assert twin.__doc__ and twin.__doc__.splitlines()[0] == spec.__doc__.splitlines()[0]
        documented = [
            m for m, v in vars(spec).items() if not m.startswith("_") and callable(v) and v.__doc__
        ]
        assert documented, name
        for method in documented:
            assert getattr(twin, method).__doc__ == getattr(spec, method).__doc__, method
        page = pydoc.render_doc(twin)
        assert all(getattr(spec, m).__doc__.splitlines()[0] in page for m in documented)


# -- what the executor relies on -----------------------------------------------------------


def test_a_signal_interrupts_wait_promptly_and_changes_nothing(loop_module):
    """Ctrl-C during a long wait raises at once (EINTR, then the handler runs), and the
    loop is as it was: a KeyboardInterrupt between rounds loses no frame."""
    import signal
    import threading

    loop = loop_module.PipeLoop()
    r, w = os.pipe()
    act_r, act_w = os.pipe()
    try:
        loop.add(1, act_w, r)
        main = threading.get_ident()
        timer = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT))
        started = time.monotonic()
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                loop.wait(30)
        finally:
            timer.join()
        assert time.monotonic() - started < 10
        os.write(w, encode_header(3, 9, 2) + b"ok")
        assert loop.poll(5) == ([(1, 3, 9, b"ok")], [])
    finally:
        loop.close()
        for fd in (w, act_r):
            os.close(fd)


def test_compiled_pump_runs_no_python_code():
    """Finalizers are Python code (and so a signal handler or a thread switch); the
    compiled pump must not run them even when its allocations would start a collection."""
    import gc

    _, compiled = twins()
    hits = [0]

    class Garbage:
        def __del__(self):
            hits[0] += 1

    loop = compiled.PipeLoop()
    r, w = os.pipe()
    act_r, act_w = os.pipe()
    threshold = gc.get_threshold()
    try:
        loop.add(1, act_w, r)
        os.write(w, b"".join(encode_header(3, i, 1) + b"x" for i in range(200)))
        gc.collect()
        gc.set_threshold(1)  # every tracked allocation would collect
        for _ in range(20):
            a, b = Garbage(), Garbage()
            a.other, b.other = b, a
        del a, b
        before = hits[0]  # the last pairs are garbage now, waiting for a collection
        frames, closed = loop.pump()
        during = hits[0] - before
        gc.collect()
        assert len(frames) == 200 and closed == []
        assert during == 0 and hits[0] == 40
    finally:
        gc.set_threshold(*threshold)
        loop.close()
        for fd in (w, act_r):
            os.close(fd)
