"""A raw pipe between two processes: the ceiling for any pool's big results.

One child runs each call and writes its result into a plain pipe (the platform's default
capacity) as an 8-byte length and the bytes themselves, in one ``writev``; the parent
reads each result straight into a buffer of that length. No pickling of bytes results,
no framing beyond the length, no bookkeeping, one writer: what the kernel and two
processes can move, against which a pool's 1 MiB results are judged.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import struct
from collections.abc import Callable
from typing import Any

_LENGTH = struct.Struct("<Q")
_PICKLED = 1 << 63  # the length's top bit: this result is a pickle (not bytes)


def _serve(commands: Any, data: Any) -> None:
    """The child: for each ``(fn, args)`` received, write every ``fn(arg)`` to ``data``."""
    fd = data.fileno()
    while (command := commands.recv()) is not None:
        fn, args = command
        for arg in args:
            result = fn(arg)
            if isinstance(result, bytes):
                header = _LENGTH.pack(len(result))
            else:  # warm-up calls return ints: pickled, flagged
                result = pickle.dumps(result)
                header = _LENGTH.pack(len(result) | _PICKLED)
            views = [memoryview(header), memoryview(result)]
            while views:  # a blocking writev takes all, unless a signal cuts it short
                written = os.writev(fd, views)
                while views and written >= len(views[0]):
                    written -= len(views.pop(0))
                if written:
                    views[0] = views[0][written:]


def _read_into(f: io.FileIO, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            raise EOFError("the raw pipe's writer died")
        got += n


class RawPipe:
    """The adapter methods the suite calls (see contenders.Adapter), over one child."""

    def __init__(self, parallelism: int, start_method: str | None) -> None:
        ctx = multiprocessing.get_context(start_method)
        commands, self._commands = ctx.Pipe(duplex=False)  # (receiving end, sending end)
        reader, writer = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_serve, args=(commands, writer), daemon=True)  # type: ignore[attr-defined]
        self._proc.start()
        commands.close()
        writer.close()
        self._reader = reader
        self._file = io.FileIO(reader.fileno(), "rb", closefd=False)

    def run(self, fn: Callable[[Any], Any], args: list[Any]) -> list[Any]:
        self._commands.send((fn, args))
        header = bytearray(_LENGTH.size)
        out: list[Any] = []
        for _ in args:
            _read_into(self._file, memoryview(header))
            (length,) = _LENGTH.unpack(header)
            buf = bytearray(length & ~_PICKLED)
            _read_into(self._file, memoryview(buf))
            out.append(pickle.loads(buf) if length & _PICKLED else buf)
        return out

    def call(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        return self.run(fn, [arg])[0]

    def pids(self) -> list[int]:
        return [self._proc.pid] if self._proc.pid else []

    def close(self) -> None:
        self._commands.send(None)
        self._proc.join()
        self._commands.close()
        self._reader.close()

    def abort(self) -> None:
        self._proc.kill()
        self._proc.join()
        self._commands.close()
        self._reader.close()
