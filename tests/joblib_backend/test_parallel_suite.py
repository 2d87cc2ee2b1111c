"""joblib's own ``test_parallel.py``, with "pipepool" beside "loky" in its backend lists.

The tests are joblib's; this module only collects them (see ``joblib_support``). The
summary at the end of the run compares each pipepool test with its loky twin; a
pipepool failure whose loky twin passed must be a known difference (``conftest.py``,
and docs/joblib.md says why), else the run fails.
"""

from .joblib_support import load_suite, require

require("joblib")
require("numpy")  # the suite's array tests skip themselves without it: not in CI
require("threadpoolctl")

_suite = load_suite()
globals().update({name: value for name, value in vars(_suite).items() if name.startswith("test_")})
