"""``pipepool run``: a batch of commands in parallel on a LocalExecutor, GNU parallel style.

This room is the runner; what is measured of the jobs (pinned CPUs, noise, repeats and
comparisons, exports) is the measuring room's (``pipepool.measure``), which the runner
asks only through what ``_seam`` declares.

One module per job: ``_parser`` builds the command line (``_compat``: GNU parallel's
option syntax and the options refused) and ``_cli`` runs the command, ``_inputs`` reads
the input sources into rows, ``_template`` renders rows into jobs, ``_job`` runs one
command in a pool worker (its own session, timeout, resource use) with ``_reaper``
making sure no descendant is left behind, ``_runner`` drives the executor from the main
thread (``_executor`` declares it) feeding it with ``_gate`` deciding when a job may
start and in which slot, ``_ending`` finishes each attempt (retries, halt, Ctrl-C,
``--memfree``) over the state ``_state`` declares, ``_joblog`` writes and reads GNU
parallel's joblog, ``_output`` prints each job's output, ``_progress`` draws the live
bar, ``_summary`` reports the outcome and the exit status, ``_halt`` parses ``--halt``;
``_options`` holds the runner's record, ``_seam`` the measuring room's interface.

The face is what the entry point (the ``cli/`` room) calls, loaded on first use: a
worker that imports ``_job`` by name loads this package, and nothing more of it.
"""

from typing import TYPE_CHECKING

from .. import _lazy

if TYPE_CHECKING:  # what __getattr__ loads at run time, as the type checker sees it
    from ._cli import run_command
    from ._compat import join_negative_values
    from ._inputs import split_groups
    from ._parser import add_run_parser

_LAZY = {
    "add_run_parser": "_parser",
    "run_command": "_cli",
    "join_negative_values": "_compat",
    "split_groups": "_inputs",
}

if not TYPE_CHECKING:  # the type checker reads the names imported above, not this hook
    __getattr__, __dir__ = _lazy.exports(globals(), _LAZY)


__all__ = ["add_run_parser", "join_negative_values", "run_command", "split_groups"]
