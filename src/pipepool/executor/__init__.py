"""The executor room: ``LocalExecutor``, the parent's bookkeeping of tasks and workers
(docs/design.md, "The round"), and ``RecordExecutor``, the LocalExecutor of a face that
keeps its own task records (ProcessPoolExecutor): its public verbs are that face's seam,
typed by the face's record class (``RecordExecutor[Record]``), so the type checker proves
that what the face hands over is what it takes back.

This module only names what the room offers; the code is in its parts:

* ``_local.py``: LocalExecutor, its public API and the round, in ``LocalCore``: the same
  body generic in the task record type (``pipepool._task.TaskT``), which both share;
* ``_records.py``: RecordExecutor, outcomes as the face's own records, and the verbs;
* ``_state.py``: the state, declared once (``LocalState``), and ``_Worker``, each generic
  in the record type as every step is;
* the steps of a round: ``_collect.py``, ``_reap.py`` (and ``_death.py``, why a worker
  died), ``_lifecycle.py``, ``_dispatch.py``; the policy ``_depth.py``; the verbs of an
  event loop that drives it from outside, ``_outside.py``;
* ``_cancel.py``: the stopping of tasks (cancel the unstarted, kill, time out).
"""

from __future__ import annotations

from ._lifecycle import INIT_BACKOFF as INIT_BACKOFF  # re-exported: the names tests and users know
from ._lifecycle import INIT_RETRIES as INIT_RETRIES
from ._lifecycle import STOP_GRACE as STOP_GRACE
from ._local import START_POLL as START_POLL
from ._local import STARTUP_POLL as STARTUP_POLL
from ._local import TERM_GRACE as TERM_GRACE
from ._local import LocalExecutor as LocalExecutor
from ._reap import EXIT_GRACE as EXIT_GRACE
from ._reap import REAP_INTERVAL as REAP_INTERVAL
from ._records import RecordExecutor as RecordExecutor
