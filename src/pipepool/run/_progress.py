"""The live progress bar: one line on a terminal's stderr, redrawn in place.

Shown only when the stream is a terminal. Job output goes out between redraws: the
runner calls ``clear()`` before it writes a job's output, so a bar never ends up in the
middle of a line, and the next ``update`` draws it again below.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TextIO

REDRAW_INTERVAL = 0.1  # s between redraws: smooth to the eye, and no measurable cost at
# thousands of jobs per second (a redraw is one write of one line)
STRAGGLER = 2.0  # a running job older than this many mean runtimes (plus a second) makes
# the ETA unknown: it may end any moment or never, and a number would be a guess


class Progress:
    def __init__(self, total: int, stream: TextIO, *, enabled: bool) -> None:
        self.total = total
        self.stream = stream
        self.enabled = enabled
        self.started = time.monotonic()
        self._drawn = False
        self._last = 0.0

    def due(self) -> bool:
        """Whether an ``update`` now would redraw (so callers skip gathering its data)."""
        return self.enabled and time.monotonic() - self._last >= REDRAW_INTERVAL

    def update(
        self,
        done: int,
        failed: int,
        running_ages: Sequence[float] = (),
        *,
        mean_runtime: float = 0.0,
        note: str = "",
        force: bool = False,
        final: bool = False,
    ) -> None:
        """Redraw (at most every REDRAW_INTERVAL unless ``force``). ``running_ages``:
        how long each running job has run; ``mean_runtime`` of the finished ones."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < REDRAW_INTERVAL:
            return
        self._last = now
        elapsed = now - self.started
        eta = None if final else estimate(done, self.total, elapsed, mean_runtime, running_ages)
        line = render(
            done,
            failed,
            len(running_ages),
            self.total,
            elapsed,
            self._width(),
            note,
            eta,
            show_eta=not final,
        )
        self.stream.write("\r" + line + "\x1b[K")
        self.stream.flush()
        self._drawn = True

    def clear(self) -> None:
        """Erase the bar (before job output or the summary is written)."""
        if self.enabled and self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False
            self._last = 0.0  # the next update draws at once

    def finish(self, done: int, failed: int, *, note: str = "") -> None:
        """Draw the final frame (no ETA) and leave it on screen, above the summary."""
        if self.enabled:
            self.update(done, failed, note=note, force=True, final=True)
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def _width(self) -> int:
        # The width of the terminal the bar is drawn on (stdout may be a file or a pipe).
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            return 80


def estimate(
    done: int, total: int, elapsed: float, mean_runtime: float, running_ages: Sequence[float]
) -> float | None:
    """Seconds left, or None when there is no honest number yet.

    While jobs wait to start, the throughput so far decides: (waiting + running) / rate.
    Once all have started, the youngest running job decides (it will likely end last):
    the mean runtime minus its age; but a job running far past the mean makes it unknown.
    """
    if done >= total:
        return 0.0
    if done == 0 or elapsed <= 0:
        return None
    left = total - done
    if left > len(running_ages):
        return left / (done / elapsed)
    if max(running_ages, default=0.0) > STRAGGLER * mean_runtime + 1.0:
        return None
    return max(mean_runtime - min(running_ages, default=0.0), 0.0)


def render(
    done: int,
    failed: int,
    running: int,
    total: int,
    elapsed: float,
    width: int,
    note: str = "",
    eta: float | None = None,
    *,
    show_eta: bool = True,
) -> str:
    """The bar's text, at most ``width`` - 1 columns, e.g.
    ``[#########.....] 612/1000 |  61% | 2 running | 311 jobs/s | ETA 0:01 | 0:02 elapsed``."""
    fraction = done / total if total else 1.0
    rate = done / elapsed if elapsed > 0 and done else 0.0
    fields = [f"{done}/{total}", f"{fraction:4.0%}", f"{running} running"]
    if failed:
        fields.append(f"{failed} failed")
    fields.append(_rate(rate))
    if show_eta:
        fields.append(f"ETA {'--:--' if eta is None else _clock(eta)}")
    fields.append(f"{_clock(elapsed)} elapsed")
    if note:
        fields.append(note)
    text = " | ".join(fields)
    room = width - len(text) - 4  # "[", "] " and a column to spare at the right edge
    if room >= 10:
        bar_width = min(room, 40)
        filled = int(bar_width * fraction)
        text = "[" + "#" * filled + "." * (bar_width - filled) + "] " + text
    return text[: max(width - 1, 0)]


def _rate(rate: float) -> str:
    if rate >= 100:
        return f"{rate:.0f} jobs/s"
    if rate >= 1 or rate == 0:
        return f"{rate:.1f} jobs/s"
    return f"{rate * 60:.1f} jobs/min"


def _clock(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
