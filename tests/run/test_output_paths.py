"""Every file ``pipepool run`` writes is checked before the first job runs: a path that
cannot be written is refused up front (exit 255), with an error that names the option,
and nothing runs; a write that still fails at the end (the place went away during the
run) loses nothing else: the ``--json`` line is printed and the error names the option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import run_cli

pytestmark = pytest.mark.portable

OUTPUTS = ("--joblog", "--export-pyperf", "--export-hyperfine")


def _bad_paths(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Places no file can be written, and the words the error gives for each."""
    a_file = tmp_path / "plain"
    a_file.write_text("")
    return {
        "no such directory": (tmp_path / "missing" / "out", "No such file or directory"),
        "a directory": (tmp_path, "Is a directory"),
        "under a file": (a_file / "out", "Not a directory"),
    }


@pytest.mark.parametrize("kind", ["no such directory", "a directory", "under a file"])
@pytest.mark.parametrize("option", OUTPUTS)
def test_an_unwritable_output_is_refused_before_any_job_runs(
    tmp_path: Path, option: str, kind: str
) -> None:
    path, words = _bad_paths(tmp_path)[kind]
    ran = tmp_path / "ran"
    proc = run_cli("run", "--json", option, str(path), "touch {}", ":::", str(ran))
    assert proc.returncode == 255, proc.stderr
    assert not ran.exists(), "a job ran before the output was checked"
    assert proc.stdout == "", proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"pipepool run: {option} {path}: "), first
    assert words in first, first


def test_a_results_directory_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    a_file = tmp_path / "plain"
    a_file.write_text("")
    ran = tmp_path / "ran"
    proc = run_cli("run", "--results", str(a_file / "res"), "touch {}", ":::", str(ran))
    assert proc.returncode == 255, proc.stderr
    assert not ran.exists()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"pipepool run: --results {a_file / 'res'}: "), proc.stderr


def test_an_output_path_checked_but_not_yet_written_is_not_left_behind(tmp_path: Path) -> None:
    # The check may not leave an empty file where a run that could not start wrote none.
    log = tmp_path / "log"
    export = tmp_path / "export.json"
    proc = run_cli(
        "run", "--joblog", str(log), "--export-pyperf", str(export),
        "--export-hyperfine", str(tmp_path / "missing" / "h.json"), "true", ":::", "x",
    )  # fmt: skip
    assert proc.returncode == 255, proc.stderr
    assert "--export-hyperfine" in proc.stderr
    assert not log.exists() and not export.exists()


@pytest.mark.parametrize("option", ["--export-pyperf", "--export-hyperfine"])
def test_an_export_that_fails_at_the_end_keeps_the_json_and_names_the_option(
    tmp_path: Path, option: str
) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    export = folder / "export.json"
    # the job takes the export's directory away: the write at the end fails
    proc = run_cli("run", "--json", option, str(export), "rm -r {}", ":::", str(folder))
    assert proc.returncode == 255, proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1])  # the results are not lost
    assert summary["succeeded"] == 1, summary
    assert f"pipepool run: {option} {export}: " in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
