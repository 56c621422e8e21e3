"""Progress on standard error for the long ``loaderx`` commands."""

from __future__ import annotations

import time
from typing import TextIO


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Reports ``(done, total)`` of a long operation on `stream`: a bar
    redrawn in place with rate and ETA when `stream` is a terminal, else
    one plain line every `interval` seconds (and one at the end)."""

    def __init__(
        self,
        label: str,
        stream: TextIO,
        *,
        enabled: bool = True,
        tty: bool | None = None,
        interval: float | None = None,
        unit: str = "records",
    ) -> None:
        self.label = label
        self.stream = stream
        self.enabled = enabled
        self.tty = stream.isatty() if tty is None else tty
        self.interval = interval if interval is not None else (0.1 if self.tty else 5.0)
        self.unit = unit
        self.start = time.monotonic()
        self.last = -float("inf")
        self.done = 0
        self.total: int | None = None
        self.drawn = False

    def __call__(self, done: int, total: int | None) -> None:
        self.done, self.total = done, total
        now = time.monotonic()
        if self.enabled and now - self.last >= self.interval:
            self.last = now
            self._show(now)

    def _rate(self, now: float) -> float:
        elapsed = now - self.start
        return self.done / elapsed if elapsed > 0 else 0.0

    def _show(self, now: float) -> None:
        rate = self._rate(now)
        total = self.total
        if total:
            frac = min(1.0, self.done / total)
            eta = _duration((total - self.done) / rate) if rate > 0 else "?"
            counts = f"{self.done:,}/{total:,} {self.unit}"
        else:
            frac, eta = None, "?"
            counts = f"{self.done:,} {self.unit}"
        if self.tty:
            width = 30
            if frac is None:
                bar = ""
            else:
                filled = int(frac * width)
                bar = f"[{'#' * filled}{'.' * (width - filled)}] {frac * 100:5.1f}% "
            line = f"\r{self.label}: {bar}{counts} {rate:,.0f}/s ETA {eta}\x1b[K"
            self.stream.write(line)
            self.drawn = True
        else:
            pct = "" if frac is None else f" ({frac * 100:.1f}%)"
            self.stream.write(
                f"{self.label}: {counts}{pct}, {rate:,.0f} {self.unit}/s, ETA {eta}\n"
            )
        self.stream.flush()

    def finish(self) -> float:
        """Ends the display (a last line); returns the seconds taken."""
        now = time.monotonic()
        elapsed = now - self.start
        if self.enabled:
            if self.tty and self.drawn:
                self.stream.write("\r\x1b[K")
            rate = self._rate(now)
            self.stream.write(
                f"{self.label}: {self.done:,} {self.unit} in {elapsed:.2f}s "
                f"({rate:,.0f} {self.unit}/s)\n"
            )
            self.stream.flush()
        return elapsed


# --- finding and describing stores ---------------------------------------------------------


