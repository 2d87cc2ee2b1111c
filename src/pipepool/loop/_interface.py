"""The loop's interface, declared once for the type checker: what the executor and the
worker may call on either twin (``_pyloop``, and the compiled ``_loop`` built from
``pyx/_loop.pyx``), and nothing else (the twins' private state differs).

``load()`` returns a ``LoopModule``: mypy checks the pure twin against it; the compiled
one has no source to read, so tests/loop/test_loop_interface.py checks both built twins
against these declarations (every member present, the same parameters). Only type
checking and that test import this module: a worker never pays for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ..frames import MAX_PAYLOAD

Frame = tuple[int, int, int, bytes | bytearray]
"""What ``pump`` delivers: ``(channel, kind, ident, payload)``; a big payload is a
``bytearray`` read in place, a small one ``bytes``."""
Closed = tuple[int, BaseException | None]
"""What ``pump`` reports of a closed channel: ``(channel, None)`` at EOF, else the error."""


class PipeLoopAPI(Protocol):
    """A ``PipeLoop`` of either twin (the methods' contracts: ``_pyloop.PipeLoop``)."""

    max_payload: int

    def add(self, channel: int, write_fd: int, read_fd: int, exit_fd: int = -1) -> None: ...
    def remove(self, channel: int) -> list[tuple[int, int, bytes]]: ...
    def __contains__(self, channel: int, /) -> bool: ...
    def __len__(self) -> int: ...
    def pending(self, channel: int) -> int: ...
    def unsent_frames(self, channel: int) -> int: ...
    def send(
        self, channel: int, kind: int, ident: int, payload: bytes = b"", flush: bool = True
    ) -> None: ...
    def flush(self, channel: int) -> None: ...
    def wait(self, timeout: float | None) -> bool: ...
    def pump(self) -> tuple[list[Frame], list[Closed]]: ...
    def poll(self, timeout: float | None = 0.0) -> tuple[list[Frame], list[Closed]]: ...
    def wake(self) -> None: ...
    def close(self) -> None: ...


class FrameReaderAPI(Protocol):
    """A ``FrameReader`` of either twin: the worker's blocking reader of its activity pipe."""

    def buffered(self) -> bool: ...
    def read(self) -> tuple[int, int, bytes] | None: ...


class ClaimsAPI(Protocol):
    """The compiled twin's ``Claims``: one worker's ring of cancel claims in shared memory,
    decided by compare-and-swap (docs/design.md, "Cancel claims")."""

    ring: int

    def decide(self, seq: int) -> bool: ...
    def skip(self, seq: int) -> None: ...
    def claim(self, seq: int) -> bool | None: ...
    def read(self, seq: int) -> int: ...
    def release(self) -> None: ...


class LoopModule(Protocol):
    """A twin's module as ``load()`` returns it: its two classes, by their constructors,
    ``chunk_results`` (a chunked map's results handed out in C) and ``Claims``."""

    Claims: Callable[[Any, int, int], ClaimsAPI] | None
    """``Claims(buffer, offset, ring)`` in the compiled twin; None in the pure one, which
    has no compare-and-swap: its pools cancel a task sent to a worker by asking it."""

    def PipeLoop(self, max_payload: int = MAX_PAYLOAD) -> PipeLoopAPI: ...
    def FrameReader(self, fd: int, max_payload: int = MAX_PAYLOAD) -> FrameReaderAPI: ...
    def chunk_results(self, items: list[Any]) -> Iterator[Any]: ...
