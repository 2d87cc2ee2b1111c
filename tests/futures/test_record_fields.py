"""A futures record is a LocalExecutor task (``futures/_item.py``): ``Record.__init__``
makes ``Task.__init__``'s stores itself, in one frame (one Python call per record on the
path of every submit and map call), so it must set every field a task sets, to the same
value. A field added to ``Task`` and not to ``Record`` fails here, before a record lacks
it in the driver (an AttributeError there breaks the pool)."""

from __future__ import annotations

import threading

import pytest

from pipepool._task import NO_KWARGS, Task
from pipepool.futures._item import PoolFuture
from pipepool.futures._map import MapItem


class _Driver:
    """What ``Record.__init__`` reads of its driver: the pool's condition."""

    cond = threading.Condition()


def _fields(obj: object) -> dict[str, object]:
    return {name: getattr(obj, name) for name in Task.__slots__ if hasattr(obj, name)}


@pytest.mark.parametrize("record_type", [MapItem, PoolFuture])
@pytest.mark.parametrize("kwargs", [{}, {"sep": ","}])
@pytest.mark.parametrize("timeout", [None, 2.5])
def test_a_record_sets_every_task_field_as_a_task_does(record_type, kwargs, timeout):
    args = (1, 2)
    task = Task(7, 7, print, args, kwargs, timeout)
    record = record_type(_Driver(), 7, print, args, kwargs, timeout)
    assert _fields(record) == _fields(task)
    assert (record.kwargs is NO_KWARGS) == (task.kwargs is NO_KWARGS)
