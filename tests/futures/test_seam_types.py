"""The futures face's seam is typed by its record type: mypy proves that what the face
hands over (``RecordExecutor.hand_over``) is what it takes back (``take_records``), and
refuses a record of another type, or an executor over another record type, at the seam
(``futures/_seam.py``; docs/design.md, "Two ways out"). A record typed ``Any`` there
would let every line marked below through.

mypy runs on a snippet whose lines marked ``# E: text`` must each draw an error that
contains ``text``, and no other line any error. It comes with the lint extra; without it
the test skips (with CI=true, where .ci/run installs it, it fails).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import optional

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = textwrap.dedent(
    """\
    from typing import assert_type

    from pipepool._task import Task
    from pipepool.executor import LocalExecutor, RecordExecutor
    from pipepool.futures._item import Record
    from pipepool.futures._map import MapItem
    from pipepool.futures._seam import Executor

    # What the face does: records in, the same type out, the seam satisfied.
    ex: RecordExecutor[Record] = RecordExecutor(1)
    seam: Executor = ex
    assert_type(ex.take_records(), tuple[list[Record], list[Record]])
    assert_type(ex.cancel_tasks([]), list[Record])
    # LocalExecutor needs no annotation: it is the core over plain tasks.
    local = LocalExecutor(1)
    local.queue("key", abs, -1)

    # What it must not do.
    plain_tasks = [Task(1, 1, abs, (-1,), {}, None)]
    ex.hand_over(plain_tasks)  # E: "list[Task]"; expected "Sequence[Record]"
    plain: RecordExecutor[Task] = RecordExecutor(1)
    other: Executor = plain  # E: "RecordExecutor[Task]", variable has type "Executor"
    settled, began = ex.take_records()
    item: MapItem = settled[0]  # E: type "Record", variable has type "MapItem"
    odd: RecordExecutor[int]  # E: "int" of "RecordExecutor" must be a subtype of "Task"
    """
)

ERROR = re.compile(r"^snippet\.py:(\d+): error: (.*)$", re.MULTILINE)


@pytest.mark.timeout(300)
def test_mypy_proves_the_records_round_trip_and_refuses_another_type(tmp_path):
    optional.require("mypy", load=False)
    (tmp_path / "snippet.py").write_text(SNIPPET)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--follow-imports",
            "silent",  # only the snippet's own errors
            "--hide-error-context",
            "--no-pretty",
            "snippet.py",
        ],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=280,
    )
    expected = {
        n: marker.split("# E: ", 1)[1]
        for n, marker in enumerate(SNIPPET.splitlines(), 1)
        if "# E: " in marker
    }
    got: dict[int, list[str]] = {}
    for line, message in ERROR.findall(proc.stdout):
        got.setdefault(int(line), []).append(message)
    assert len(expected) == 4  # the marked lines, all read
    unexpected = {n: m for n, m in got.items() if n not in expected}
    assert not unexpected, f"errors on lines that should pass:\n{proc.stdout}{proc.stderr}"
    for n, text in expected.items():
        assert any(text in m for m in got.get(n, [])), (
            f"line {n} should draw an error containing {text!r}:\n{proc.stdout}{proc.stderr}"
        )
