"""Crash reports: where in its task a worker died of a fatal signal, told to the parent.

A worker enables ``faulthandler`` as it starts, so a segfault (or SIGFPE, SIGABRT, SIGBUS,
SIGILL) writes the Python stack of every thread before the process dies. It writes them
to a file the parent made for that worker and shares with it: an anonymous file
(``memfd_create`` on Linux, an unlinked temporary file elsewhere), not a pipe. So the
crashing worker can never block on a full pipe mid-report, and the parent, which reads
it only once the worker is reaped, reads a regular file: no wait for a peer, ever.

The parent then puts the crashing thread's innermost frames (the task's) into the
``WorkerLostError`` message, and logs the whole report on the ``pipepool`` logger at
ERROR level. Unconfigured, Python's logging prints that to stderr, which is where the
worker's own faulthandler output would have gone (the parent's and the workers' stderr
are the same unless something redirected one of them).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os

# The parent's side imports logging and tempfile when it needs them: a spawned worker
# imports this module too, and pays for every import at start-up.

MAX_REPORT = 1 << 16  # bytes read of a report: every thread's stack, 100 frames each at most
MAX_FRAMES = 10  # frames of the crashing thread quoted in the error message
# The task's frames end where the worker's loop begins: what lies below is the same for
# every task, and stays in the logged report.
_WORKER_FRAME = 'File "{}"'.format(os.path.join(os.path.dirname(__file__), "_serve.py"))


def open_report_file() -> int:
    """In the parent: a new anonymous file for one worker's crash report; returns its fd."""
    if hasattr(os, "memfd_create"):
        with contextlib.suppress(OSError):
            return os.memfd_create("pipepool-crash-report")
    import tempfile

    fd, path = tempfile.mkstemp(prefix="pipepool-crash-")
    os.unlink(path)  # nameless: gone with its last fd, whoever dies
    return fd


def enable(fd: int) -> None:
    """In a worker: report a fatal signal to ``fd`` (every thread's stack)."""
    faulthandler.enable(file=fd, all_threads=True)


def read_report(fd: int) -> str:
    """In the parent, after the worker died: what faulthandler wrote ("" if nothing)."""
    try:
        data = os.pread(fd, MAX_REPORT, 0)
    except OSError:
        return ""
    return data.decode("utf-8", "replace").strip()


def summary(report: str) -> str:
    """The lines of ``report`` worth an error message: the fatal error line and the
    crashing thread's innermost frames (faulthandler lists the most recent first)."""
    lines = report.splitlines()
    fatal = [line for line in lines[:2] if line.startswith("Fatal Python error")]
    start = next(
        (i for i, line in enumerate(lines) if line.startswith(("Current thread", "Stack"))),
        None,
    )
    if start is None:  # an unknown layout: its last lines, as they are
        return "\n".join(lines[-MAX_FRAMES:])
    frames = []
    for line in lines[start + 1 :]:
        if not line.startswith("  ") or _WORKER_FRAME in line:
            break  # the next thread or the extension modules; or pipepool's worker loop
        frames.append(line)
    quoted = [*fatal, lines[start], *frames[:MAX_FRAMES]]
    if len(frames) > MAX_FRAMES:
        quoted.append(f"  ... {len(frames) - MAX_FRAMES} outer frames (the whole report is logged)")
    return "\n".join(quoted)


def note_crash(pid: int | None, report: str) -> str:
    """Log ``report`` of worker ``pid`` whole; return the text its error message adds."""
    if not report:
        return ""
    import logging

    logging.getLogger("pipepool").error(
        "pipepool: worker pid %s died of a fatal signal; faulthandler:\n%s", pid, report
    )
    return "\nfaulthandler's report of the crash:\n" + summary(report)
