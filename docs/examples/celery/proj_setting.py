"""The same project with the pool chosen by a setting: ``celery -A proj_setting worker``
(no ``-P``) runs on pipepool's pool."""

from proj import app

app.conf.worker_pool = "pipepool.celery.prefork:TaskPool"
