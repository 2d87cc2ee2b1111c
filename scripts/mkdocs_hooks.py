"""MkDocs hooks (mkdocs.yml): pages that come from the code, not from a copy of it, and
that read the same on GitHub's view of the repository as on the site.

- A region ``<!-- include PATH -->`` ... ``<!-- end include -->`` becomes the file at
  PATH (relative to the page) on the site. Between the markers the page says, for
  GitHub's view, where that file is: GitHub shows the markers as nothing and the text
  between them as written (a ``--8<--`` snippet line would show literally there).
- Images that point into benchmarks/results/ (the one copy of the plots, which
  ``python -m benchmarks`` rewrites) are served by the site as ``benchmarks/<name>.png``:
  the path GitHub resolves is the path in the page, and the site follows it here.
- A line ``<!-- cli-help pipepool run -->`` becomes that command's ``--help``, printed by
  the parser the command uses (``pipepool.cli.build_parser``), like the man pages.

The text transformations import nothing of MkDocs, so tests/project/test_docs_examples.py
checks them without the docs extra installed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"
SITE_RESULTS = "benchmarks"  # where the site serves RESULTS' plots, under the docs root
CLI_HELP = re.compile(r"^<!-- cli-help (pipepool(?: \w+)*) -->$", re.MULTILINE)
INCLUDE = re.compile(
    r"^<!-- include (?P<path>\S+) -->\n.*?^<!-- end include -->$", re.MULTILINE | re.DOTALL
)
LINK_TARGET = re.compile(r"(?P<open>\]\()(?P<target>[^)\s#]+)(?P<close>[)#])")


def expand_includes(markdown: str, page: Path) -> str:
    """Each include region of ``page``'s text, replaced by the file it names."""

    def included(m: re.Match[str]) -> str:
        return (page.parent / m.group("path")).read_text().rstrip("\n")

    return INCLUDE.sub(included, markdown)


def site_result_links(markdown: str, page: Path) -> str:
    """Links to the plots in benchmarks/results/ (relative to ``page``), pointed where the
    site has them: ``benchmarks/<name>.png`` under the docs root."""

    def moved(m: re.Match[str]) -> str:
        target = (page.parent / m.group("target")).resolve()
        if target.parent != RESULTS or target.suffix != ".png":  # what on_files serves
            return m.group(0)
        site = os.path.relpath(DOCS / SITE_RESULTS / target.name, page.parent)
        return f"{m.group('open')}{site}{m.group('close')}"

    return LINK_TARGET.sub(moved, markdown)


def on_files(files, config):
    from mkdocs.structure.files import File

    for png in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"{SITE_RESULTS}/{png.name}", abs_src_path=str(png)))
    return files


def _help(command: str) -> str:
    from pipepool.cli import build_parser

    os.environ["COLUMNS"] = "88"  # argparse wraps to the terminal; pin it for the page
    parser = build_parser()
    for word in command.split()[1:]:
        subs = next(a for a in parser._actions if a.choices and word in a.choices)
        parser = subs.choices[word]  # type: ignore[index]
    return parser.format_help()


def on_page_markdown(markdown: str, page, config, files) -> str:
    source = Path(page.file.abs_src_path)
    markdown = site_result_links(expand_includes(markdown, source), source)
    return CLI_HELP.sub(lambda m: "```text\n" + _help(m.group(1)) + "```", markdown)
