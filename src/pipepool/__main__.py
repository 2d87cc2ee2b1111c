"""``python -m pipepool``: the same as the ``pipepool`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
