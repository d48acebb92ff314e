"""What ``rainierd top`` shows, as plain values: the documents of one poll of
the read API frozen into a ``View``, the health of the link to the monitor,
and the pure functions that turn figures into the text and colours on screen.

No Textual and no I/O here, so the unit tests read every rule directly: how a
figure is spelled, when the monitor counts as behind, stalled or unreachable,
how an effective share is coloured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = ["CAUSE_LABELS", "Health", "Link", "View", "cause_text", "colour_of", "event_text", "flops", "health",
           "percent", "reference_share", "seconds"]

Document = Mapping[str, Any]
Link = Literal["connecting", "live", "behind", "stalled", "unreachable"]

# The lost-FLOP/s causes as the API names them (docs/api.md), in its order, and their short labels.
CAUSE_LABELS: Final = {
    "failed_chip": "failed chip",
    "thermal_throttle": "throttle",
    "straggler": "straggler",
    "degraded_neuronlink": "NeuronLink",
    "degraded_efa": "EFA",
    "stale_telemetry": "stale",
}

# The heat map's colours, worst to best, and the share of the reference each needs (``colour_of``).
PALETTE: Final = (
    (0.0, "#d7263d"),   # red: under half of what a healthy UltraServer delivers
    (0.5, "#f46036"),   # orange
    (0.75, "#f2c14e"),  # yellow
    (0.9, "#a3c85a"),   # yellow-green
    (0.97, "#2e933c"),  # green: within 3 % of a healthy UltraServer
)
UNKNOWN_COLOUR: Final = "#555555"


@dataclass(frozen=True, slots=True)
class View:
    """The read API's documents from one poll (each ``None`` until first fetched, or when it failed).

    ``errors`` says, per endpoint, why the latest fetch of it failed (an advisory policy that is not
    running answers 503, for instance), without hiding the rest.
    """

    fleet: Document | None = None
    heat: Sequence[Document] = ()
    sites: Sequence[Document] = ()
    worst: Sequence[Document] = ()
    jobs: Sequence[Document] = ()
    jobs_total: int = 0
    events: Sequence[Document] = ()
    actions: Document | None = None
    errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def generation(self) -> int | None:
        """The monitor's analysis count this view was read at."""
        return None if self.fleet is None else int(self.fleet["generation"])


@dataclass(frozen=True, slots=True)
class Health:
    """How far to trust what is on screen: ``link`` and one line saying why."""

    link: Link
    text: str


def health(view: View, *, now_s: float, last_ok_s: float | None, last_error: str | None,
           generation_since_s: float | None, behind_after_s: float, stalled_after_s: float) -> Health:
    """Judge the link to the monitor.

    ``last_ok_s`` is when a poll last succeeded, ``last_error`` why the latest failed (None if it did not),
    ``generation_since_s`` since when the monitor's generation has not changed; all on the caller's clock.
    Unreachable beats stalled beats behind: the worst thing true is what the banner says.
    """
    if last_error is not None:
        if last_ok_s is None:
            return Health("unreachable", f"UNREACHABLE: {last_error}; nothing shown yet")
        age = seconds(now_s - last_ok_s)
        return Health("unreachable", f"UNREACHABLE: {last_error}; showing what it said {age} ago")
    if view.fleet is None:
        return Health("connecting", "connecting...")
    if generation_since_s is not None and now_s - generation_since_s >= stalled_after_s:
        return Health("stalled", f"STALLED: no new analysis for {seconds(now_s - generation_since_s)}")
    monitor: Document = view.fleet.get("monitor") or {}
    problems = []
    lag = monitor.get("lag_s")
    if isinstance(lag, (int, float)) and lag >= behind_after_s:
        problems.append(f"newest sample {seconds(lag)} old")
    if monitor.get("overloaded"):
        problems.append(f"overloaded, {monitor.get('backlog_messages', 0):,} messages queued")
    if monitor.get("connected") is False:
        problems.append("its broker session is down")
    if problems:
        return Health("behind", "BEHIND: " + "; ".join(problems))
    return Health("live", "live")


def seconds(value: float) -> str:
    """Spell a duration for a person: ``0.4 s``, ``12 s``, ``5 min``, ``3.2 h``."""
    if not math.isfinite(value):
        return "?"
    if value < 10:
        return f"{value:.1f} s"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"


_PREFIXES: Final = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"))


def flops(value: float | None) -> str:
    """Spell FP8 FLOP/s with an SI prefix and three significant figures: ``166 PF/s``, ``7.17 PF/s``."""
    if value is None or not math.isfinite(value):
        return "-"
    if value == 0:
        return "0"
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}F/s"
    return f"{value:.3g} F/s"


def percent(value: float | None) -> str:
    """Spell a ratio as a percentage (``-`` when unknown)."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value * 100:.1f}%"


def cause_text(lost_by_cause: Mapping[str, float] | None, *, top: int = 3) -> str:
    """Spell the largest causes of lost FLOP/s, costliest first: ``NeuronLink 7.17 PF/s, EFA 1 TF/s``."""
    if not lost_by_cause:
        return "none"
    ranked = sorted(((v, k) for k, v in lost_by_cause.items() if v), reverse=True)[:top]
    return ", ".join(f"{CAUSE_LABELS.get(k, k)} {flops(v)}" for v, k in ranked) or "none"


def reference_share(shares: Sequence[float | None]) -> float | None:
    """Return the effective share a healthy UltraServer delivers here: the 90th percentile of the known ones.

    Effective share (effective over peak FLOP/s) is about what the workload makes of the silicon as much as
    what the fleet's faults cost it; coloured on an absolute scale every busy, healthy UltraServer would be
    yellow.  Against the best tenth of the fleet, a healthy one is green and a hurt one stands out whatever
    the workload's model FLOP/s utilisation.
    """
    known = sorted(s for s in shares if s is not None and math.isfinite(s) and s > 0)
    if not known:
        return None
    return known[min(len(known) - 1, int(0.9 * len(known)))]


def colour_of(share: float | None, reference: float | None) -> str:
    """Return the heat map's colour of an UltraServer's effective ``share`` against ``reference``."""
    if share is None or reference is None or not math.isfinite(share):
        return UNKNOWN_COLOUR
    ratio = share / reference
    colour = PALETTE[0][1]
    for floor, hue in PALETTE:
        if ratio >= floor:
            colour = hue
    return colour


def event_text(event: Document) -> str:
    """One event of ``/api/v1/events`` as a line of the feed."""
    where = f" ({event['ultraserver']})" if event.get("ultraserver") else ""
    reasons = ",".join(event.get("reasons") or ()) or "-"
    jobs = event.get("jobs") or ()
    hurt = ""
    if jobs:
        first = jobs[0]
        more = f" +{len(jobs) - 1}" if len(jobs) > 1 else ""
        hurt = f"  hurts {first.get('job')} {flops(first.get('flops'))}{more}"
    return (f"tick {event.get('tick')}  {event.get('entity')} {event.get('id')}{where}  "
            f"{event.get('before')} -> {event.get('after')}  [{reasons}]{hurt}")
