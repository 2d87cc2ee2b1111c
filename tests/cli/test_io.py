"""``pipepool run`` through the real CLI in a subprocess: its input forms (arguments after
colons, lines from stdin or a file, no shell) and its output (grouped, tagged, in input
order, kept for a killed job, a results directory). The runner's core is test_cli.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import marked, run_cli

pytestmark = pytest.mark.portable


@pytest.fixture
def mark():
    yield from marked()


# -- input forms ------------------------------------------------------------------------------


def test_arguments_after_colons_are_quoted_and_replaced() -> None:
    proc = run_cli(
        "run",
        "-k",
        "--no-summary",
        "printf '%s|%s|%s|%s\\n' {} {.} {/} {#}",
        ":::",
        "dir/a b.txt",
        "x.tar.gz",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "dir/a b.txt|dir/a b|a b.txt|1\nx.tar.gz|x.tar|x.tar.gz|2\n"


def test_several_colon_groups_make_a_product() -> None:
    proc = run_cli("run", "-k", "--no-summary", "echo {2}{1}", ":::", "a", "b", ":::", "1", "2")
    assert proc.stdout.split() == ["1a", "2a", "1b", "2b"]


def test_template_without_placeholder_gets_the_argument_appended() -> None:
    proc = run_cli("run", "-k", "--no-summary", "echo", "x", ":::", "1", "2")
    assert proc.stdout == "x 1\nx 2\n"


def test_lines_from_stdin_and_from_a_file(tmp_path: Path) -> None:
    proc = run_cli("run", "-k", "--no-summary", input="echo one\n\necho 'two  spaces'\n")
    assert proc.stdout == "one\ntwo  spaces\n"
    args = tmp_path / "args"
    args.write_text("a\nb c\n")
    proc = run_cli("run", "-k", "--no-summary", "-a", str(args), "echo", "[{}]")
    assert proc.stdout == "[a]\n[b c]\n"


def test_no_shell_execs_the_words_directly() -> None:
    proc = run_cli("run", "-k", "--no-shell", "--no-summary", "echo", "$HOME", "{}", ":::", "a;b")
    assert proc.stdout == "$HOME a;b\n"  # no shell: nothing expanded, nothing split
    missing = run_cli("run", "--no-shell", ":::", "no-such-program-pipepool")
    assert missing.returncode == 1
    assert "no-such-program-pipepool" in missing.stderr and "exit 127" in missing.stderr


def test_no_input_and_bad_usage_exit_255() -> None:
    assert run_cli("run", "--halt", "sometimes", ":::", "true").returncode == 255
    assert run_cli("run", "--resume", ":::", "true").returncode == 255
    assert run_cli("run", "-j", "0", ":::", "true").returncode == 255
    empty = run_cli("run", input="")
    assert empty.returncode == 0 and "0 jobs" in empty.stderr


# -- output ----------------------------------------------------------------------------------


def test_output_is_grouped_per_job_and_tagged() -> None:
    script = "for i in 1 2 3 4 5; do echo {}-$i; echo {}-err-$i >&2; sleep 0.01; done"
    proc = run_cli("run", "-j", "4", "--tag", "--no-summary", script, ":::", *"abcdef")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 30
    for start in range(0, 30, 5):  # each job's five lines together, never interleaved
        block = lines[start : start + 5]
        tag = block[0].split("\t")[0]
        assert block == [f"{tag}\t{tag}-{i}" for i in range(1, 6)]
    assert sorted(proc.stderr.splitlines())[0] == "a\ta-err-1"


def test_keep_order_prints_in_input_order() -> None:
    proc = run_cli(
        "run", "-j", "4", "-k", "--no-summary", "sleep 0.{}; echo {}", ":::", "3", "2", "1", "0"
    )
    assert proc.stdout == "3\n2\n1\n0\n"


def test_output_of_a_killed_job_is_not_lost(tmp_path: Path, mark: str) -> None:
    proc = run_cli(
        "run",
        "--timeout",
        "1",
        "--results",
        str(tmp_path / "res"),
        ":::",
        f"echo before; echo oops >&2; sleep 1000.{mark}",
    )
    assert proc.returncode == 1
    assert proc.stdout == "before\n"
    assert "oops" in proc.stderr
    assert (tmp_path / "res" / "1" / "stdout").read_text() == "before\n"
    assert (tmp_path / "res" / "1" / "stderr").read_text() == "oops\n"


def test_results_dir_holds_each_jobs_output(tmp_path: Path) -> None:
    res = tmp_path / "res"
    proc = run_cli(
        "run",
        "--results",
        str(res),
        "--no-summary",
        "echo out{}; echo err{} >&2",
        ":::",
        "1",
        "2",
        "3",
    )
    assert proc.returncode == 0
    for i in (1, 2, 3):
        assert (res / str(i) / "stdout").read_text() == f"out{i}\n"
        assert (res / str(i) / "stderr").read_text() == f"err{i}\n"
