"""``--timeout``'s grace reaches the real program under the default shell: SIGTERM goes
to the job's process group, and SIGKILL follows only if the group (not merely its leader,
the ``sh -c`` that dies of SIGTERM at once) is still there after the grace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import run_cli

# A real program whose SIGTERM handler takes 0.2 s to clean up, then writes "cleaned".
PROGRAM = """\
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def on_term(signum, frame):
    time.sleep(0.2)
    out.write_text("ready cleaned")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
out.write_text("ready")
time.sleep(60)
"""


def test_a_sigterm_handler_under_the_shell_gets_its_grace(tmp_path: Path) -> None:
    program = tmp_path / "cleanup.py"
    program.write_text(PROGRAM)
    out = tmp_path / "out"
    # The default shell: /bin/sh -c 'python3 cleanup.py OUT' (dash does not exec it, so
    # the shell is the group's leader and dies of SIGTERM before the program is done).
    proc = run_cli(
        "run", "--timeout", "3", "--json", f"{sys.executable} {program} {out}", ":::", "x"
    )
    # "ready" is written once the handler is in place: if the program had not got that far
    # in 3 s the test would say so here, not blame the grace.
    assert out.read_text().startswith("ready"), out.read_text()
    assert out.read_text() == "ready cleaned", "the program was SIGKILLed inside its handler"
    record = json.loads(proc.stdout.splitlines()[-1])["records"][0]
    assert record["timed_out"] and record["exitval"] == -1
    assert record["signal_name"] == "SIGTERM", record  # the group ended within the grace
    assert record["runtime"] < 3 + 0.5 + 2.0, record


def test_a_program_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    """The grace is bounded: a group still alive after it gets SIGKILL."""
    out = tmp_path / "out"
    code = (
        "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"pathlib.Path({str(out)!r}).write_text('ready'); time.sleep(60)"
    )
    proc = run_cli(
        "run", "--timeout", "2", "--json", "--no-shell", sys.executable, "-c", code, ":::", "x"
    )
    assert out.read_text() == "ready"
    record = json.loads(proc.stdout.splitlines()[-1])["records"][0]
    assert record["timed_out"] and record["signal_name"] == "SIGKILL", record
    assert record["runtime"] < 2 + 0.5 + 5.0, record
