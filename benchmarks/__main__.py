"""``python -m benchmarks``: run the suite (see ``benchmarks/suite.py``)."""

import sys

if __name__ == "__main__":  # spawned workers import this module as __mp_main__: no run there
    from benchmarks.suite import main

    sys.exit(main())
