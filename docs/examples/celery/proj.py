"""A Celery project whose worker runs on pipepool's pool (docs/celery.md).

Start a worker on it (Redis on localhost; CELERY_BROKER_URL and CELERY_RESULT_BACKEND
point elsewhere):

    CELERY_CUSTOM_WORKER_POOL=pipepool.celery.prefork:TaskPool celery -A proj worker -P custom

then, from another shell: python -c 'import proj; print(proj.add.delay(2, 3).get(timeout=30))'
"""

from celery import Celery

app = Celery("proj", broker="redis://localhost:6379/0", backend="redis://localhost:6379/1")


@app.task
def add(x: int, y: int) -> int:
    return x + y
