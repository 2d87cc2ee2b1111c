"""MkDocs hooks (mkdocs.yml): pages that come from the code, not from a copy of it.

- The benchmark plots are served from where the suite writes them: benchmarks/results/
  *.png stay the one copy (``python -m benchmarks`` rewrites them) and the site gets them
  as ``benchmarks/<name>.png``.
- A line ``<!-- cli-help pipepool run -->`` becomes that command's ``--help``, printed by
  the parser the command uses (``pipepool.cli.build_parser``), like the man pages.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
CLI_HELP = re.compile(r"^<!-- cli-help (pipepool(?: \w+)*) -->$", re.MULTILINE)


def on_files(files: Files, config) -> Files:
    for png in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"benchmarks/{png.name}", abs_src_path=str(png)))
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
    return CLI_HELP.sub(lambda m: "```text\n" + _help(m.group(1)) + "```", markdown)
