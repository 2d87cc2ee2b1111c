"""The examples the docs include (docs/examples/*.py, pulled into the pages by
pymdownx.snippets) run and check their own results: a changed API breaks this test, not
the reader."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
EXAMPLE_TIMEOUT = 60  # s; each takes about a second alone, more on a loaded 2-core box


def test_examples_exist_and_are_included() -> None:
    pages = "".join(p.read_text() for p in EXAMPLES.parent.rglob("*.md"))
    files = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert files, "no examples found"
    for name in files:
        assert f'--8<-- "{name}"' in pages, f"{name} is not included in any page"


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_example_runs(example: str) -> None:
    # Run as a script, as a reader would: its own process, its __main__ guard taken.
    # The examples assert their results; a non-zero exit is a broken example.
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / example)],
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT,
        cwd=EXAMPLES,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert proc.returncode == 0, f"{example} failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip(), f"{example} printed nothing"


def test_readme_python_runs(tmp_path: Path) -> None:
    # The README's own snippet is not a file: run each ```python block as a script.
    readme = (EXAMPLES.parent.parent / "README.md").read_text()
    blocks = readme.split("```python\n")[1:]
    assert blocks, "the README has no Python example"
    for i, block in enumerate(blocks):
        script = tmp_path / f"readme_{i}.py"
        script.write_text(block.split("```", 1)[0])
        proc = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=EXAMPLE_TIMEOUT,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, f"README block {i} failed:\n{proc.stderr}"
