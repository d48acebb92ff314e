"""Structured logging: JSON lines in containers and pipes, readable colour on a
terminal, and secrets redacted before anything is rendered; and the two ways a
repeated warning is kept from flooding the log (every occurrence is counted in
the metrics regardless):

- ``worth_logging``, for what the fleet sends (rejected frames, refused
  counters): the first few occurrences in full, then one line every thousand;
- ``Episode``, for what an attacker can repeat a million times a minute
  (refused requests, failed accepts): one line when an episode starts, one a
  minute while it lasts, one when it ends, each saying how many it stands for,
  so a flood costs a few JSON lines, never a line (or a traceback) an attempt.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import Any, Final

import structlog

LOG_FIRST: Final = 5  # occurrences of a repeated warning logged in full before sampling
LOG_EVERY: Final = 1_000  # then one line every this many

_SECRET_WORDS: Final = ("password", "secret", "token", "passwd", "credential")
_LEVELS: Final = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def worth_logging(before: int, after: int) -> bool:
    """Return whether going from ``before`` to ``after`` occurrences of a repeated warning deserves a line: the
    first ``LOG_FIRST``, then one every ``LOG_EVERY`` (every one is counted in the metrics regardless)."""
    return before < LOG_FIRST or after // LOG_EVERY > before // LOG_EVERY


def redact_secrets(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Replace the value of every key that names a secret with ``***``."""
    for key in event:
        if any(word in key.lower() for word in _SECRET_WORDS):
            event[key] = "***"
    return event


def _stderr_logger(*_args: object) -> structlog.PrintLogger:
    """Return a logger writing to the process's stderr as it is now, not as it was when logging was set up
    (a CLI run in process by a test, or a redirected stderr, must not leave loggers on a closed file)."""
    return structlog.PrintLogger(sys.stderr)


def configure_logging(*, log_format: str, level: str) -> None:
    """Configure structlog for the process; ``auto`` means console on a TTY."""
    use_json = log_format == "json" or (log_format == "auto" and not sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer()
    )
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]
    if use_json:
        processors.append(structlog.processors.format_exc_info)
    processors.append(renderer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )

# While an episode lasts, a reminder this often, so a long one is visible in the log's recent past.
_REMIND_EVERY_S: Final = 60.0


class Episode:
    """Logs ``event`` at the first occurrence, a reminder at most once a minute, and ``ended`` once ``end()``
    is called after occurrences (or, without ``end()``, the next occurrence after a quiet minute)."""

    def __init__(self, logger: Any, event: str, *, ended: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log: structlog.typing.FilteringBoundLogger = logger
        self._event, self._ended, self._clock = event, ended, clock
        self._logged_at: float | None = None  # when the last line was written; None outside an episode
        self._unlogged = 0  # occurrences since that line

    def occurred(self, **fields: object) -> None:
        """Count one occurrence, logging it if it starts an episode or a minute has passed since the last line."""
        now = self._clock()
        self._unlogged += 1
        if self._logged_at is None or now - self._logged_at >= _REMIND_EVERY_S:
            self._log.warning(self._event, occurrences=self._unlogged, **fields)
            self._logged_at, self._unlogged = now, 0

    def end(self) -> None:
        """Close the episode if one is open, logging ``ended`` with the occurrences not yet logged."""
        if self._logged_at is None:
            return
        if self._ended is not None:
            self._log.info(self._ended, occurrences=self._unlogged)
        self._logged_at, self._unlogged = None, 0
