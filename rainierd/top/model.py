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

from rainierd.fleet.units import flops_text

Document = Mapping[str, Any]
Link = Literal["connecting", "live", "behind", "stalled", "unreachable", "bad_answer"]

# The lost-FLOP/s causes as the API names them (docs/api.md), in its order, and their short labels.
CAUSE_LABELS: Final = {
    "failed_chip": "failed chip",
    "thermal_throttle": "throttle",
    "straggler": "straggler",
    "degraded_neuronlink": "NeuronLink",
    "degraded_efa": "EFA",
    "stale_telemetry": "stale",
}

# The heat map's colours, worst to best (``Scale``).
COLOURS: Final = ("#d7263d", "#f46036", "#f2c14e", "#a3c85a", "#2e933c")  # red, orange, yellow, yellow-green, green
UNKNOWN_COLOUR: Final = "#555555"
ScaleMode = Literal["kept", "peak"]


@dataclass(frozen=True, slots=True)
class Scale:
    """How the heat map colours an UltraServer.

    ``kept`` (the default): the share of the FP8 it could deliver that it delivers, effective / (effective +
    lost): 1 for a healthy UltraServer whatever its workload, less as faults cost it; an UltraServer with no
    work and no loss has no figure (grey).  ``peak``: its effective share (effective / peak) against what a
    healthy one delivers here (``reference_share``): effective / peak alone says as much about the
    workload's model FLOP/s utilisation as about faults, so every busy, healthy UltraServer would be yellow
    on an absolute scale.  ``floors`` are the value each colour of ``COLOURS`` needs.
    """

    mode: ScaleMode
    floors: tuple[float, ...]
    reference: float | None = None

    @classmethod
    def of(cls, mode: ScaleMode, cells: Sequence[Document]) -> Scale:
        """The scale of ``mode`` for the heat map of ``cells`` (rows of ``/api/v1/ultraservers``)."""
        if mode == "kept":
            return cls("kept", (0.0, 0.6, 0.85, 0.95, 0.99))
        return cls("peak", (0.0, 0.5, 0.75, 0.9, 0.97), reference_share([c.get("effective_share") for c in cells]))

    def value(self, cell: Document) -> float | None:
        """The figure ``cell`` is coloured by (None: none)."""
        if self.mode == "kept":
            effective, lost = cell.get("effective_flops"), cell.get("lost_flops")
            if effective is None or lost is None or effective + lost <= 0:
                return None
            return float(effective / (effective + lost))
        share = cell.get("effective_share")
        if share is None or self.reference is None or not math.isfinite(share):
            return None
        return float(share / self.reference)

    def colour(self, cell: Document) -> str:
        """``cell``'s colour."""
        return colour_of(self.value(cell), self.floors)

    def title(self) -> str:
        """What the colours mean, for the legend."""
        if self.mode == "kept":
            return "FP8 kept, effective/(effective+lost)"
        return f"effective share vs a healthy one ({percent(self.reference)} of peak)"


def colour_of(value: float | None, floors: Sequence[float]) -> str:
    """Return the colour of ``value`` on a scale whose colours need ``floors`` (``COLOURS``, worst first)."""
    if value is None or not math.isfinite(value):
        return UNKNOWN_COLOUR
    colour = COLOURS[0]
    for floor, hue in zip(floors, COLOURS, strict=True):
        if value >= floor:
            colour = hue
    return colour


@dataclass(frozen=True, slots=True)
class View:
    """The read API's documents from one poll (each ``None`` until first fetched, or when it failed), each
    checked against the schema (``answers``): what failed keeps its last good value.

    ``errors`` says, per endpoint, why the latest fetch of it failed (an advisory policy that is not
    running answers 503, for instance), without hiding the rest; ``trouble`` is the banner line of those
    that earn one: no answer at all (UNREACHABLE) or an answer refused (BAD ANSWER).
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
    trouble: Mapping[str, Health] = field(default_factory=dict)

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
           generation_since_s: float | None, behind_after_s: float, stalled_after_s: float,
           refused: str | None = None) -> Health:
    """Judge the link to the monitor.

    ``last_ok_s`` is when a poll last succeeded, ``last_error`` why the latest failed to get an answer (None
    if it did not), ``refused`` the ``BAD ANSWER`` line of its answer if that was refused,
    ``generation_since_s`` since when the monitor's generation has not changed; all on the caller's clock.
    The fleet unreachable beats its answer refused beats another document's trouble (``View.trouble``)
    beats stalled beats behind: the worst thing true is what the banner says.
    """
    since = "nothing shown yet" if last_ok_s is None else f"showing what it said {seconds(now_s - last_ok_s)} ago"
    if last_error is not None:
        return Health("unreachable", f"UNREACHABLE: {last_error}; {since}")
    if refused is not None:
        return Health("bad_answer", f"{refused}; {since}")
    if view.trouble:
        first, *more = view.trouble.values()
        return Health(first.link, first.text + (f" (and {len(more)} more)" if more else ""))
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


# FP8 FLOP/s as every surface spells it (``166 PF/s``): the one formatter, not a copy of it.
flops = flops_text


_SI: Final = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"),
               (1e-6, "µ"), (1e-9, "n"))


def si(value: float | None, unit: str) -> str:
    """Spell ``value`` of ``unit`` with an SI prefix and three significant figures, as ``flops`` spells FLOP/s:
    ``60.7 GB/s``, ``2.53 µs``, ``1.2 TB`` (``-`` when unknown)."""
    if value is None or not math.isfinite(value):
        return "-"
    if value == 0:
        return f"0 {unit}"
    for scale, prefix in _SI:
        if abs(value) >= scale * 0.9995:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def fit(head: str, parts: Sequence[str], width: int, *, empty: str = "none") -> str:
    """Return ``head`` and as many of ``parts`` (joined by commas) as fit in ``width`` columns, then ``+N more``
    for those left out: a header line is never cut mid-word, and says when it holds less than everything."""
    if not parts:
        return head + empty
    line = head
    for n, part in enumerate(parts):
        more = f" +{len(parts) - n - 1} more" if n < len(parts) - 1 else ""
        candidate = line + (", " if n else "") + part
        if len(candidate) + len(more) > width and n:
            return line + f" +{len(parts) - n} more"
        line = candidate
    return line


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


def first_cause(lost_by_cause: Mapping[str, float] | None) -> str:
    """Name the costliest cause of lost FLOP/s (``NeuronLink``; ``-`` when nothing is lost): a table's ``by``
    column, beside the loss it already shows."""
    ranked = sorted(((v, k) for k, v in (lost_by_cause or {}).items() if v), reverse=True)
    return CAUSE_LABELS.get(ranked[0][1], ranked[0][1]) if ranked else "-"


# A loss under this share of what could be delivered is noise, not a reason to say more than the state.
LOSS_WORTH_SAYING: Final = 0.005


def state_word(state: object, *, lost: float | None = None, effective: float | None = None,
               unhealthy: int = 0) -> str:
    """The word for an entity's state that never contradicts what it loses: the detector's state when it is not
    healthy; else, when it loses FP8 (``lost`` of ``effective + lost``), ``losing 13.2%``; else, when parts
    of it are unhealthy, ``3 parts unhealthy``; else ``healthy``.  (An UltraServer's or node's own state is its
    cooling's: ``healthy`` beside a 13 % loss would say the opposite of the figure next to it.)"""
    word = "?" if state is None else str(state)
    if word != "healthy":
        return word
    whole = (effective or 0.0) + (lost or 0.0)
    if lost and whole > 0 and lost / whole >= LOSS_WORTH_SAYING:
        return f"losing {percent(lost / whole)}"
    if unhealthy:
        return f"{unhealthy} part{'s' if unhealthy > 1 else ''} unhealthy"
    return word


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


def event_text(event: Document) -> str:
    """One event of ``/api/v1/events`` as a line of the feed."""
    ident = str(event.get("id"))
    # A canonical id (s0/u1/n4/chip5) already says its UltraServer; an integer one does not.
    where = f" ({event['ultraserver']})" if event.get("ultraserver") and "/" not in ident else ""
    reasons = ",".join(event.get("reasons") or ()) or "-"
    jobs = event.get("jobs") or ()
    hurt = ""
    if jobs:
        first = jobs[0]
        more = f" +{len(jobs) - 1}" if len(jobs) > 1 else ""
        hurt = f"  hurts {first.get('job')} {flops(first.get('flops'))}{more}"
    return (f"tick {event.get('tick')}  {event.get('entity')} {event.get('id')}{where}  "
            f"{event.get('before')} -> {event.get('after')}  [{reasons}]{hurt}")
