"""The same project's worker started from Python, the pool class given itself."""

from proj import app

from pipepool.celery.prefork import TaskPool

if __name__ == "__main__":
    app.Worker(pool_cls=TaskPool, concurrency=2).start()
