"""The names a package's face loads on first use: one hook for every room (PEP 562).

A face keeps a name out of its import when the module behind it costs start-up time a
worker, or a command that does not use it, should not pay. It maps each such name to
the module of its package that defines it and takes its module ``__getattr__`` and
``__dir__`` from ``exports``::

    _LAZY = {"show_plan": "_slots"}
    if not TYPE_CHECKING:  # the type checker reads the imports, not this hook
        __getattr__, __dir__ = exports(globals(), _LAZY)

The first use imports the module and keeps the name in the package's namespace, so
later uses are plain attribute reads that never come back here. Only the standard
library, and only on first use: ``import pipepool`` loads nothing more for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping


def exports(
    namespace: dict[str, object], lazy: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package whose ``globals()`` is
    ``namespace``: ``lazy`` maps a name to the module (relative to the package) that
    defines it; any other name is an AttributeError naming the package."""
    package = str(namespace["__name__"])
    anchor = str(namespace["__package__"])  # the package itself, or a module's package

    def __getattr__(name: str) -> object:
        if name not in lazy:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f".{lazy[name]}", anchor), name)
        namespace[name] = value  # found here from now on: no second call to this hook
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(lazy))

    return __getattr__, __dir__
