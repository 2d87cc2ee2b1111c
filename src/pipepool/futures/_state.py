"""The state a ProcessPoolExecutor's driver shares between the pool (user threads), the
token holder and the driver thread, declared once in ``DriverState.__init__``; the
steps are ``_round.py`` (what the token holder does) and ``_driver.py`` (who holds it).

What a reader can list, the pool's states:

* ``stage`` (``Stage``): what was asked of the pool, and it only moves forward: OPEN
  (taking work), FINISHING (``shutdown()``: the submitted work finishes, then the pool
  stops), TERMINATING (``terminate_workers()``, Ctrl-C, the exit hook: stop now).
* ``loop_closed``: the token holder closed the LocalExecutor (the last step of a stage
  other than OPEN, or a crash); from then on nobody touches it.
* ``feed`` (``Feed``): whether a submit must wake the token holder: FED (it took all
  pending work: yes), FRESH (it was told of pending work it has not fed yet) or FULL
  (it stopped at capacity: a result brings it back, so no).
* The token: ``poller`` (the thread that holds it, or None), ``want`` (callers blocked
  until it is free), ``asked`` (a caller asked the driver thread for it), and whether the
  driver thread lingers: ``linger`` (callers drive; it looks within LINGER of the
  token's release instead of being woken by each submit) with ``caller_drove`` (when a
  caller last took or freed the token: LINGER_IDLE after it, the driver sleeps again),
  and ``parked`` (it sleeps with no timeout: whoever leaves it work must notify it).
"""

from __future__ import annotations

import enum
import itertools
import threading
from collections import deque
from typing import TYPE_CHECKING, Any, cast

from ._item import Record
from ._map import MapCalls
from ._seam import Executor

if TYPE_CHECKING:
    from ._driver import Driver


class Stage(enum.IntEnum):
    """What was asked of the pool; it only moves forward."""

    OPEN = 0  # taking work
    FINISHING = 1  # shutdown(): no new work; the submitted work finishes, then it stops
    TERMINATING = 2  # terminate_workers(), Ctrl-C or the exit hook: stop now


class Feed(enum.Enum):
    """Whether a submit must wake the token holder to feed what it adds."""

    FED = "fed"  # the last feed took every pending call: a new one must be told
    FRESH = "fresh"  # pending holds calls the holder was told of but has not fed yet
    FULL = "full"  # the last feed stopped at capacity: a result brings the holder back


# The members as plain names: ``Stage.OPEN`` is a look-up through the enum class's own
# machinery (about 60 ns on Python 3.11, against 6 for a module name), and these are
# read on every submit and round.
OPEN, FINISHING, TERMINATING = Stage
FED, FRESH, FULL = Feed


class Shared:
    """Process-wide state the exit hook sets and every pool reads."""

    live_drivers: set[Driver] = set()  # drivers with a live thread, for the exit hook
    global_shutdown = False  # the interpreter is finalizing


class DriverState:
    """State shared by a pool (user threads), its token holder and its driver thread.

    Under ``lock``: every field but ``kill_on_start`` (token holder's). Kept apart from
    the pool object so the thread does not keep the pool alive: a pool that is garbage
    collected shuts down like ``shutdown(wait=False)``.
    """

    def __init__(self, executor: Executor, capacity: int) -> None:
        self.executor = executor  # not thread-safe: only the token holder touches it
        self.capacity = capacity  # calls handed over at most, at dispatch depth 1
        self.workers = executor.parallelism  # each gets depth - 1 more at a deeper depth
        # Re-entrant: a weakref callback (pool collected) may fire in any thread while
        # it holds the lock, and the stdlib's wait() takes each future's lock in turn.
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)  # futures done, or the token free
        self.driver_cond = threading.Condition(self.lock)  # work for the driver thread
        # -- the pool's states (module docstring) ------------------------------------------
        self.stage = OPEN
        self.loop_closed = False
        self.feed = FED
        self.broken: BaseException | None = None  # the pool is broken for good (stdlib)
        # -- the token ----------------------------------------------------------------------
        self.poller: int | None = None  # the thread holding the token
        self.want = 0  # callers blocked until the token is free
        self.asked = False  # a caller waited for the token the driver thread holds: the
        # driver gives it up at the end of its turn, even if that caller's future was
        # settled meanwhile (it will want the token again: callers drive, the driver lingers)
        self.linger = False  # callers drive: the driver looks within LINGER, unwoken
        self.parked = False  # the driver thread sleeps until notified (no timeout): who
        # leaves it something to do while it lingers notifies it (``Driver._look_in``)
        self.caller_drove = 0.0  # monotonic time a caller last took the token
        self.thread: threading.Thread | None = None  # the driver thread, once made
        self.launched = threading.Event()  # its start() returned, or failed
        self.launch_error: BaseException | None = None  # why it could not start
        self.stopped = threading.Event()  # run() returned
        self.driver_ident: int | None = None  # its ident, once it runs
        # -- the work -----------------------------------------------------------------------
        # The work: each call is one record (``_item``), from submit() to its outcome.
        self.keys = itertools.count(1)  # record numbers (the LocalExecutor's tids)
        self.pending: deque[Record | MapCalls] = deque()  # submitted, not yet handed
        # over (PENDING): records, and a map's calls not yet made into records (MapCalls)
        self.sources = 0  # how many MapCalls ``pending`` holds (feed's fast path: none)
        self.commands: deque[tuple[str, Record]] = deque()  # (SUBMIT_*, record): holder's
        self.running: set[Record] = set()  # handed to the LocalExecutor, not settled
        self.kill_on_start: set[Record] = set()  # kill requested before the task started
        self.cancelling: dict[Record, float] = {}  # -> deadline: a cancel() waits for the
        # LocalExecutor's word on a future handed over (SUBMIT_CANCEL, then its record)
        self.callbacks_due: deque[Record] = deque()  # settled, callbacks not yet run
        self.pids: tuple[int, ...] = ()  # live worker pids, as of a round PIDS_EVERY ago
        self.pids_due = 0.0  # monotonic time the next turn looks at them again
        self.pool_ref: Any = None  # weakref.ref whose callback shuts down a lost pool

    def _advance(self, stage: Stage) -> None:
        """Ask more of the pool: a stage is never taken back (lock held)."""
        self.stage = max(self.stage, stage)

    def drain_pending(self) -> list[Record]:
        """Take every pending (never handed over) record out of the queue (lock held); a
        map's calls not made yet are made into records first, so they are cancelled or
        failed as any other."""
        taken: list[Record]
        if not self.sources:
            taken = cast(list[Record], list(self.pending))
        else:
            taken = []
            for t in self.pending:
                if type(t) is MapCalls:
                    taken.extend(t.take(len(t.calls)))
                else:
                    taken.append(cast(Record, t))
            self.sources = 0
        self.pending.clear()
        return taken

    def _room(self) -> int:
        """Calls the LocalExecutor may hold: ``capacity`` at dispatch depth 1, and
        ``depth - 1`` more per worker at a deeper adaptive depth."""
        return self.capacity + self.workers * (self.executor.dispatch_depth - 1)

    def _outstanding(self) -> bool:
        """Work for a token holder: calls pending or running, commands, callbacks due,
        or a terminate to carry out (lock held)."""
        return bool(
            self.pending
            or self.running
            or self.commands
            or self.callbacks_due
            or self.stage is TERMINATING
        )
