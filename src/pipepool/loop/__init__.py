"""The parent's poll loop, and the one switch between its compiled and pure-Python twins.

This room is the loop (``PipeLoop``, ``FrameReader``): ``_pyloop.py`` is the readable
specification (with ``_pychannel.py``, a channel's buffers), ``_loop`` its compiled twin
(built from ``pyx/_loop.pyx``), and this module chooses between them; ``_interface.py``
declares what either twin offers the executor and the worker, for the type checker. It
knows file descriptors and bytes, nothing about tasks.

``PIPEPOOL_IMPL=python`` forces the pure-Python loop, ``PIPEPOOL_IMPL=cython`` makes a
missing extension an ImportError, unset means "compiled when importable". Workers read
the same variable (spawned children inherit the environment), so parent and workers agree.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the twins' declared interface, for other rooms' annotations
    from ._interface import ClaimsAPI as ClaimsAPI
    from ._interface import LoopModule
    from ._interface import PipeLoopAPI as PipeLoopAPI


def load(choice: str | None = None) -> tuple[str, LoopModule]:
    """Return ``(name, module)`` of the loop implementation ``choice`` (default: the env);
    either module has the declared interface (``_interface``)."""
    if choice is None:
        choice = os.environ.get("PIPEPOOL_IMPL", "").strip().lower() or "auto"
    if choice not in ("auto", "python", "cython"):
        raise ValueError(f"PIPEPOOL_IMPL must be 'python' or 'cython', not {choice!r}")
    if choice != "python":
        try:
            # By name: the compiled module has no source for a type checker to read; the
            # tests check it has the declared interface (tests/loop/test_interface.py).
            _loop = importlib.import_module(f"{__name__}._loop")
        except ImportError as exc:
            if choice == "cython":
                raise ImportError(
                    "PIPEPOOL_IMPL=cython but the compiled loop pipepool.loop._loop did not load "
                    f"({exc}); rebuild with 'pip install .' (without PIPEPOOL_PURE=1)"
                ) from exc
        else:
            return "cython", _loop
    from . import _pyloop

    return "python", _pyloop


_name, _module = load()
IMPLEMENTATION: str = _name
"""Which loop this process runs: "cython" (the compiled ``pipepool.loop._loop``) or
"python" (its pure-Python twin ``pipepool.loop._pyloop``); ``PIPEPOOL_IMPL`` chooses, see
above."""
PipeLoop = _module.PipeLoop
FrameReader = _module.FrameReader
