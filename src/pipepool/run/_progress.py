"""The live progress bar: one line on a terminal's stderr, redrawn in place.

Shown only when the stream is a terminal. Job output goes out between redraws: the
runner calls ``clear()`` before it writes a job's output, so a bar never ends up in the
middle of a line, and the next ``update`` draws it again below.
"""

from __future__ import annotations

import shutil
import time
from typing import TextIO

REDRAW_INTERVAL = 0.1  # s between redraws: smooth to the eye, and no measurable cost at
# thousands of jobs per second (a redraw is one write of one line)


class Progress:
    def __init__(self, total: int, stream: TextIO, *, enabled: bool) -> None:
        self.total = total
        self.stream = stream
        self.enabled = enabled
        self.started = time.monotonic()
        self._drawn = False
        self._last = 0.0

    def update(self, done: int, failed: int, running: int, *, note: str = "",
               force: bool = False) -> None:
        """Redraw (at most every REDRAW_INTERVAL unless ``force``)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < REDRAW_INTERVAL:
            return
        self._last = now
        width = shutil.get_terminal_size((80, 24)).columns
        line = render(done, failed, running, self.total, now - self.started, width, note)
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

    def finish(self, done: int, failed: int) -> None:
        """Draw the final frame and leave it on screen, above the summary."""
        if self.enabled:
            self.update(done, failed, 0, force=True)
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


def render(done: int, failed: int, running: int, total: int, elapsed: float, width: int,
           note: str = "") -> str:
    """The bar's text, at most ``width`` columns, e.g.
    ``[#########.....]  612/1000  61% | 2 running | 3 failed | 311.2 jobs/s | ETA 0:01``."""
    fraction = done / total if total else 1.0
    rate = done / elapsed if elapsed > 0 and done else 0.0
    if done >= total:
        eta = "0:00"
    elif rate > 0:
        eta = _clock((total - done) / rate)
    else:
        eta = "--:--"
    fields = [f"{done}/{total}", f"{fraction:4.0%}", f"{running} running"]
    if failed:
        fields.append(f"{failed} failed")
    fields += [_rate(rate), f"ETA {eta}", f"{_clock(elapsed)} elapsed"]
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
    if rate >= 10 or rate == 0:
        return f"{rate:.0f} jobs/s" if rate >= 100 else f"{rate:.1f} jobs/s"
    return f"{rate * 60:.1f} jobs/min" if rate < 1 else f"{rate:.2f} jobs/s"


def _clock(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
