"""The unguarded main module: a pool started while a worker imports its parent's script.

Spawn and forkserver workers import the parent's main module (as ``__mp_main__``) before
they run anything. A script that starts a pool at its top level, without
``if __name__ == "__main__":``, starts one again in each worker, from inside that import.
multiprocessing refuses it there with a RuntimeError ("An attempt has been made to start
a new process before the current process has finished its bootstrapping phase"), which
each worker prints as a 40-line traceback before it dies, and the pool sees workers that
keep failing to start.

``refuse_while_bootstrapping`` is called where a pool starts (``LocalExecutor.start``).
In a pipepool worker (its process name says so) it exits at once with
``EXIT_UNGUARDED_MAIN`` and prints nothing: the parent knows that code, stops the pool
at the first such worker and says so in one line (``unguarded_main``). Any other process
being bootstrapped (a user's own spawn child) gets the RuntimeError, in the same words.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys

from .._startup_watch import WORKER_NAME as WORKER_NAME  # every worker's name starts so

EXIT_UNGUARDED_MAIN = 73  # a worker started a pool while it imported the main module


def unguarded_main(start_method: str | None = None, main: str = "__main__") -> str:
    """The one line that says what went wrong and the fix, naming the script (the module
    ``main`` names) and, in the parent, the pool's start method."""
    path = getattr(sys.modules.get(main), "__file__", None)
    script = f"the main module ({path})" if path else "the main module"
    if start_method:
        who = f"every {start_method} worker imports it"
    else:
        who = "spawn and forkserver children import it"
    return (
        f"workers cannot start: {script} starts a pool when it is imported, and {who}; "
        'start the pool under if __name__ == "__main__":'
    )


def refuse_while_bootstrapping() -> None:
    """Refuse to start a pool in a process that is still importing its parent's main
    module (multiprocessing's own test: ``_inheriting``, set only while it does)."""
    process = multiprocessing.current_process()
    if not getattr(process, "_inheriting", False):
        return
    if process.name.startswith(WORKER_NAME):
        for stream in (sys.stdout, sys.stderr):  # what the script printed so far
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(EXIT_UNGUARDED_MAIN)  # no traceback: the parent says it once, for all
    # While it runs, the script is __mp_main__ (multiprocessing's name for it in a child).
    raise RuntimeError(unguarded_main(main="__mp_main__"))
