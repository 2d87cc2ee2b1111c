"""Only the extension: pyx/_loop.pyx -> pipepool.loop._loop (skipped with PIPEPOOL_PURE=1).

Everything else about the build lives in pyproject.toml. Interpreters other than CPython
get the pure-Python loop: the compiled one uses CPython's C API (GC pause, GIL release).
"""

import os
import platform

from setuptools import setup

PXD_ALIASES = os.path.join("build", "pxd")


def alias_pxds() -> str:
    """Make pyx/_loop.pxd findable as the declarations of module ``pipepool.loop._loop``.

    Cython looks a module's .pxd up by its full name (``pipepool/loop/_loop.pxd`` on the include
    path), while the layout keeps it beside its .pyx under the short name; a link in the
    build directory bridges them (it follows edits, so Cython's rebuild check sees the
    real file).
    """
    package = os.path.join(PXD_ALIASES, "pipepool", "loop")
    os.makedirs(package, exist_ok=True)
    for name in os.listdir("pyx"):
        if name.endswith(".pxd"):
            alias = os.path.join(package, name)
            if os.path.lexists(alias):
                os.remove(alias)
            os.symlink(os.path.abspath(os.path.join("pyx", name)), alias)
    return PXD_ALIASES


def want_extension() -> bool:
    if os.environ.get("PIPEPOOL_PURE", "") == "1" or platform.python_implementation() != "CPython":
        return False
    if not os.path.exists(os.path.join("pyx", "_loop.pyx")):
        # Building on would give a wheel that silently lacks the compiled loop (a tree or
        # sdist without pyx/: MANIFEST.in ships it); a pure build has to be asked for.
        raise SystemExit(
            "setup.py: pyx/_loop.pyx is missing; set PIPEPOOL_PURE=1 to build "
            "the pure-Python package on purpose"
        )
    return True


ext_modules = []
if want_extension():
    from Cython.Build import cythonize
    from setuptools import Extension

    ext_modules = cythonize(
        [Extension("pipepool.loop._loop", ["pyx/_loop.pyx"], include_dirs=["pyx"])],
        include_path=[alias_pxds()],
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    )

setup(ext_modules=ext_modules)
