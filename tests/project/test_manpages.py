"""The man pages (scripts/manpages.py) are generated from the command's own parsers: each
names every option ``--help`` shows, and pipepool-run(1) every refused GNU parallel
option."""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

from pipepool.cli import build_parser
from pipepool.run._compat import REJECTED

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    spec = importlib.util.spec_from_file_location("manpages", ROOT / "scripts" / "manpages.py")
    assert spec and spec.loader
    manpages = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(manpages)
    out = tmp_path_factory.mktemp("man")
    paths = manpages.build(out)
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
