"""Detection results as metrics.

``DetectionCollector`` (prometheus-client) carries the small, fixed families: how
many entities are in each unhealthy state, the events so far and the
budget's drop counter (lost FP8 by cause: exporter/loss.py).
``EntityFamilies`` renders the families whose size follows the fleet's health
straight to text (exporter/ultraservers.py explains why): one series per unhealthy
NeuronLink, EFA port, chip, node and UltraServer, never one per healthy
entity, with their reasons, lost FP8 per UltraServer where non-zero, and the
``worst_k`` lowest gray-failure ratios fleet-wide.

The per-entity families share a budget of ``max_series`` each: beyond it the
worst states, longest unhealthy first, are kept (so a standing incident keeps
its series and its alert) and the rest are counted in
``rainier_exporter_series_dropped_total`` and logged once per family.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt
import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rainierd.core import DetailView
from rainierd.core.detect import STATE_NAMES, reason_names
from rainierd.exporter.exposition import family_head
from rainierd.fleet import CAUSES, LINK_KIND_NAMES, Topology
from rainierd.fleet.ids import entity_id, node_id, ultraserver_id
from rainierd.monitor import MonitorSnapshot

log = structlog.get_logger("rainierd.exporter")

ENTITY_FAMILIES = {
    "neuronlink": ("rainier_neuronlink_unhealthy", "NeuronLink that is not healthy (1); state and location in labels."),
    "efa": ("rainier_efa_port_unhealthy", "EFA port that is not healthy (1)."),
    "chip": ("rainier_chip_unhealthy", "Chip that is not healthy (1)."),
    "node": ("rainier_node_unhealthy",
             "Node whose cooling is degraded, which is lost, or whose EFA or NeuronLink paths are slow (1)."),
    "ultraserver": ("rainier_ultraserver_cooling_degraded", "UltraServer whose cooling is degraded (1)."),
}
WORST_FAMILIES = {
    "neuronlink": ("rainier_neuronlink_worst_bandwidth_ratio",
                   "Lowest NeuronLink bandwidth / its own level at its node's pace, healthy or not (top K)."),
    "efa": ("rainier_efa_port_worst_traffic_ratio",
            "Lowest EFA port traffic / its node's ports' median (smoothed), healthy or not (top K)."),
    "chip": ("rainier_chip_worst_efficiency_ratio",
             "Lowest chip efficiency / its group's median (smoothed), healthy or not (top K)."),
}


class EntityFamilies:
    """Renders the per-entity and per-UltraServer health families to exposition text."""

    def __init__(
        self, topology: Topology, snapshot: Callable[[], MonitorSnapshot | None], *, max_series: int = 1_000,
    ) -> None:
        self._topo, self._snapshot, self._max = topology, snapshot, max_series
        self.dropped: dict[str, int] = dict.fromkeys(ENTITY_FAMILIES, 0)
        self._warned: set[str] = set()
        self._info = _node_info(topology)

    def _labels(self, entity: str, ids: npt.NDArray[np.int64]) -> list[str]:
        """Return each entity's label block (without braces or state): its index label, then its canonical ``id``
        (docs/ids.md: one more label, never one more series), then where it sits."""
        topo = self._topo
        names = topo.names
        if entity == "ultraserver":
            return [f'ultraserver="u{u}",id="{ultraserver_id(topo, u)}",site="s{topo.ultraserver_site[u]}"'
                    f'{names.ultraserver_label(u)}' for u in ids.tolist()]
        if entity == "node":
            node = ids
            us = topo.node_ultraserver[node]
            return [f'node="n{n}",id="{node_id(topo, n)}",site="s{topo.ultraserver_site[u]}",ultraserver="u{u}"'
                    f'{names.node_labels(n)}' for n, u in zip(node.tolist(), us.tolist(), strict=True)]
        if entity == "neuronlink":
            node, id_label = topo.link_node[ids], "link"
            kinds = [f',kind="{LINK_KIND_NAMES[k]}"' for k in topo.link_kind[ids].tolist()]
        else:
            node, id_label = (topo.efa_node[ids], "port") if entity == "efa" else (topo.chip_node[ids], "chip")
            kinds = [""] * ids.size
        us = topo.node_ultraserver[node]
        site = topo.ultraserver_site[us]
        return [
            f'{id_label}="{i}",id="{entity_id(topo, entity, i)}"{k},site="s{s}",ultraserver="u{u}",node="n{n}"'
            f'{names.node_labels(n)}'
            for i, k, s, u, n in zip(ids.tolist(), kinds, site.tolist(), us.tolist(), node.tolist(), strict=True)
        ]

    def render(self) -> bytes:
        """Return the families as exposition text (empty before the first analysis)."""
        snap = self._snapshot()
        if snap is None or snap.health is None:
            return b""
        out: list[str] = [self._info]
        for entity in ENTITY_FAMILIES:
            self._entities(entity, snap, out)
        if snap.detail is not None:
            self._detail(snap.detail, out)
        for entity, (name, text) in WORST_FAMILIES.items():
            ids, values = snap.health.worst[entity]
            blocks = self._labels(entity, ids)
            out.append(family_head(name, text))
            out.extend(f"{name}{{{b}}} {v!r}\n" for b, v in zip(blocks, values.tolist(), strict=True))
        if snap.lost is not None:
            name = "rainier_ultraserver_fp8_lost_flops"
            out.append(family_head(name, "UltraServer FP8 FLOP/s lost, by cause (only where non-zero)."))
            for cause in CAUSES:
                values = snap.lost.ultraserver[cause]
                for u in np.flatnonzero(values > 0).tolist():
                    s = self._topo.ultraserver_site[u]
                    out.append(f'{name}{{cause="{cause}",site="s{s}",ultraserver="u{u}"}} {float(values[u])!r}\n')
        return "".join(out).encode()

    def _detail(self, detail: DetailView, out: list[str]) -> None:
        """Render the detail nodes' chips one by one: each figure a series where it is known."""
        ids = detail.ids[: self._max]
        blocks = self._labels("chip", ids)
        figures = [(name, text, kind, values[: self._max]) for name, text, kind, values in (
            ("rainier_chip_utilization_ratio", "Mean NeuronCore utilisation of a detail node's chip.", "gauge",
             detail.gauges["util"]),
            ("rainier_chip_clock_ratio", "Clock / nominal clock of a detail node's chip.", "gauge",
             detail.gauges["clock_ratio"]),
            ("rainier_chip_temperature_celsius", "Hottest sensor of a detail node's chip.", "gauge",
             detail.gauges["temp_c"]),
            ("rainier_chip_power_watts", "Power of a detail node's chip.", "gauge", detail.gauges["power_w"]),
            ("rainier_chip_hbm_used_bytes", "HBM in use on a detail node's chip.", "gauge",
             detail.gauges["hbm_used_bytes"]),
            ("rainier_chip_fp8_effective_flops", "FP8 FLOP/s a detail node's chip executed.", "gauge",
             detail.effective),
            ("rainier_chip_ecc_corrected_errors",
             "Corrected ECC errors of a detail node's chip (its publisher's total).", "counter",
             detail.totals["ecc_corrected_total"]),
            ("rainier_chip_ecc_uncorrected_errors",
             "Uncorrected ECC errors of a detail node's chip (its publisher's total).", "counter",
             detail.totals["ecc_uncorrected_total"]),
        )]
        for name, text, kind, values in figures:
            series = name + "_total" if kind == "counter" else name
            out.append(family_head(name, text, kind))
            known = ~np.isnan(values)  # an unknown figure has no series
            out.extend(f"{series}{{{b}}} {v!r}\n" for b, v, k in zip(blocks, values.tolist(), known.tolist(),
                                                                       strict=True) if k)

    def _entities(self, entity: str, snap: MonitorSnapshot, out: list[str]) -> None:
        assert snap.health is not None
        name, text = ENTITY_FAMILIES[entity]
        h = snap.health
        ids, states, reasons, onsets = h.ids[entity], h.states[entity], h.reasons[entity], h.onsets[entity]
        if ids.size > self._max:
            keep = np.lexsort((onsets, -states))[: self._max]  # worst state first, then longest unhealthy
            self.dropped[entity] += int(ids.size - self._max)
            if entity not in self._warned:
                self._warned.add(entity)
                log.warning("per-entity series over budget; keeping the worst", family=name,
                            unhealthy=int(ids.size), max_series=self._max)
            ids, states, reasons = ids[keep], states[keep], reasons[keep]
        blocks = self._labels(entity, ids)
        names = STATE_NAMES[entity]
        out.append(family_head(name, text))
        out.extend(f'{name}{{{b},state="{names[st]}"}} 1.0\n' for b, st in zip(blocks, states.tolist(), strict=True))
        why = f"{name}_reason"
        out.append(family_head(why, f"Why ({name}): one series per reason."))
        # A reason series carries the entity's index and id labels (the first two of its block).
        for i, mask in zip((",".join(b.split(",", 2)[:2]) for b in blocks), reasons.tolist(), strict=True):
            out.extend(f'{why}{{{i},reason="{r}"}} 1.0\n' for r in reason_names(mask))


def _node_info(topo: Topology) -> str:
    """Return ``rainier_node_info`` for every node the inventory names (static: built once).

    One series a named node, value 1, carrying its hostname, instance id and
    zone next to the ids every other series uses, so any series joins to
    them: ``… * on (node) group_left (hostname) rainier_node_info``.
    """
    if not topo.names.hostnames:
        return ""
    name = "rainier_node_info"
    lines = [family_head(name, "The inventory's names of a node (1), for joins on node.")]
    for node in np.flatnonzero(topo.node_present).tolist():
        us = int(topo.node_ultraserver[node])
        site = int(topo.ultraserver_site[us])
        lines.append(f'{name}{{node="n{node}",id="{node_id(topo, node)}",site="s{site}",ultraserver="u{us}"'
                     f'{topo.names.node_labels(node)}'
                     f'{topo.names.site_label(site)}{topo.names.ultraserver_label(us)}}} 1.0\n')
    return "".join(lines)


class DetectionCollector(Collector):
    """The fixed-size detection metrics from the latest snapshot."""

    def __init__(
        self, snapshot: Callable[[], MonitorSnapshot | None], *, dropped: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        self._snapshot, self._dropped = snapshot, dropped

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        if snap is None or snap.health is None:
            return
        count = GaugeMetricFamily("rainier_unhealthy", "Entities in each unhealthy state.", labels=["entity", "state"])
        for (entity, state), n in sorted(snap.health.counts().items()):
            count.add_metric([entity, state], n)
        yield count
        unknown = GaugeMetricFamily(
            "rainier_unknown",
            "Entities that cannot be judged yet: no sample has carried what the judgement needs.",
            labels=["entity", "judgement"],
        )
        for (entity, judgement), n in sorted(snap.health.unknown.items()):
            unknown.add_metric([entity, judgement], n)
        yield unknown
        implausible = GaugeMetricFamily(
            "rainier_implausible",
            "Entities whose claim is far above their peers' now: left out of every peer's reference, never "
            "used to judge them.",
            labels=["entity", "judgement"],
        )
        for (entity, judgement), ids in sorted(snap.health.implausible.items()):
            implausible.add_metric([entity, judgement], ids.size)
        yield implausible
        onsets = CounterMetricFamily(
            "rainier_implausible_onsets", "Times an entity's claim became implausible, far above its peers'.",
            labels=["entity", "judgement"],
        )
        for (entity, judgement), n in sorted(snap.health.implausible_onsets.items()):
            onsets.add_metric([entity, judgement], n)
        yield onsets
        yield GaugeMetricFamily(
            "rainier_feed_silent_nodes",
            "Nodes silent together while this monitor's feed is lost: their silence is held as the transport's, "
            "not judged per node (0 while the feed is healthy).",
            value=snap.health.feed.silent_nodes,
        )
        events = CounterMetricFamily(
            "rainier_health_events", "Health state changes, by entity kind and new state.", labels=["entity", "state"],
        )
        for entity, names in STATE_NAMES.items():
            for state in names:
                events.add_metric([entity, state], snap.events.get((entity, state), 0))
        yield events
        if self._dropped is not None:
            dropped = CounterMetricFamily(
                "rainier_exporter_series_dropped", "Per-entity series left out to stay within the budget.",
                labels=["family"],
            )
            counts = self._dropped()
            for entity, (name, _text) in ENTITY_FAMILIES.items():
                dropped.add_metric([name], counts[entity])
            yield dropped
