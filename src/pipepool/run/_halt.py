"""``--halt``: when to stop a run early, in GNU parallel's words.

``never`` (default); ``soon,fail=N``: start no new job once N jobs failed, let running
ones finish; ``now,fail=N``: kill the running ones too. ``success=N`` and ``done=N``
count successes or finished jobs instead; ``N%`` is a share of all jobs. The legacy
``0``, ``1``, ``2`` mean never, ``soon,fail=1`` and ``now,fail=1``.
"""

from __future__ import annotations

from dataclasses import dataclass

LEGACY = {"0": "never", "1": "soon,fail=1", "2": "now,fail=1"}


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

    def __str__(self) -> str:
        if self.when == "never":
            return "never"
        count = f"{self.count:g}%" if self.percent else f"{self.count:g}"
        return f"{self.when},{self.what}={count}"


def parse_halt(text: str) -> Halt:
    """``"soon,fail=3"`` → ``Halt("soon", "fail", 3)``; ValueError with a usable message."""
    spec = LEGACY.get(text.strip(), text.strip())
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
