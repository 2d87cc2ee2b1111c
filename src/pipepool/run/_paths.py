"""The files and directories a run writes, checked before its first job starts.

A path the run could not write at the end (no such directory, a directory where a file
goes, a file where a directory goes, no permission) is refused up front, naming the
option that gave it: found only after the run, it would cost the whole run's results.
The check opens the file as the run will, without truncating it, and removes again a
file it made, so a run that cannot start leaves nothing behind.
"""

from __future__ import annotations

import errno
import os
import stat


class OutputPathError(Exception):
    """``option``'s ``path`` cannot be written (a message for the user)."""

    def __init__(self, option: str, path: str, exc: OSError) -> None:
        super().__init__(f"{option} {path}: cannot write there: {exc.strerror or exc}")
        self.option = option
        self.path = path


def check_file(option: str, path: str) -> None:
    """Raise OutputPathError unless ``option`` can write the file ``path``."""
    cloexec = getattr(os, "O_CLOEXEC", 0)
    try:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | cloexec, 0o644))
            except FileExistsError:  # made meanwhile: as good as found
                return
            os.unlink(path)
            return
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if stat.S_ISREG(mode):
            os.close(os.open(path, os.O_WRONLY | cloexec))  # no O_TRUNC: left as it is
        elif not os.access(path, os.W_OK):  # a FIFO, a device: opening one may block
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as exc:
        raise OutputPathError(option, path, exc) from None


def make_directory(option: str, path: str) -> None:
    """Make the directory ``path`` (and its parents) for ``option``; OutputPathError if
    it cannot be made or written in."""
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as exc:
        raise OutputPathError(option, path, exc) from None
