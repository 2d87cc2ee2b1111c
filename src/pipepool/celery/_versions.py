"""The Celery versions this pool is written for and tested with, and the check that
refuses the ones it is not: the pool subclasses Celery's ``BasePool`` and runs Celery's
own ``process_initializer`` in each child, so it follows their contracts as 5.6 and 5.7
have them (docs/celery.md, "Versions")."""

from __future__ import annotations

import warnings

OLDEST = (5, 6)  # the first Celery this pool works with
NEWEST = (5, 7)  # the last one it was tested with; a newer one gets a warning


def require_supported_celery() -> None:
    """ImportError for a Celery older than 5.6; a warning for one newer than 5.7."""
    import celery

    version = tuple(celery.VERSION[:2])
    if version < OLDEST:
        raise ImportError(
            f"pipepool.celery needs Celery 5.6 or 5.7, not {celery.__version__}: "
            "pip install 'pipepool[celery]'"
        )
    if version > NEWEST:
        warnings.warn(
            f"pipepool.celery was tested with Celery 5.6 and 5.7, not {celery.__version__}",
            RuntimeWarning,
            stacklevel=3,
        )
