"""The ``pipepool`` command: the top of the command line, which nothing in the package
imports but ``__main__`` (``python -m pipepool``) and the console script.

``_main``: the top of the parser, ``pipepool info``, and the dispatch to each subcommand
(``run`` is the ``run/`` room's face: its parser and its command); ``_bench``:
``pipepool bench``, a quick race against the standard library's pools. What the
subcommands and the measuring room share (the usage-error parser, argument types, the
check of an output path) is the top-level module ``pipepool._cli_common``, below every
room that uses it.
"""

from ._main import build_parser, info_text, main

__all__ = ["build_parser", "info_text", "main"]
