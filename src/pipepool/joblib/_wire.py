"""What a joblib batch and its results become between the parent and a worker.

The worker side of ``pipepool.joblib``: tasks travel as loky sends them (cloudpickle,
joblib's memmapping reducers), results cloudpickled with arrays out of band. Every
function a worker unpickles first (``_load_job``, ``_load_cloudpickled``) imports
``pipepool.joblib``, which registers the backend there: a nested
``Parallel(backend="pipepool")`` then resolves under spawn and forkserver too.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Callable
from typing import Any

from joblib._memmapping_reducer import (  # type: ignore[import-untyped]
    JOBLIB_MMAPS,
    _get_backing_memmap,
    reduce_array_memmap_backward,
)
from joblib.externals.loky.backend.reduction import (  # type: ignore[import-untyped]
    dumps as loky_dumps,
)

try:  # joblib >= 1.5 depends on cloudpickle; older ones vendor it
    import cloudpickle  # type: ignore[import-untyped]
except ImportError:
    from joblib.externals import cloudpickle  # type: ignore[no-redef,import-untyped]

try:
    import numpy as np
except ImportError:  # joblib works without numpy; so does the backend (no memmapping)
    np = None  # type: ignore[assignment]

PROTOCOL = 5  # results: out-of-band buffers, so an array is copied once into the frame


def _register_here() -> None:
    import pipepool.joblib  # noqa: F401  (registers "pipepool" in this process)


class _Job:
    """A joblib batch on its way to a worker. Pickled (in pipepool's driver thread, when
    it is dispatched) with cloudpickle and joblib's memmapping reducers, as loky sends
    it; unpickling it in a worker (``_load_job``) registers the backend there."""

    __slots__ = ("batch", "reducers")

    def __init__(self, batch: Callable[[], list], reducers: dict | None) -> None:
        self.batch = batch
        self.reducers = reducers

    def __reduce__(self):
        try:
            payload = loky_dumps(self.batch, reducers=self.reducers)
        except Exception as exc:  # loky's words, so code matching them keeps working
            raise pickle.PicklingError(
                f"Could not pickle the task to send it to the workers: {type(exc).__name__}: {exc}"
            ) from exc
        return (_load_job, (pickle.PickleBuffer(payload),))

    def __call__(self) -> _Results:
        return _Results(self.batch())

    def __repr__(self) -> str:
        return f"<joblib batch {self.batch!r}>"


def _load_job(payload: bytes) -> _Job:
    _register_here()
    return _Job(pickle.loads(payload), None)


class _Results:
    """A batch's results on their way back: cloudpickled (as loky returns them), arrays
    out of band (one copy into the frame, not loky's nested pickle), an array backed by
    a user's memmap sent back as that memmap (joblib's backward reducer)."""

    __slots__ = ("values",)

    def __init__(self, values: list) -> None:
        self.values = values

    def __reduce__(self):
        buffers: list[pickle.PickleBuffer] = []
        out = io.BytesIO()
        _ResultPickler(out, protocol=PROTOCOL, buffer_callback=buffers.append).dump(self.values)
        return (_load_results, (pickle.PickleBuffer(out.getbuffer()), *buffers))


class _ResultPickler(cloudpickle.CloudPickler):
    def reducer_override(self, obj: Any) -> Any:
        if np is not None and isinstance(obj, np.ndarray):
            m = _get_backing_memmap(obj)
            if isinstance(m, np.memmap) and m.filename not in JOBLIB_MMAPS:
                return reduce_array_memmap_backward(obj)
        return super().reducer_override(obj)


def _load_results(payload: bytes, *buffers: Any) -> list:
    """Runs in the parent: the future's result is the plain list joblib expects."""
    return pickle.loads(payload, buffers=buffers)


class _Cloudpickled:
    """An initializer (or any callable) sent with cloudpickle: lambdas work under spawn."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __reduce__(self):
        return (_load_cloudpickled, (cloudpickle.dumps(self.fn),))

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


def _load_cloudpickled(payload: bytes) -> _Cloudpickled:
    _register_here()
    return _Cloudpickled(cloudpickle.loads(payload))


def _worker_init(env: dict[str, str], initializer: Callable | None, initargs: tuple) -> None:
    """Every worker's initializer: thread limits as loky sets them, then the user's."""
    os.environ.update(env)  # BLAS/OpenMP libraries loaded from now on read these
    _limit_loaded_threadpools(env)
    if initializer is not None:
        initializer(*initargs)


def _limit_loaded_threadpools(env: dict[str, str]) -> None:
    # A forked worker inherits libraries its parent loaded already, which read the
    # environment only once: threadpoolctl (a joblib dependency of scikit-learn) limits
    # them at run time when it is installed.
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]
    except ImportError:
        return
    threadpool_limits(limits=int(env.get("OMP_NUM_THREADS", "1")))
