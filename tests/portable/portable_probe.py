"""What one process can see of the facilities the portable mode hides: called in a parent
and in its workers by tests/contract/test_portable.py, to show the hiding reaches every
interpreter. Lives beside sitecustomize.py, so wherever the mode is on, it imports."""

from __future__ import annotations


def facilities() -> dict[str, bool]:
    """Each hidden facility: True if this process can still use it."""
    import ctypes
    import fcntl
    import os

    try:
        ctypes.CDLL(None).prctl  # noqa: B018 (the lookup is the question)
        prctl = True
    except AttributeError:
        prctl = False
    return {
        "os.memfd_create": hasattr(os, "memfd_create"),
        "os.pidfd_open": hasattr(os, "pidfd_open"),
        "os.waitid": hasattr(os, "waitid"),
        "os.sched_getaffinity": hasattr(os, "sched_getaffinity"),
        "os.sched_setaffinity": hasattr(os, "sched_setaffinity"),
        "fcntl.F_SETPIPE_SZ": hasattr(fcntl, "F_SETPIPE_SZ"),
        "fcntl.F_GETPIPE_SZ": hasattr(fcntl, "F_GETPIPE_SZ"),
        "prctl": prctl,
        "/proc": os.path.exists("/proc/self/stat"),
        "/sys": os.path.isdir("/sys/kernel"),
    }
