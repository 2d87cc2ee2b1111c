"""The version has one source (issue 35): ``__version__`` in src/pipepool/__init__.py.
pyproject.toml reads it (dynamic), so the installed metadata, ``pipepool --version`` and
the package agree; the changelog's release headings have the form a release tag
``vX.Y.Z`` maps to, and a released version is never ahead of the package's."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import pipepool

ROOT = Path(__file__).resolve().parents[2]
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$")
VERSION = re.compile(r"^\d+\.\d+\.\d+$")  # what docs/guides/releasing.md tags as vX.Y.Z


def _parts(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def test_pyproject_reads_the_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "pipepool.__version__"


def test_metadata_cli_and_package_agree() -> None:
    assert VERSION.match(pipepool.__version__), pipepool.__version__
    assert importlib.metadata.version("pipepool") == pipepool.__version__
    out = subprocess.run(
        [sys.executable, "-m", "pipepool", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.split()[:2] == ["pipepool", pipepool.__version__], out


def test_changelog_headings_name_releases_a_tag_can_match() -> None:
    """Keep a Changelog: "## [Unreleased]" first, then "## [X.Y.Z] - YYYY-MM-DD", newest
    first; the newest release is the package's version or older (the next release bumps
    __version__ and renames [Unreleased] in one commit)."""
    changelog = ROOT / "CHANGELOG.md"
    if not changelog.exists():  # the wheel's tests carry tests/ only
        pytest.skip("no CHANGELOG.md beside the tests (a wheel's test run)")
    headings = [line for line in changelog.read_text().splitlines() if line.startswith("## ")]
    assert headings[0] == "## [Unreleased]", headings[:1]
    releases = []
    for heading in headings[1:]:
        match = RELEASE.match(heading)
        assert match, f"not a release heading: {heading!r}"
        releases.append(_parts(match.group(1)))
    assert releases == sorted(releases, reverse=True), "releases out of order"
    if releases:
        assert releases[0] <= _parts(pipepool.__version__), (releases[0], pipepool.__version__)
