"""Only the extension: pyx/_loop.pyx -> pipepool._loop (skipped with PIPEPOOL_PURE=1).

Everything else about the build lives in pyproject.toml.
"""

import os

from setuptools import setup

ext_modules = []
if os.environ.get("PIPEPOOL_PURE", "") != "1" and os.path.exists("pyx/_loop.pyx"):
    from Cython.Build import cythonize
    from setuptools import Extension

    ext_modules = cythonize(
        [Extension("pipepool._loop", ["pyx/_loop.pyx"], include_dirs=["pyx"])],
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    )

setup(ext_modules=ext_modules)
