"""``python -m benchmarks.celery_pool``: see ``benchmarks/celery_pool/run.py``."""

import sys

if __name__ == "__main__":
    from benchmarks.celery_pool.run import main

    sys.exit(main())
