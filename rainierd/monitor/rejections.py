"""Rejected frames, and counters refused over their bounds, in the log
without flooding it: the first few of each reason in full, then one line
every thousand (every one is counted in the metrics regardless).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import structlog

from rainierd.runtime import worth_logging

log = structlog.get_logger("rainierd.monitor")

class RejectionLog:
    """Counts rejections by reason and logs them sampled."""

    def __init__(self) -> None:
        self._seen: Counter[str] = Counter()
        self._refused: Counter[tuple[str, str, str]] = Counter()

    def one(self, reason: str, *, topic: str, detail: str) -> None:
        """Log one rejected payload, with its topic and why (both truncated: they are the sender's words)."""
        before = self._seen[reason]
        self._seen[reason] += 1
        if worth_logging(before, before + 1):
            log.warning("frame rejected", reason=reason, topic=topic[:200], detail=detail[:200],
                        occurrences=before + 1)

    def window(self, rejected: Mapping[str, int]) -> None:
        """Log the rejections of one analysed window, by reason."""
        for reason, count in rejected.items():
            before = self._seen[reason]
            self._seen[reason] += count
            if worth_logging(before, self._seen[reason]):
                log.warning("frames rejected", reason=reason, count=count, occurrences=self._seen[reason])

    def counters(self, refused: Mapping[tuple[str, str, str], int]) -> None:
        """Log the counters one analysed window refused over their bounds, by (kind, field, reason)."""
        for (kind, name, reason), count in refused.items():
            before = self._refused[kind, name, reason]
            self._refused[kind, name, reason] += count
            if worth_logging(before, before + count):
                log.warning("counter refused", kind=kind, field=name, reason=reason, count=count,
                            occurrences=before + count)
