"""``--halt``: when to stop a run early, and the exit status then, in GNU parallel's words.

``never`` (default); ``soon,fail=N``: start no new job once N jobs failed, let running
ones finish; ``now,fail=N``: kill the running ones too. ``success=N`` and ``done=N``
count successes or finished jobs instead; ``N%`` is a share of all jobs. The legacy
``0``, ``1``, ``2``, ``-1``, ``-2`` mean never, ``soon,fail=1``, ``now,fail=1``,
``soon,success=1``, ``now,success=1``, and a bare ``N%`` means ``soon,fail=N%``.

The condition is checked after each finished job, before any other job starts (the
runner feeds no job ahead while a halt is set): once it is met, no job starts. The exit
status is decided at that moment, as GNU parallel 20221122 decides it (its
``should_we_halt``): ``fail=1``/``done=1`` give the deciding job's own status,
``fail=N``/``done=N`` the failures so far (at most 101), ``N%`` those failures as a
percentage of all jobs (rounded up), ``success`` 0. A percentage that is never reached
still makes the exit status a percentage: of the jobs that ran.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

LEGACY = {
    "0": "never",
    "1": "soon,fail=1",
    "2": "now,fail=1",
    "-1": "soon,success=1",
    "-2": "now,success=1",
}
MAX_EXIT = 101  # GNU parallel: "101: more than 100 jobs failed"


@dataclass(frozen=True, slots=True)
class Halt:
    when: str = "never"  # "never", "soon" or "now"
    what: str = "fail"  # "fail", "success" or "done"
    count: float = 1
    percent: bool = False

    def reached(self, *, failed: int, succeeded: int, total: int) -> bool:
        if self.when == "never":
            return False
        seen = {"fail": failed, "success": succeeded, "done": failed + succeeded}[self.what]
        if self.percent:
            return total > 0 and seen * 100 >= self.count * total and seen > 0
        return seen >= self.count

    def status_when_reached(self, *, failed: int, total: int, exitval: int, signal: int) -> int:
        """The exit status a run halted by this condition ends with: decided by the
        finished job that met it (``exitval``, ``signal``), ``failed`` jobs so far out
        of ``total``."""
        if self.what == "success":
            return 0
        if self.percent:
            return math.ceil(failed * 100 / total) if total else 0
        if self.count == 1:  # the deciding job's own status, as a shell's pipefail
            if exitval > 0:
                return min(exitval, 255)
            return 128 + signal if signal else (1 if exitval else 0)
        return min(failed, MAX_EXIT)

    def status_not_reached(self, *, failed: int, ran: int) -> int:
        """The exit status of a run this condition never stopped."""
        if self.when != "never" and self.percent:
            return math.ceil(failed * 100 / ran) if ran else 0
        return min(failed, MAX_EXIT)

    def __str__(self) -> str:
        if self.when == "never":
            return "never"
        count = f"{self.count:g}%" if self.percent else f"{self.count:g}"
        return f"{self.when},{self.what}={count}"


def parse_halt(text: str) -> Halt:
    """``"soon,fail=3"`` → ``Halt("soon", "fail", 3)``; ValueError with a usable message."""
    spec = LEGACY.get(text.strip(), text.strip())
    if re.fullmatch(r"\d+(\.\d+)?%", spec):
        spec = f"soon,fail={spec}"
    if spec == "never":
        return Halt()
    when, _, condition = spec.partition(",")
    what, _, number = condition.partition("=")
    if when not in ("soon", "now") or what not in ("fail", "success", "done"):
        raise ValueError(f"--halt {text!r}: expected never, soon|now,fail|success|done=N[%]")
    percent = number.endswith("%")
    try:
        count = float(number.rstrip("%"))
    except ValueError:
        raise ValueError(f"--halt {text!r}: {number!r} is not a number") from None
    if count <= 0 or (percent and count > 100):
        raise ValueError(f"--halt {text!r}: the count must be above 0 (and at most 100%)")
    return Halt(when, what, count, percent)
