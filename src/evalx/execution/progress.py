"""Progress on long runs: a live line on a terminal, a line a minute otherwise.

The live line's ``\r`` and erase-line are evalx's own terminal controls:
they go through :func:`evalx.results.display.write_controls`, the one way past the
terminal-safe stderr the command line installs.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from evalx.results.display import write_controls


class Progress:
    def __init__(self, total: int, *, stream: TextIO | None = None, quiet: bool = False, interval_s: float | None = None) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval_s if interval_s is not None else (0.1 if self.tty else 60.0)
        self.done = 0
        self.counts = {"pass": 0, "fail": 0, "error": 0, "skipped": 0}
        self.started = time.monotonic()
        self._last = self.started
        #: batch mode's line (submitted, in progress, done, ETA), shown with the cells'
        self.batch: str | None = None

    def update(self, status: str) -> None:
        self.done += 1
        self.counts[status] = self.counts.get(status, 0) + 1
        if self.quiet:
            return
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._emit(now)

    def note(self, batch: str) -> None:
        """Batch mode's progress: on a terminal in the live line; otherwise a line when it changes, at most one a minute."""
        changed = batch != self.batch
        first = self.batch is None
        self.batch = batch
        if self.quiet or not changed:
            return
        now = time.monotonic()
        if first or now - self._last >= self.interval:
            self._last = now
            self._emit(now)

    def _line(self, now: float) -> str:
        elapsed = now - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        c = self.counts
        parts = f"{c['pass']} pass, {c['fail']} fail, {c['error']} error, {c['skipped']} skipped"
        if self.tty:
            width = 24
            filled = int(width * self.done / self.total) if self.total else width
            bar = "█" * filled + "·" * (width - filled)
            eta = (self.total - self.done) / rate if rate > 0 else 0
            batch = f"  {self.batch}" if self.batch else ""
            return f"\r{bar} {self.done}/{self.total} cells  {parts}  {rate:.0f}/s  eta {eta:.0f}s{batch}\x1b[K"
        batch = f"; {self.batch}" if self.batch else ""
        return f"evalx: {self.done}/{self.total} cells ({parts}) after {elapsed:.0f}s{batch}\n"

    def _emit(self, now: float) -> None:
        if self.tty:
            write_controls(self.stream, self._line(now))
        else:
            self.stream.write(self._line(now))
        self.stream.flush()

    def close(self) -> None:
        if self.quiet:
            return
        if self.tty:
            write_controls(self.stream, "\r\x1b[K")
            self.stream.flush()
