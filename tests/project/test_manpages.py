"""The man pages (scripts/manpages.py) are generated from the command's own parsers: each
names every option ``--help`` shows, and pipepool-run(1) every refused GNU parallel
option."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

import pipepool
from pipepool.cli import build_parser
from pipepool.run._compat import REJECTED

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("manpages", ROOT / "scripts" / "manpages.py")
    assert spec and spec.loader
    manpages = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(manpages)
    return manpages


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("man")
    paths = _generator().build(out)
    assert sorted(p.name for p in paths) == ["pipepool-run.1", "pipepool.1"]
    return out


@pytest.fixture(scope="module")
def pages(built: Path) -> dict[str, str]:
    # roff escapes '-' as '\-'; what a reader sees has plain dashes
    return {p.stem: p.read_text().replace("\\-", "-") for p in built.glob("*.1")}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    top = build_parser()
    subs = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return {"pipepool": top, "bench": subs.choices["bench"], "run": subs.choices["run"]}


def _visible_options(parser: argparse.ArgumentParser) -> list[str]:
    return [
        opt for a in parser._actions if a.help is not argparse.SUPPRESS for opt in a.option_strings
    ]


@pytest.mark.parametrize(
    ("page", "parser"), [("pipepool", "pipepool"), ("pipepool", "bench"), ("pipepool-run", "run")]
)
def test_page_names_every_option(pages, page: str, parser: str) -> None:
    options = _visible_options(_parsers()[parser])
    assert len(options) > 1
    missing = [o for o in options if f"\\fB{o}\\fR" not in pages[page]]
    assert missing == [], f"{page}.1 lacks {missing}"


def test_run_page_names_refused_and_ignored_options(pages) -> None:
    text = pages["pipepool-run"]
    assert [o for o in REJECTED if f"\\fB{o}\\fR" not in text] == []
    assert "--will-cite" in text and "accepted and ignored" in text


def test_run_page_carries_description_and_epilog(pages) -> None:
    run = _parsers()["run"]
    assert run.description and run.description in pages["pipepool-run"]
    assert "exit status:" in pages["pipepool-run"]


@pytest.mark.skipif(shutil.which("man") is None, reason="no man(1) to render with")
def test_man_renders_without_warnings(built: Path) -> None:
    for page in sorted(built.glob("*.1")):
        proc = subprocess.run(
            ["man", "--warnings", "-l", str(page)],
            capture_output=True,
            text=True,
            timeout=30,
            env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin", "MANPAGER": "cat"},
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == "", proc.stderr
        assert "OPTIONS" in proc.stdout


def test_run_page_carries_the_guide_s_differences(pages) -> None:
    """pipepool-run(1) is where ``--help`` sends a reader for what differs from GNU
    parallel: it carries every row of docs/run.md's table of differences."""
    rows = _generator().differences()
    assert len(rows) >= 10 and rows[0][:2] == ("`--retries N`", "N attempts in total")
    text = pages["pipepool-run"]
    for option, gnu, ours in rows:
        plain = [cell.replace("`", "") for cell in (option, gnu, ours)]
        assert f"\\fB{plain[0]}\\fR" in text, option
        assert f"GNU parallel: {plain[1]}; pipepool run: {plain[2]}" in text, option


def test_help_points_to_what_an_install_has() -> None:
    """``pipepool run --help`` sends readers to the man page an install has, not to a
    file of the source tree."""
    epilog = _parsers()["run"].epilog or ""
    assert "man pipepool-run" in epilog
    assert "docs/" not in epilog and ".md" not in epilog


def test_the_generator_takes_its_arguments_with_argparse(tmp_path) -> None:
    """``--help`` answers (it once wrote the pages into a directory named --help)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "manpages.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and "usage:" in proc.stdout
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "pages"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "manpages.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["pipepool-run.1", "pipepool.1"]


def _installed_from_a_wheel() -> bool:
    """pipepool installed as a wheel (pip install .), not editable nor from the tree: the
    install that carries the man pages (an editable one has no data files)."""
    try:
        dist = metadata.distribution("pipepool")
    except metadata.PackageNotFoundError:
        return False
    direct = dist.read_text("direct_url.json")
    editable = bool(direct and json.loads(direct).get("dir_info", {}).get("editable"))
    return not editable and Path(pipepool.__file__).is_relative_to(Path(str(dist.locate_file(""))))


@pytest.mark.skipif(not _installed_from_a_wheel(), reason="an editable install has no man pages")
@pytest.mark.skipif(shutil.which("man") is None, reason="no man(1) to look them up with")
def test_man_finds_the_installed_pages() -> None:
    """After ``pip install .``, ``man pipepool-run`` finds the page the install put under
    its environment's share/man (man looks beside each bin/ on PATH)."""
    scripts = Path(sysconfig.get_path("scripts"))
    data = Path(sysconfig.get_path("data"))
    for name in ("pipepool", "pipepool-run"):
        page = data / "share" / "man" / "man1" / f"{name}.1"
        assert page.is_file(), page
        proc = subprocess.run(
            ["man", "-w", name],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": f"{scripts}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")},
        )
        assert proc.returncode == 0, proc.stderr
        assert Path(proc.stdout.strip()).resolve() == page.resolve()
