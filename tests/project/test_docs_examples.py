"""The README and docs/ work as written: every fenced block of Python runs, under every
start method, and every shell command runs from the checkout's root, except the few
listed in NOT_RUN with their reason. The pages read the same on GitHub's view of the
repository as on the site: examples are written out in the pages (each equal to the
file in docs/examples/ this test runs), no ``--8<--`` line, and every relative link and
image points at a file that exists.

Skipped where docs/ is absent: a wheel's tests run from a copy of tests/ alone.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
START_METHODS = ["fork", "spawn", "forkserver"]
EXAMPLE_TIMEOUT = 120  # s; each takes a second or two alone, more on a loaded 2-core box

pytestmark = pytest.mark.skipif(
    not (DOCS / "index.md").is_file(), reason="no docs/ beside tests/ (not a source checkout)"
)

# Shell commands of the pages that this test does not run, and why. Every other command
# in a ```sh block runs (a line is split at `&&` into commands, run in order).
NOT_RUN = {
    "pip install .": "an install: the tests run in an environment installed from here",
    "pip install '.[test]'": "an install: the tests run in an environment installed from here",
    "pip install '.[test,lint]'": "an install: the tests run in an environment installed from here",
    "pip install '.[bench]'": "an install (the benchmark suite's peers)",
    "pip install '.[dask]'": "an install (the test extra has distributed already)",
    "python -m build --wheel": "a build (test_layout.py and .ci/run build it)",
    "pip install dist/pipepool-*.whl": "an install of the wheel built above",
    "pip install 'pipepool[airflow]'": "an install (Apache Airflow, a heavy one)",
    "pip install 'pipepool[dask]'": "an install (the test extra has distributed already)",
    "pip install 'pipepool[celery]'": "an install (Celery; .ci/run installs the extra)",
    "CELERY_CUSTOM_WORKER_POOL=pipepool.celery.prefork:TaskPool celery -A proj worker -P custom": (
        "a Celery worker, until stopped, on a Redis of localhost: "
        "tests/celery_pool/test_docs_example.py runs it as written, on a Redis of its own"
    ),
    "python -m pytest": "the whole test suite, this test included",
    "man pipepool-run": "the page a wheel's install puts where man finds it; an editable "
    "install has none (test_manpages.py::test_man_finds_the_installed_pages checks it)",
    "python -m benchmarks": "the full benchmark suite: about 8 minutes on 2 cores; it "
    "rewrites the committed benchmarks/results/ (tests/project/test_benchmarks.py runs it small)",
    "python -m benchmarks --quick": "a minute of benchmarks; it writes into the checkout",
    "python -m benchmarks --only latency": "it rewrites the committed benchmarks/results/",
    "python -m benchmarks --readme": "the full benchmark suite, then the README's table "
    "(tests/project/test_benchmarks.py runs it small, on a faked quiet and a faked busy machine)",
    "python -m benchmarks.readme benchmarks/results/results.json": "it rewrites the "
    "README's table (refused for the committed run: it recorded no load figures)",
    "python -m benchmarks --ab main --only tiny,latency": "builds another checkout's "
    "wheel, then minutes of benchmarks (tests/project/test_benchmarks_ab.py runs it small)",
    "dask scheduler --host 10.0.0.1": "a server on another machine's address, until stopped",
    "dask worker tcp://10.0.0.1:8786 --nworkers 8 --nthreads 1": "a server, until stopped",
    "pipepool run --cluster tcp://10.0.0.1:8786 --joblog log.tsv -a jobs.txt": "needs the "
    "cluster above (the --cluster local line beside it runs)",
}
# Commands whose program comes with an extra the test environment may lack; they run
# wherever it is installed (.ci/run installs it before the suite).
NEEDS_EXTRA = {"ruff": "lint", "mypy": "lint"}
CODE = {"python", "sh"}  # fenced blocks that run
NOT_CODE = {"", "text", "ini"}  # diagrams, sample output, configuration files


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    example: str | None  # the file an <!-- example: PATH --> marker says this block is

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[^\n`]*)\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
EXAMPLE_MARKER = re.compile(r"<!-- example: (\S+) -->\n$")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def fenced_blocks() -> list[Block]:
    blocks = []
    for page in pages():
        text = page.read_text()
        for m in FENCE.finditer(text):
            indent = m.group("indent")
            code = "".join(line.removeprefix(indent) for line in m.group("code").splitlines(True))
            marker = EXAMPLE_MARKER.search(text, 0, m.start())
            example = marker.group(1) if marker and marker.end() == m.start() else None
            line = text.count("\n", 0, m.start()) + 1
            blocks.append(Block(page, line, m.group("lang").strip(), code, example))
    return blocks


BLOCKS = fenced_blocks() if DOCS.is_dir() else []


# -- Python --------------------------------------------------------------------------------

# Runs a script as `python script.py` would, under the start method given: the way a
# reader's machine runs it where the default is not fork (macOS: spawn; Linux from Python
# 3.14: forkserver). Spawn and forkserver workers import the script again, as
# __mp_main__, exactly as they would import the reader's.
RUN_UNDER = (
    "import multiprocessing, runpy, sys; multiprocessing.set_start_method(sys.argv[1]); "
    "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_script(script: Path, start_method: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", RUN_UNDER, start_method, str(script)],
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT,
        cwd=script.parent,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


EXAMPLE_FILES = sorted(p.name for p in EXAMPLES.glob("*.py"))
# Examples in a folder of their own are a project another test runs its own way (a Celery
# worker: tests/celery_pool/test_docs_example.py); each is still shown in a page.
EXAMPLE_PROJECTS = sorted(p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.glob("*/*.py"))


def test_every_example_is_written_out_in_a_page_as_it_is_in_its_file() -> None:
    shown = {}
    for block in BLOCKS:
        if block.example is None:
            continue
        path = (block.page.parent / block.example).resolve()
        assert EXAMPLES in path.parents, f"{block.where}: {block.example} is not in docs/examples"
        assert block.code == path.read_text(), (
            f"{block.where} differs from {block.example}: copy the file into the page"
        )
        shown[path.relative_to(EXAMPLES).as_posix()] = block.where
    assert EXAMPLE_FILES, "no examples found"
    assert sorted(shown) == sorted(EXAMPLE_FILES + EXAMPLE_PROJECTS), (
        "an example no page shows, or a page a missing one"
    )


@pytest.mark.parametrize("start_method", START_METHODS)
@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_example_runs(example: str, start_method: str) -> None:
    # Each example asserts its own results: a non-zero exit is a broken example.
    proc = run_script(EXAMPLES / example, start_method)
    assert proc.returncode == 0, f"{example} failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip(), f"{example} printed nothing"


PYTHON_BLOCKS = [b for b in BLOCKS if b.lang == "python" and b.example is None]


@pytest.mark.timeout(3 * EXAMPLE_TIMEOUT)
@pytest.mark.parametrize("start_method", START_METHODS)
@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda b: b.where)
def test_python_block_runs(block: Block, start_method: str, tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(block.code)
    proc = run_script(script, start_method)
    assert proc.returncode == 0, f"{block.where} failed:\n{proc.stdout}\n{proc.stderr}"


# An unguarded script (the README's snippet before it had its guard): spawn and forkserver
# workers import it, and each would start a pool of its own there. The stdlib refuses
# that in every worker with a 40-line traceback; pipepool stops the pool at the first
# such worker, and the user reads one line that names the cause and the fix.
UNGUARDED = {
    "futures": (
        "from pipepool import ProcessPoolExecutor\n\n"
        "with ProcessPoolExecutor(max_workers=4) as pool:\n"
        "    print(sum(pool.map(abs, range(-1000, 0), chunksize=50)))\n"
    ),
    "scheduler": (
        "from pipepool import LocalExecutor\n\n"
        "with LocalExecutor(4) as ex:\n"
        "    ex.queue('k', abs, -1)\n"
        "    ex.wait_until_done(60)\n"
        "    error = ex.get_event_buffer()['k'].exception\n"
        "    print(f'{type(error).__name__}: {error}')\n"
    ),
}


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
@pytest.mark.parametrize("face", list(UNGUARDED))
def test_an_unguarded_script_fails_in_one_line(face: str, start_method: str, tmp_path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED[face])
    proc = run_script(script, start_method)
    err = proc.stderr
    said = (
        f"workers cannot start: the main module ({script}) starts a pool when it is "
        f"imported, and every {start_method} worker imports it; start the pool under "
        'if __name__ == "__main__":'
    )
    if face == "futures":  # raised from map(): the script's own traceback, then the line
        assert proc.returncode == 1
        assert err.splitlines()[-1] == f"pipepool.errors.InitializerError: {said}", err
        assert err.count("Traceback (most recent call last)") == 1, err
    else:  # the task failed with it; nothing else is printed
        assert proc.stdout == f"InitializerError: {said}\n" and not err, (proc.stdout, err)
    assert "initializer None" not in err and "bootstrapping phase" not in err, err
    assert len(err.splitlines()) < 30, err  # was 600-800 lines


def test_a_pool_in_another_bootstrapping_process_is_refused_as_multiprocessing_does(
    tmp_path,
) -> None:
    # A user's own spawn child imports the same unguarded script: it is not a pipepool
    # worker, so it gets the RuntimeError multiprocessing would raise, in pipepool's words.
    script = tmp_path / "child.py"
    script.write_text(
        "import multiprocessing, sys\n"
        "from pipepool import LocalExecutor\n\n"
        "LocalExecutor(1, start_method='spawn').start()  # unguarded: runs in the child too\n"
        "if __name__ == '__main__':\n"
        "    child = multiprocessing.get_context('spawn').Process(target=print)\n"
        "    child.start()\n"
        "    child.join()\n"
        "    sys.exit(child.exitcode)\n"
    )
    proc = run_script(script, "fork")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"RuntimeError: workers cannot start: the main module ({script}) starts a pool when "
        "it is imported, and spawn and forkserver children import it; start the pool "
        'under if __name__ == "__main__":'
    ), proc.stderr


# -- shell ---------------------------------------------------------------------------------


def shell_lines(block: Block) -> list[list[str]]:
    """Each command line of a ```sh block, its comment dropped, split at `&&`."""
    lines = []
    for raw in block.code.splitlines():
        line = re.sub(r"(^|\s+)#\s.*$", "", raw).strip()
        if line:
            lines.append([step.strip() for step in line.split("&&")])
    return lines


SHELL_BLOCKS = [b for b in BLOCKS if b.lang == "sh"]


def _runnable(block: Block) -> bool:
    return any(step not in NOT_RUN for line in shell_lines(block) for step in line)


def _unique_shell_blocks() -> dict[str, list[Block]]:
    """Blocks with a command to run; the same block in two pages runs once (the README
    and getting-started share theirs)."""
    found: dict[str, list[Block]] = {}
    for block in filter(_runnable, SHELL_BLOCKS):
        found.setdefault(block.code, []).append(block)
    return found


def test_every_block_is_code_that_runs_or_says_it_is_not() -> None:
    unknown = [f"{b.where}: ```{b.lang}" for b in BLOCKS if b.lang not in CODE | NOT_CODE]
    assert not unknown, "fenced blocks this test neither runs nor knows as text: " + str(unknown)


def test_every_command_not_run_is_still_in_the_docs() -> None:
    steps = {step for b in SHELL_BLOCKS for line in shell_lines(b) for step in line}
    assert not set(NOT_RUN) - steps, "NOT_RUN lists commands the pages no longer have"


# The steps that exited 0 in this process. Two blocks may share a step (the README's and
# docs/benchmarks.md's `pipepool bench`, a quarter of a minute on a loaded 2-core machine):
# it runs as the first block has it, and the later block does not run it again (same
# command, directory and environment). Run alone, a block runs each of its steps.
_PASSED_STEPS: set[str] = set()


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "code", list(_unique_shell_blocks()), ids=lambda c: _unique_shell_blocks()[c][0].where
)
def test_shell_commands_run(code: str) -> None:
    where = ", ".join(b.where for b in _unique_shell_blocks()[code])
    env = {
        **os.environ,
        "PATH": os.pathsep.join((os.path.dirname(sys.executable), os.environ["PATH"])),
        "MANPAGER": "cat",
        "PAGER": "cat",
    }
    for line in shell_lines(_unique_shell_blocks()[code][0]):
        for step in line:
            if step in NOT_RUN or step in _PASSED_STEPS:
                continue
            assert not step.startswith("pip "), f"{where}: `{step}`: list an install in NOT_RUN"
            program = step.split()[0]
            if program in NEEDS_EXTRA and shutil.which(program, path=env["PATH"]) is None:
                pytest.skip(f"{program} is not installed: the {NEEDS_EXTRA[program]} extra")
            proc = subprocess.run(
                step,
                shell=True,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert proc.returncode == 0, (
                f"{where}: `{step}` exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                f"{proc.stderr[-3000:]}"
            )
            _PASSED_STEPS.add(step)


# -- GitHub's view -------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def test_no_page_has_a_snippet_line() -> None:
    # GitHub renders Markdown as it is: an include line would show literally.
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in pages()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if line.lstrip().startswith("--8<--")
    ]
    assert not found, f"snippet lines (shown literally on GitHub): {found}"


def test_relative_links_and_images_point_at_files() -> None:
    broken = []
    for page in pages():
        text = FENCE.sub("", page.read_text())
        for m in LINK.finditer(text):
            target = m.group("target").split("#", 1)[0]
            if not target or re.match(r"[a-z]+:", target):
                continue  # an anchor on the same page, or a URL
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {m.group(0)}")
    assert not broken, f"links to files that do not exist: {broken}"


def _hooks():
    spec = importlib.util.spec_from_file_location(
        "mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_site_includes_what_github_links_to() -> None:
    # The site build (mkdocs.yml's hooks) turns an include region into the file, and the
    # plots' paths, right for GitHub, into where the site serves them.
    hooks = _hooks()
    page = DOCS / "benchmarks.md"
    site = hooks.site_result_links(hooks.expand_includes(page.read_text(), page), page)
    results = (ROOT / "benchmarks" / "results" / "results.md").read_text().rstrip("\n")
    assert results in site and "<!-- include" not in site
    assert "](benchmarks/throughput_vs_parallelism.png)" in site
    assert "../benchmarks/results/" not in site
    changelog = DOCS / "changelog.md"
    expanded = hooks.expand_includes(changelog.read_text(), changelog)
    assert expanded.rstrip("\n") == (ROOT / "CHANGELOG.md").read_text().rstrip("\n")
