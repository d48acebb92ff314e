"""What every rainierd process runs on, whatever its role: the lifecycle (one
stop event, one TaskGroup of named tasks), the tick schedule, the event loop's
lag and its histogram, the drop-oldest queue, structured logs and the episode
logger, the probes' verdicts, and the allocator's handling of freed memory.
It imports nothing of rainierd above ``_start``, ``errors`` and ``_types``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rainierd.runtime.dropqueue import DropOldestQueue
    from rainierd.runtime.histogram import Histogram, LagHistogram
    from rainierd.runtime.lifecycle import run_until_stopped
    from rainierd.runtime.logs import Episode, configure_logging, worth_logging
    from rainierd.runtime.looplag import LoopLag
    from rainierd.runtime.malloc import keep_freed_memory, release_freed_memory
    from rainierd.runtime.probes import Verdict
    from rainierd.runtime.schedule import Schedule

# The face is lazy: each name is imported from its module when first asked for, so a small command that needs
# one leaf (``rainierd healthcheck`` and its probes' verdicts) does not load numpy and structlog with the rest.
_HOMES = {
    "DropOldestQueue": "dropqueue",
    "Episode": "logs",
    "Histogram": "histogram",
    "LagHistogram": "histogram",
    "LoopLag": "looplag",
    "Schedule": "schedule",
    "Verdict": "probes",
    "configure_logging": "logs",
    "keep_freed_memory": "malloc",
    "release_freed_memory": "malloc",
    "run_until_stopped": "lifecycle",
    "worth_logging": "logs",
}

__all__ = [
    "DropOldestQueue",
    "Episode",
    "Histogram",
    "LagHistogram",
    "LoopLag",
    "Schedule",
    "Verdict",
    "configure_logging",
    "keep_freed_memory",
    "release_freed_memory",
    "run_until_stopped",
    "worth_logging",
]


def __getattr__(name: str) -> Any:
    """Return ``name`` from the module it lives in (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
