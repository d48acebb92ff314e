"""What ``top`` says of one chip, NeuronLink, EFA port or node: the decisive
screen of a drill-down, where an SRE decides what to do.

For each figure the monitor has of the entity: its value spelled with an SI
prefix (``60.7 GB/s``, ``2.53 µs``), what it should be (the hardware's nominal
figure from ``rainierd.fleet.hardware``: lanes ``4 / 8``, ``60.7 / 128 GB/s``)
and what its healthy peers of the same kind in the UltraServer show now
(the median: a link at 96 % of nominal is normal if its peers are too).  Then
what it costs each job it slows (the job's culprits, from the read API), the
node's advisory (``/api/v1/actions``) and the runbook section for its state
(``docs/runbooks.md``).  Pure: documents in, Rich text out, so the unit tests
read every rule without a terminal.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from rich.text import Text

from rainierd.fleet.hardware import TRN2
from rainierd.top.model import Document, flops, percent, seconds, si
from rainierd.top.names import LISTS, Namer, index_of, same_entity, within

RUNBOOKS: Final = "docs/runbooks.md"
# The runbook section for an entity kind in a state (docs/runbooks.md's headings as GitHub anchors them).
RUNBOOK_ANCHORS: Final[Mapping[tuple[str, str], str]] = {
    ("neuronlink", "degraded"): "neuronlink-degraded",
    ("neuronlink", "down"): "neuronlink-down-or-flapping",
    ("efa", "degraded"): "efa-path-degraded",
    ("efa", "down"): "efa-port-down",
    ("efa", "stale"): "telemetry-stale-or-frames-lost",
    ("chip", "failed"): "chip-failed",
    ("chip", "throttled"): "chip-throttled-or-straggling",
    ("chip", "straggler"): "chip-throttled-or-straggling",
    ("chip", "stale"): "telemetry-stale-or-frames-lost",
    ("node", "cooling_degraded"): "cooling-degraded",
    ("node", "path_degraded"): "node-paths-degraded",
    ("node", "lost"): "telemetry-stale-or-frames-lost",
    ("ultraserver", "cooling_degraded"): "cooling-degraded",
}
LABELS: Final = {"chip": "chip", "neuronlink": "NeuronLink", "efa": "EFA port", "node": "node"}
_LINK_NOMINAL: Final = {"torus": TRN2.neuronlink_intra_bytes_s, "ring": TRN2.neuronlink_ring_bytes_s}


def runbook(kind: str, state: object) -> str | None:
    """Return ``docs/runbooks.md#<anchor>`` for an entity of ``kind`` in ``state`` (None: healthy, or no runbook
    for it)."""
    anchor = RUNBOOK_ANCHORS.get((kind, str(state)))
    return None if anchor is None else f"{RUNBOOKS}#{anchor}"


@dataclass(frozen=True, slots=True)
class Line:
    """One figure of the entity: what it is, its value, and what it should be (nominal, peers)."""

    label: str
    value: str
    against: str = ""
    bad: bool = False


def _get(entity: Document, name: str) -> float | None:
    value = entity.get(name)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def peers_median(document: Document, kind: str, entity: Document, name: str) -> float | None:
    """Return the median of ``name`` over ``entity``'s healthy peers in the UltraServer document: the same kind
    (a NeuronLink's peers are the links of its kind, torus or ring), itself left out; None when none knows it."""
    values = [v for e in document.get(LISTS[kind], ()) if e is not entity and e.get("state") == "healthy"
              and (kind != "neuronlink" or e.get("kind") == entity.get("kind"))
              and (v := _get(e, name)) is not None]
    return statistics.median(values) if values else None


def _share(value: float | None, of: float | None) -> str:
    return "" if value is None or not of else f" ({percent(value / of)})"


def figures(kind: str, entity: Document, document: Document, namer: Namer) -> list[Line]:
    """Return the figures of ``entity`` (a row of ``document``'s list of ``kind``), each against its nominal
    figure and its healthy peers."""
    def peers(name: str, unit: str | None, scale: float = 1.0) -> str:
        """The healthy peers' median of ``name``: with an SI prefix, or a plain count when ``unit`` is None."""
        median = peers_median(document, kind, entity, name)
        if median is None:
            return ""
        return f"peers {median:,.0f}" if unit is None else f"peers {si(median * scale, unit)}"

    lines: list[Line] = []
    if kind == "neuronlink":
        nominal = _LINK_NOMINAL.get(str(entity.get("kind")))
        bw = _get(entity, "bw_bytes_s")
        lines.append(Line("ends", f"{within(namer.chip(entity.get('chip_a')), namer.prefix)} - "
                                  f"{within(namer.chip(entity.get('chip_b')), namer.prefix)} ({entity.get('kind')})"))
        slow = bw is not None and nominal is not None and bw < 0.8 * nominal
        lines.append(Line("bandwidth", f"{si(bw, 'B/s')} / {si(nominal, 'B/s')}{_share(bw, nominal)}",
                          peers("bw_bytes_s", "B/s"), bad=slow))
        lanes = _get(entity, "lanes_up")
        up = "-" if lanes is None else f"{lanes:.0f}"
        lines.append(Line("lanes up", f"{up} / {TRN2.neuronlink_lanes}",
                          bad=lanes is not None and lanes < TRN2.neuronlink_lanes))
        lines.append(Line("latency", si(_us(entity), "s"), peers("latency_us", "s", 1e-6)))
        lines.append(Line("CRC errors", _count(entity, "crc_errors_total"), "total its publisher counts"))
        lines.append(Line("replays", _count(entity, "replay_total"), "total its publisher counts"))
    elif kind == "efa":
        lines.append(Line("chip", within(namer.chip(entity.get("chip")), namer.prefix),
                          f"line rate {si(TRN2.efa_port_bytes_s * 8, 'b/s')}"))
        lines.append(Line("latency", si(_us(entity), "s"), peers("latency_us", "s", 1e-6)))
        lines.append(Line("retransmits", _count(entity, "retrans_pkts_total"), peers("retrans_pkts_total", None)))
        lines.append(Line("sent", si(_get(entity, "tx_bytes_total"), "B"), peers("tx_bytes_total", "B")))
        lines.append(Line("received", si(_get(entity, "rx_bytes_total"), "B"), peers("rx_bytes_total", "B")))
    elif kind == "chip":
        effective = _get(entity, "effective_flops")
        lines.append(Line("FP8", f"{flops(effective)} / {flops(TRN2.fp8_dense_flops)}"
                                 f"{_share(effective, TRN2.fp8_dense_flops)}", peers("effective_flops", "F/s")))
        util = _get(entity, "util")
        lines.append(Line("utilisation", percent(util),
                          f"peers {percent(peers_median(document, kind, entity, 'util'))}"))
        clock = _get(entity, "clock_ratio")
        lines.append(Line("clock", f"{percent(clock)} of nominal", bad=clock is not None and clock < 0.95))
        lines.append(Line("temperature", _unit(_get(entity, "temp_c"), "C"), peers("temp_c", "C")))
        lines.append(Line("power", f"{_unit(_get(entity, 'power_w'), 'W')} / ~{TRN2.chip_power_w:.0f} W"))
        lines.append(Line("HBM used", f"{si(_get(entity, 'hbm_used_bytes'), 'B')} / {si(float(TRN2.hbm_bytes), 'B')}"))
        uncorrected = _get(entity, "ecc_uncorrected_total")
        lines.append(Line("ECC errors", f"{_count(entity, 'ecc_corrected_total')} corrected, "
                                        f"{_count(entity, 'ecc_uncorrected_total')} uncorrected",
                          bad=bool(uncorrected)))
    elif kind == "node":
        lines.append(Line("air", f"inlet {_unit(_get(entity, 'inlet_c'), 'C')}, outlet "
                                 f"{_unit(_get(entity, 'outlet_c'), 'C')}", peers("outlet_c", "C")))
        lines.append(Line("fan", _unit(_get(entity, "fan_rpm"), "rpm"), peers("fan_rpm", "rpm")))
        lines.append(Line("power", _unit(_get(entity, "power_w"), "W"), peers("power_w", "W")))
    return lines


def _us(entity: Document) -> float | None:
    value = _get(entity, "latency_us")
    return None if value is None else value * 1e-6


def _count(entity: Document, name: str) -> str:
    value = _get(entity, name)
    return "-" if value is None else f"{value:,.0f}"


def _unit(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:,.1f} {unit}" if abs(value) < 100 else f"{value:,.0f} {unit}"


@dataclass(frozen=True, slots=True)
class Cost:
    """What the entity costs one job now: FP8 FLOP/s, and that job's peak (None: not known here)."""

    job: str
    flops: float
    job_peak: float | None = None
    job_goodput: float | None = None
    detected: bool = False  # the figure of its detection event, not of now


def costs(kind: str, entity: Document, canonical: str, jobs: Sequence[Document], *,
          fleet_culprits: Sequence[Document] = (), events: Sequence[Document] = ()) -> list[Cost]:
    """Return what the entity costs each job, costliest first: from each job document's culprits (``jobs``:
    ``/api/v1/jobs/<id>`` answers), then the fleet's costliest (``fleet.culprits``) for a job not fetched, then
    the entity's latest detection event (``events``, newest first: what it cost each job when detected)."""
    index = index_of(entity)
    found: dict[str, Cost] = {}
    for document in jobs:
        job = document.get("job") or {}
        for culprit in document.get("culprits", ()):
            if same_entity(culprit, kind, index, canonical) and isinstance(culprit.get("flops"), (int, float)):
                found[str(job.get("id"))] = Cost(str(job.get("id")), float(culprit["flops"]), job.get("peak_flops"),
                                                 job.get("goodput_ratio"))
    for culprit in fleet_culprits:
        name = culprit.get("job")
        if name and name not in found and same_entity(culprit, kind, index, canonical):
            found[str(name)] = Cost(str(name), float(culprit.get("flops") or 0.0))
    latest = next((e for e in events if same_entity(e, kind, index, canonical)), None)
    if latest is not None and latest.get("after") not in ("healthy", None):
        for hurt in latest.get("jobs") or ():
            name = hurt.get("job")
            if name and name not in found and isinstance(hurt.get("flops"), (int, float)):
                found[str(name)] = Cost(str(name), float(hurt["flops"]), detected=True)
    return sorted(found.values(), key=lambda c: -c.flops)


def advisories_for(actions: Document | None, node_index: int | None, node_canonical: str) -> list[Document]:
    """Return the advisories of ``actions`` (an ``/api/v1/actions`` answer) for the node."""
    if actions is None:
        return []
    return [a for a in actions.get("actions", ())
            if a.get("node") == node_canonical
            or (node_index is not None and node_index in (a.get("node_id"), a.get("index")))]


def timing(advisory: Document, now_s: object = None) -> str | None:
    """Return when the advisory would act and what waiting costs, from its ``cost`` (None: the monitor gives
    none), ``now_s`` the advisories' wall time: ``at the job's next checkpoint in 4 min; waiting costs 1.2
    EF; a restart now redoes 3.4 EF`` (FLOP amounts spelled as the advisories spell them, FLOP/s without the
    ``/s``)."""
    cost = advisory.get("cost")
    if not isinstance(cost, Mapping):
        return None
    when = cost.get("when")
    if when == "next_checkpoint":
        at = cost.get("next_checkpoint_s")
        now = now_s
        text = "at the job's next checkpoint"
        if isinstance(at, (int, float)) and isinstance(now, (int, float)) and at >= now:
            text += f" in {seconds(at - now)}"
        parts = [text]
        if isinstance(wait := cost.get("until_checkpoint_flop"), (int, float)):
            parts.append(f"waiting costs {si(wait, 'F')}")
        if isinstance(redo := cost.get("redo_flop"), (int, float)):
            parts.append(f"a restart now redoes {si(redo, 'F')}")
        return "; ".join(parts)
    if when == "now":
        return "now"
    return None


def card(kind: str, entity: Document, document: Document, *, jobs: Sequence[Document] = (),
         fleet_culprits: Sequence[Document] = (), events: Sequence[Document] = (), actions: Document | None = None,
         actions_error: str | None = None) -> Text:
    """Return the entity screen's text: what it is and its state, its figures against nominal and peers, its
    cost to each job, its node's advisory and its runbook section (the screen wraps a long line at word
    boundaries: nothing is cut)."""
    namer = Namer.of(document)
    canonical = namer.of_entity(kind, entity)
    state = str(entity.get("state", "?"))
    text = Text()
    text.append(f"{LABELS.get(kind, kind)} {canonical}", "bold")
    text.append("  ")
    text.append(state.upper() if state != "healthy" else state, "bold red" if state != "healthy" else "green")
    if state != "healthy":
        text.append(f" ({', '.join(entity.get('reasons') or ()) or 'no reason given'}) since tick "
                    f"{entity.get('onset_tick')}")
    text.append("\n\n")
    rows = figures(kind, entity, document, namer)
    label_w = max((len(r.label) for r in rows), default=0)
    for row in rows:
        text.append(f"  {row.label:<{label_w}}  ", "bold")
        text.append(row.value, "bold red" if row.bad else "")
        if row.against:
            text.append(f"   {row.against}", "dim")
        text.append("\n")
    text.append("\n")
    text.append("costs ", "bold")
    priced = costs(kind, entity, canonical, jobs, fleet_culprits=fleet_culprits, events=events)
    if priced:
        for n, cost in enumerate(priced):
            text.append(("" if n == 0 else "      ") + f"{cost.job} ")
            text.append(flops(cost.flops), "bold red")
            if cost.job_peak:
                text.append(f" ({percent(cost.flops / cost.job_peak)} of its peak"
                            f"{'; goodput ' + percent(cost.job_goodput) if cost.job_goodput is not None else ''})")
            if cost.detected:
                text.append(" when detected")
            text.append("\n")
    else:
        job = node_job(document, kind, entity)
        text.append(f"nothing now to {job}" if job else "no job (its node runs none)")
        text.append("\n")
    node = entity if kind == "node" else _node_of(document, entity)
    node_canonical = namer.node(node.get("id")) if node else namer.node(entity.get("node"))
    text.append("advice ", "bold")
    mine = advisories_for(actions, index_of(node) if node else None, node_canonical)
    if actions is None:
        text.append(f"none to show: {actions_error or 'not fetched yet'}\n", "italic")
    elif not mine:
        text.append(f"no advisory for {within(node_canonical, namer.prefix)}\n")
    for advisory in mine:
        text.append(f"{advisory.get('action')}", "bold")
        text.append(f" {within(node_canonical, namer.prefix)} ({advisory.get('state')}"
                    f"{', dry run' if actions and actions.get('dry_run') else ''}): "
                    f"{' '.join(str(advisory.get('reason', '')).split())}\n")
        if (when := timing(advisory, actions.get("t_s") if actions else None)) is not None:
            text.append("  when ", "bold")
            text.append(when + "\n")
    book = runbook(kind, state)
    text.append("runbook ", "bold")
    text.append(f"{book}\n" if book else "none: healthy\n" if state == "healthy" else f"none for {kind} {state}\n")
    return text


def _node_of(document: Document, entity: Document) -> Document | None:
    want = entity.get("node")
    return next((n for n in document.get("nodes", ()) if n.get("id") == want
                 or index_of(n) == index_of({"id": want})), None)


def node_job(document: Document, kind: str, entity: Document) -> str | None:
    """Return the job the entity's node runs (None: none)."""
    node = entity if kind == "node" else _node_of(document, entity)
    job = node.get("job") if node else None
    return str(job) if job else None


def node_key(document: Document, kind: str, entity: Document) -> str | None:
    """Return the name ``/api/v1/actions?node=`` takes for the entity's node: its hostname, else ``n<index>``."""
    node = entity if kind == "node" else _node_of(document, entity)
    if node is None:
        return None
    hostname = node.get("hostname")
    if isinstance(hostname, str) and hostname:
        return hostname
    index = index_of(node)
    return None if index is None else f"n{index}"


def entity_in(document: Document, kind: str, ident: str) -> Document | None:
    """Return the row of ``document``'s list of ``kind`` whose canonical id, id or index is ``ident``."""
    namer = Namer.of(document)
    return next((e for e in document.get(LISTS.get(kind, ""), ())
                 if ident in (namer.of_entity(kind, e), str(e.get("id")), str(index_of(e)))), None)


__all__ = ["Cost", "Line", "card", "costs", "entity_in", "figures", "node_job", "node_key", "runbook", "timing"]
