"""Docs that send a reader elsewhere send them where the answer is: each pointer below
is a link, to a page (and heading) that exists and says what the reader came for.
Skipped where docs/ is absent (a wheel's tests run from a copy of tests/ alone)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

pytestmark = pytest.mark.skipif(
    not (DOCS / "index.md").is_file(), reason="no docs/ beside tests/ (not a source checkout)"
)

LINK = re.compile(r"\]\(([^)\s]+)\)")
POINTERS = [  # page, the line's words, what the page pointed to must say
    ("run.md", "`--cluster ADDRESS`", "ClusterExecutor"),
    ("guides/futures.md", "A task may start a pool of its own", "A task may start a pool"),
    ("joblib.md", "A pipepool worker may have children", "A task may start a pool"),
]


def slug(heading: str) -> str:
    """The anchor mkdocs makes of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def paragraph(page: Path, words: str) -> str:
    """The paragraph (or table row, or list item) of ``page`` holding ``words``."""
    text = page.read_text(encoding="utf-8")
    assert words in text, f"{page.name} no longer says {words!r}"
    blocks = re.split(r"\n\s*\n|\n(?=\|)|\n(?=- )", text)
    return next(block for block in blocks if words in block)


@pytest.mark.parametrize(("page", "words", "says"), POINTERS)
def test_a_pointer_leads_to_the_answer(page: str, words: str, says: str) -> None:
    where = DOCS / page
    links = [link for link in LINK.findall(paragraph(where, words)) if "://" not in link]
    assert links, f"{page}: {words!r} points nowhere a reader can follow"
    target, _, anchor = links[-1].partition("#")
    path = (where.parent / target).resolve()
    assert path.is_file(), f"{page}: {links[-1]} is no page"
    text = path.read_text(encoding="utf-8")
    if anchor:
        headings = {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
        assert anchor in headings, f"{page}: no heading #{anchor} in {target}"
    assert says in text, f"{page}: {target} does not say {says!r}"
