"""Progress of a long benchmark on stderr, so a run of minutes to an hour is
not silence: on a terminal one bar redrawn in place, otherwise (a log, a CI
job, a pipe) one line per step.  stdout stays the report's alone.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

__all__ = ["Progress"]

_BAR = 24


class Progress:
    """Steps of one benchmark, ``total`` of them when known, each weighted by its ``work`` for the estimate
    of the time left; every line or bar starts with ``prefix`` (e.g. ``"bench ingest: "``)."""

    def __init__(self, total: int | None = None, *, prefix: str = "", stream: TextIO | None = None,
                 tty: bool | None = None) -> None:
        self.total = total
        self.prefix = prefix
        self.stream = sys.stderr if stream is None else stream
        self.tty = self.stream.isatty() if tty is None else tty
        self.done = 0
        self._started = time.perf_counter()
        self._drawn = False

    def elapsed_s(self) -> float:
        """Return the seconds since the progress began."""
        return time.perf_counter() - self._started

    def note(self, message: str) -> None:
        """Say ``message`` without counting a step (what starts now, a result): a line of its own."""
        self._clear()
        print(f"{self.prefix}{message}", file=self.stream, flush=True)

    def step(self, message: str, *, left_fraction: float | None = None) -> None:
        """Count one step done and show ``message``; with ``left_fraction`` (of the whole work, 0..1) also
        the elapsed time and an estimate of the time left."""
        self.done += 1
        if left_fraction is not None:
            elapsed = self.elapsed_s()
            left = elapsed * left_fraction / (1 - left_fraction) if left_fraction < 1 else 0.0
            message = f"{message}, elapsed {elapsed:.0f} s, about {left:.0f} s left"
        if not self.tty:
            print(f"{self.prefix}{message}", file=self.stream, flush=True)
            return
        bar = ""
        if self.total:
            filled = min(_BAR, _BAR * self.done // self.total)
            bar = f"[{'#' * filled}{'.' * (_BAR - filled)}] "
        width = shutil.get_terminal_size((100, 24)).columns - 1
        self.stream.write(f"\r{self.prefix}{bar}{message}"[: width + 1].ljust(width + 1))
        self.stream.flush()
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self._drawn = False

    def close(self) -> None:
        """End the bar's line, so what follows starts on its own."""
        self._clear()
        self.stream.flush()
