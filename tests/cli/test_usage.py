"""The ``pipepool`` command line itself, through the real CLI in a subprocess:
``--version``, usage errors (the reason first, one line of usage), ``--help`` texts,
``pipepool bench``; and the direction of imports: the library never reaches into
``benchmarks/`` nor back up into its entry point."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pipepool
from helpers import ENV, run_cli

SRC = Path(pipepool.__file__).resolve().parent


def test_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(
        rf"pipepool {re.escape(pipepool.__version__)} \((compiled|pure-Python) loop\)\n",
        proc.stdout,
    ), proc.stdout


def usage_error(*args: str) -> list[str]:
    """The stderr lines of a command line refused as bad usage (exit 255)."""
    proc = run_cli(*args)
    assert proc.returncode == 255, (proc.returncode, proc.stderr)
    assert proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.splitlines()


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            ("bench", "--tasks", "0"),
            "pipepool bench: error: argument --tasks: must be at least 1, not 0",
        ),
        (
            ("bench", "--rounds", "0"),
            "pipepool bench: error: argument --rounds: must be at least 1, not 0",
        ),
        (
            ("bench", "-j", "0"),
            "pipepool bench: error: argument -j/--jobs: must be at least 1, not 0",
        ),
        (
            ("bench", "--tasks", "many"),
            "pipepool bench: error: argument --tasks: 'many' is not a whole number",
        ),
        (("bench", "--bogus"), "pipepool bench: error: unrecognized arguments: --bogus"),
        (
            ("run", "--bogus", "echo", ":::", "a"),
            "pipepool run: error: unrecognized arguments: --bogus",
        ),
        (
            ("run", "--retries=-1", ":::", "true"),
            "pipepool run: error: argument --retries: must be 0 or more, not -1",
        ),
        (
            ("run", "--resume", ":::", "true"),
            "pipepool run: error: --resume and --resume-failed need --joblog FILE",
        ),
        (
            ("run", "--pipe", "wc", "-l"),
            "pipepool run: error: --pipe (GNU parallel) is not supported by pipepool run: ",
        ),
        (
            ("run", "--sshlogin", "host", "echo", ":::", "a"),
            "pipepool run: error: --sshlogin (GNU parallel) is not supported by pipepool run: ",
        ),
        ((), "pipepool: error: the following arguments are required: command"),
        (("frobnicate",), "pipepool: error: argument command: invalid choice: 'frobnicate'"),
    ],
    ids=lambda value: " ".join(value) or "(nothing)" if isinstance(value, tuple) else "",
)
def test_a_usage_error_says_why_first_then_one_line_of_usage(args: tuple[str, ...], reason: str):
    """The subcommand's own usage (not the top level's), after the reason."""
    lines = usage_error(*args)
    assert len(lines) == 2, lines
    assert lines[0].startswith(reason), lines
    command = (
        " ".join(["pipepool", *args[:1]]) if args[:1] in (("run",), ("bench",)) else "pipepool"
    )
    assert lines[1].startswith(f"usage: {command} "), lines


@pytest.mark.parametrize("args", [(), ("run",), ("bench",)], ids=["pipepool", "run", "bench"])
def test_help_is_plain_text(args: tuple[str, ...]) -> None:
    proc = run_cli(*args, "--help")
    assert proc.returncode == 0, proc.stderr
    for markup in ("``", ":class:", ":func:", ":mod:", ":meth:"):
        assert markup not in proc.stdout, (markup, proc.stdout)
    assert not re.search(r"^\s*\.\. \w+::", proc.stdout, re.M), proc.stdout  # directives


def test_bench_help_has_a_description_and_the_defaults() -> None:
    text = " ".join(run_cli("bench", "--help").stdout.split())
    assert "Race pipepool against the standard library's process pools" in text
    assert "no-op tasks per round (default: 20000)" in text
    assert "(default: 3)" in text and "workers per pool (default: the number of cores)" in text
    assert "--full" not in text


def test_bench_race_refuses_no_tasks_or_rounds() -> None:
    from pipepool.cli._bench import race

    for tasks, rounds in ((0, 1), (1, 0)):
        with pytest.raises(ValueError, match="must be at least 1"):
            race(tasks, 1, rounds, out=lambda line: None)


FAKE_SUITE = "import pathlib\npathlib.Path({ran!r}).write_text('ran')\nraise SystemExit(3)\n"


@pytest.mark.timeout(180)
def test_bench_from_an_install_outside_a_checkout(tmp_path: Path) -> None:
    """The README's quick start: an installed pipepool (a copy of the package, outside
    any checkout) run from a folder that holds a benchmarks/ package of its own. The
    race runs on its built-in workload; --full is refused with the way to the suite, and
    nothing of the folder is imported."""
    site = tmp_path / "site"
    shutil.copytree(SRC, site / "pipepool", ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    (work / "benchmarks").mkdir(parents=True)
    ran = work / "fake-suite-ran"
    for name in ("__init__.py", "suite.py"):
        (work / "benchmarks" / name).write_text(FAKE_SUITE.format(ran=str(ran)))

    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pipepool", "bench", *args],
            capture_output=True,
            text=True,
            timeout=150,
            env={**ENV, "PYTHONPATH": str(site)},
            cwd=work,
        )

    raced = bench("--tasks", "300", "--rounds", "1", "-j", "2")
    assert raced.returncode == 0, raced.stderr
    assert "300 no-op tasks, 2 workers, 1 rounds" in raced.stdout
    for contender in ("pipepool LocalExecutor", "concurrent.futures.ProcessPoolExecutor"):
        assert contender in raced.stdout
    assert "1-minute load average " in raced.stdout.splitlines()[-1]  # how busy it was
    full = bench("--full", "--quick")
    assert full.returncode == 255, full.stderr
    assert "--full was removed" in full.stderr and "python -m benchmarks" in full.stderr
    assert not ran.exists(), "pipepool imported benchmarks/ from the current directory"


# -- the direction of imports ---------------------------------------------------------------


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(SRC.parent)), ast.parse(path.read_text(), str(path)))
        for path in sorted(SRC.rglob("*.py"))
    ]


def _imports(tree: ast.Module, package: list[str]) -> list[str]:
    """Absolute names of what ``tree`` imports (``package``: the module's package)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


def test_the_library_never_imports_benchmarks_nor_edits_sys_path() -> None:
    for name, tree in _modules():
        package = ["pipepool", *Path(name).parent.parts[1:]]
        for imported in _imports(tree, package):
            assert imported.split(".")[0] != "benchmarks", (name, imported)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "path":
                assert not (isinstance(node.value, ast.Name) and node.value.id == "sys"), name


def test_only_the_entry_points_import_the_cli_module() -> None:
    """``pipepool.cli`` is the top: what the subcommands share lives below it, and
    outside its own room only ``__main__`` imports it."""
    importers = sorted(
        name
        for name, tree in _modules()
        if not name.startswith("pipepool/cli/")
        and any(
            imported in ("pipepool.cli", "pipepool.cli.main")
            or imported.startswith("pipepool.cli.")
            for imported in _imports(tree, ["pipepool", *Path(name).parent.parts[1:]])
        )
    )
    assert importers == ["pipepool/__main__.py"], importers
