"""The portable mode: this Linux made to look, to Python code, like a Unix without Linux's
extras (macOS above all), in every interpreter that starts while this directory is on
PYTHONPATH: the test run's own, and each spawn or forkserver worker (they start fresh and
run this file too; a forked worker inherits the parent's hiding).

What it hides, and how (nothing in pipepool knows about it):

* functions and constants only Linux has (``HIDDEN``): deleted from their modules at
  start-up, so ``hasattr``/``getattr`` checks take the other path and a direct use is an
  AttributeError, as it is on macOS. ``os.waitid`` and the ``P_*`` id types are on the
  list: CPython exposes them on macOS only from 3.13. ``os.process_cpu_count`` (3.13+)
  becomes ``os.cpu_count``, as os.py makes it where there is no affinity.
* ``prctl(2)``: ``ctypes`` refuses to look the symbol up (as dlsym fails on macOS), patched
  when ctypes is first imported.
* ``/proc`` and ``/sys``: every Python-level way to reach a path under them (open, os.open,
  os.stat and lstat, os.listdir, os.scandir, os.access, os.readlink; os.path and pathlib
  go through those) fails with FileNotFoundError. ``/dev/fd`` stays, as macOS has one.
* the default start method becomes spawn (macOS's), patched when multiprocessing.context is
  first imported; an explicit fork or forkserver still gets what it asks for.

Not covered: psutil, which keeps its /proc (it has its own way on every system: see
``_from_psutil``); C code reading /proc itself (an extension module, a program a test
runs, ``ps``); and what differs beyond which facility exists (pipe capacity and PIPE_BUF,
``ru_maxrss`` units, code branching on ``sys.platform``, kqueue).
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import io
import mmap
import os
import posixpath
import signal
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

PORTABLE = True  # what tests ask (sys.modules["sitecustomize"]): the mode is on here

HIDDEN: dict[ModuleType, tuple[str, ...]] = {
    os: (
        # fds for memory (pipepool's start-mark page and crash-report file)
        "memfd_create",
        *(name for name in dir(os) if name.startswith("MFD_")),
        # pidfds (pipepool run's wait for a job) and waitid (ditto; macOS from 3.13)
        "pidfd_open",
        "PIDFD_NONBLOCK",
        "waitid",
        "waitid_result",
        "P_PID",
        "P_PGID",
        "P_ALL",
        "P_PIDFD",
        # CPU affinity (pipepool run --pin, the default -j) and the rest of sched_* macOS
        # lacks
        "sched_getaffinity",
        "sched_setaffinity",
        "sched_getparam",
        "sched_setparam",
        "sched_getscheduler",
        "sched_setscheduler",
        "sched_rr_get_interval",
        "sched_param",
        # other Linux-only calls, so that a new use of one fails here first
        "pipe2",
        "posix_fallocate",
        "eventfd",
        "eventfd_read",
        "eventfd_write",
        "splice",
        "copy_file_range",
        "getxattr",
        "setxattr",
        "listxattr",
        "removexattr",
    ),
    fcntl: ("F_SETPIPE_SZ", "F_GETPIPE_SZ", "F_ADD_SEALS", "F_GET_SEALS"),
    # giving a shared region's pages back (pipepool's payload rings keep them instead)
    mmap: ("MADV_REMOVE",),
    signal: ("pidfd_send_signal", "sigtimedwait", "sigwaitinfo"),
}
HIDDEN_SYMBOLS = frozenset({"prctl"})  # looked up through ctypes
HIDDEN_TREES = ("/proc", "/sys")
DEFAULT_START_METHOD = "spawn"


def _hide_names() -> None:
    for module, names in HIDDEN.items():
        for name in names:
            if hasattr(module, name):
                delattr(module, name)
    if hasattr(os, "process_cpu_count"):  # 3.13+: os.py's own choice without affinity
        os.process_cpu_count = os.cpu_count


def _hidden(path: Any) -> bool:
    """True if ``path`` names something under a hidden tree (an fd never does)."""
    if isinstance(path, int):
        return False
    try:
        text = os.fsdecode(os.fspath(path))
    except TypeError:
        return False
    if not text.startswith("/"):  # a relative path from "/" or "/proc" (not a dir_fd's)
        try:
            text = posixpath.join(os.getcwd(), text)
        except OSError:  # the working directory is gone: the call fails on its own
            return False
    text = posixpath.normpath(text)
    return any(text == tree or text.startswith(tree + "/") for tree in HIDDEN_TREES)


def _from_psutil() -> bool:
    """psutil reads /proc from Python on Linux, and has another way on every other system
    (sysctl on macOS): Dask and loky ask it, so it keeps its /proc, as it keeps working
    on macOS. The caller is psutil, or os.path called from psutil."""
    frame = sys._getframe(2)
    for _ in range(3):
        if frame is None:
            return False
        if frame.f_globals.get("__name__", "").partition(".")[0] == "psutil":
            return True
        frame = frame.f_back
    return False


def _refusing(call: Callable[..., Any]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        path = args[0] if args else kwargs.get("file", kwargs.get("path", "."))
        if _hidden(path) and not _from_psutil():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        return call(*args, **kwargs)

    refuse.__name__ = refuse.__qualname__ = call.__name__
    refuse.__doc__ = call.__doc__
    return refuse


def _hide_trees() -> None:
    opener = _refusing(builtins.open)
    builtins.open = io.open = opener
    for name in ("open", "stat", "lstat", "listdir", "scandir", "access", "readlink"):
        original = getattr(os, name)
        wrapper = _refusing(original)
        setattr(os, name, wrapper)
        # shutil and others test these sets for the function they call: keep it in them
        for support in (os.supports_dir_fd, os.supports_fd, os.supports_follow_symlinks):
            if original in support:
                support.add(wrapper)


def _without_symbols(ctypes: ModuleType) -> None:
    cdll = ctypes.CDLL
    lookup_attr, lookup_item = cdll.__getattr__, cdll.__getitem__

    def __getattr__(self: Any, name: str) -> Any:
        if name in HIDDEN_SYMBOLS:
            raise AttributeError(f"{self._name}: undefined symbol: {name}")
        return lookup_attr(self, name)

    def __getitem__(self: Any, name: Any) -> Any:
        if name in HIDDEN_SYMBOLS:
            raise AttributeError(f"{self._name}: undefined symbol: {name}")
        return lookup_item(self, name)

    cdll.__getattr__, cdll.__getitem__ = __getattr__, __getitem__


def _spawn_by_default(context: ModuleType) -> None:
    context._default_context._default_context = context._concrete_contexts[DEFAULT_START_METHOD]


class _PatchOnImport:
    """A meta path finder that patches a module right after its first import: importing
    ctypes and multiprocessing in every interpreter up front would cost each worker's
    start-up. (No importlib.abc base: importing it imports shutil, which would see the
    facilities before they are hidden.)"""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = self.patches.pop(name, None)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        else:
            return None
        execute = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            patch(module)

        spec.loader.exec_module = exec_module  # this module's own loader object
        return spec


def _install() -> None:
    _hide_names()
    _hide_trees()
    patches = {"ctypes": _without_symbols, "multiprocessing.context": _spawn_by_default}
    for name in list(patches):
        if name in sys.modules:  # imported before us (not by a plain interpreter)
            patches.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, _PatchOnImport(patches))


_install()
