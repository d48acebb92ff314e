"""Structured logging: JSON lines in containers and pipes, readable colour on a
terminal, and secrets redacted before anything is rendered.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, Final

import structlog

__all__ = ["LOG_EVERY", "LOG_FIRST", "configure_logging", "redact_secrets", "worth_logging"]

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
