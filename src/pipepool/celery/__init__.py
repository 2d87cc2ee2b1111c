"""A Celery worker pool on pipepool (docs/celery.md): ``pipepool.celery.prefork:TaskPool``.

``prefork.py`` is the pool (Celery's ``BasePool``), ``_pool.py`` its core (the executor,
the jobs, the step), ``_jobs.py`` a job and how its outcome reaches Celery's callbacks,
``_drive.py`` who steps the core (kombu's hub, or a thread of its own for Celery's
blocking loop), ``_child.py`` what runs in a child on Celery's behalf, ``_versions.py``
the Celery versions it supports.

Importing this package imports nothing of Celery; ``pipepool.celery.prefork`` does.
"""
