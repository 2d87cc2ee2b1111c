"""What the joblib tests share: the CI rule for a missing joblib, and joblib's own
``test_parallel.py`` loaded with "pipepool" added to its backend lists."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types
from pathlib import Path

import optional

SUITE = "joblib.test.test_parallel"
REGISTER_LINE = "import pipepool.joblib  # registers the 'pipepool' backend\n"


def require(name: str) -> types.ModuleType:
    """Import an optional test dependency: skip without it, but in CI (``CI=true``) a
    missing one is an error, so the joblib tests can never be skipped there (optional.py's
    rule)."""
    module = optional.require(name)
    assert module is not None
    return module


class _AddPipepool(ast.NodeTransformer):
    """Wherever the suite lists "loky" as a backend, list "pipepool" beside it.

    - ``PROCESS_BACKENDS = [..., "loky"]`` (so also ``PARALLEL_BACKENDS``);
    - ``parametrize("...backend...", [...])`` lists naming "loky": a "loky" entry gets
      a "pipepool" twin, a tuple entry with "loky" in it a twin tuple;
    - the scripts the suite runs in a subprocess import ``pipepool.joblib`` after
      joblib, as a user's script must to name the backend.
    Lists built from ``BACKENDS`` need nothing: importing pipepool.joblib registered it.
    """

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if "PROCESS_BACKENDS" in names and isinstance(node.value, ast.List):
            _twin_entries(node.value)
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if (
            name == "parametrize"
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Constant)
            and "backend" in str(node.args[0].value)
        ):
            for sub in ast.walk(node.args[1]):
                if isinstance(sub, ast.List):
                    _twin_entries(sub)
        return self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str) and "from joblib import Parallel, delayed\n" in node.value:
            node.value = node.value.replace(
                "from joblib import Parallel, delayed\n",
                "from joblib import Parallel, delayed\n" + REGISTER_LINE,
            )
        return node


def _is_loky(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == "loky"


def _twin_entries(lst: ast.List) -> None:
    twins: list[ast.expr] = []
    for elt in lst.elts:
        if _is_loky(elt):
            twins.append(ast.Constant("pipepool"))
        elif isinstance(elt, ast.Tuple) and any(_is_loky(e) for e in elt.elts):
            twins.append(
                ast.Tuple(
                    [ast.Constant("pipepool") if _is_loky(e) else e for e in elt.elts],
                    ast.Load(),
                )
            )
    lst.elts.extend(twins)


def load_suite() -> types.ModuleType:
    """joblib's ``test_parallel.py`` from the installed wheel, patched in memory (the
    file on disk is untouched) and registered under its own name, so that its
    functions pickle by reference as they would unpatched."""
    import pipepool.joblib  # noqa: F401  (registers the backend before BACKENDS is read)

    if SUITE in sys.modules and getattr(sys.modules[SUITE], "_pipepool_patched", False):
        return sys.modules[SUITE]
    spec = importlib.util.find_spec(SUITE)
    if spec is None or spec.origin is None:
        raise ImportError(f"{SUITE} is not shipped with this joblib")
    tree = _AddPipepool().visit(ast.parse(Path(spec.origin).read_text(), spec.origin))
    ast.fix_missing_locations(tree)
    module = types.ModuleType(SUITE)
    module.__file__ = spec.origin
    module.__package__ = "joblib.test"
    module.__spec__ = spec
    module._pipepool_patched = True  # type: ignore[attr-defined]
    sys.modules[SUITE] = module
    try:
        exec(compile(tree, spec.origin, "exec"), module.__dict__)
    except BaseException:
        del sys.modules[SUITE]
        raise
    return module
