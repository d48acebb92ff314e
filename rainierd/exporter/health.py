"""Detection results as metrics: how many entities are in each unhealthy
state, the events so far, lost FP8 by cause, and one series per unhealthy
entity (never one per healthy entity).

Per-entity series are bounded by ``max_series`` per family: beyond it the
worst (longest unhealthy first, so a standing incident keeps its series) are
kept and the rest are counted in ``rainier_exporter_series_dropped_total``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rainierd.core.detect import STATE_NAMES
from rainierd.core.detect._common import reason_names
from rainierd.core.model import CAUSES
from rainierd.exporter.snapshot import MonitorSnapshot
from rainierd.topology import LINK_KIND_NAMES, Topology

__all__ = ["HealthCollector"]

log = structlog.get_logger("rainierd.exporter")

_FAMILIES = {
    "neuronlink": ("rainier_neuronlink_unhealthy", "NeuronLink that is not healthy (1); state and location in labels."),
    "efa": ("rainier_efa_port_unhealthy", "EFA port that is not healthy (1)."),
    "chip": ("rainier_chip_unhealthy", "Chip that is not healthy (1)."),
    "node": ("rainier_node_unhealthy", "Node whose cooling is degraded or which is lost (1)."),
    "ultraserver": ("rainier_ultraserver_cooling_degraded", "UltraServer whose cooling is degraded (1)."),
}


class HealthCollector(Collector):
    """Detection metrics from the latest snapshot."""

    def __init__(
        self, topology: Topology, snapshot: Callable[[], MonitorSnapshot | None], *, max_series: int = 1_000,
    ) -> None:
        self._topo, self._snapshot, self._max = topology, snapshot, max_series
        self.dropped: dict[str, int] = dict.fromkeys(_FAMILIES, 0)
        self._warned: set[str] = set()

    def _location(self, entity: str, ids: np.ndarray) -> tuple[list[str], list[list[str]]]:
        topo = self._topo
        if entity == "neuronlink":
            node = topo.link_node[ids]
            extra = [LINK_KIND_NAMES[k] for k in topo.link_kind[ids].tolist()]
            names = ["link", "kind"]
        elif entity == "efa":
            node, extra, names = topo.efa_node[ids], None, ["port"]
        elif entity == "chip":
            node, extra, names = topo.chip_node[ids], None, ["chip"]
        elif entity == "node":
            node, extra, names = ids, None, ["node"]
        else:
            us = ids
            labels = [[f"u{u}", f"s{topo.ultraserver_site[u]}"] for u in us.tolist()]
            return ["ultraserver", "site"], labels
        us = topo.node_ultraserver[node]
        site = topo.ultraserver_site[us]
        with_node = entity != "node"  # a node's own id is its node label
        rows = []
        for i, (entity_id, n, u, s) in enumerate(zip(ids.tolist(), node.tolist(), us.tolist(), site.tolist(),
                                                     strict=True)):
            row = [str(entity_id) if with_node else f"n{entity_id}"] + ([extra[i]] if extra is not None else [])
            rows.append([*row, f"s{s}", f"u{u}"] + ([f"n{n}"] if with_node else []))
        return [*names, "site", "ultraserver"] + (["node"] if with_node else []), rows

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        if snap is None or snap.health is None:
            return
        health = snap.health
        count = GaugeMetricFamily("rainier_unhealthy", "Entities in each unhealthy state.", labels=["entity", "state"])
        for (entity, state), n in sorted(health.counts().items()):
            count.add_metric([entity, state], n)
        yield count
        events = CounterMetricFamily(
            "rainier_health_events", "Health state changes, by entity kind and new state.", labels=["entity", "state"],
        )
        for entity, names in STATE_NAMES.items():
            for state in names:
                events.add_metric([entity, state], snap.events[entity, state])
        yield events
        yield from self._lost(snap)
        for entity, (name, text) in _FAMILIES.items():
            yield from self._entities(entity, name, text, snap)
        dropped = CounterMetricFamily(
            "rainier_exporter_series_dropped", "Per-entity series left out to stay within the budget.",
            labels=["family"],
        )
        for entity, (name, _text) in _FAMILIES.items():
            dropped.add_metric([name], self.dropped[entity])
        yield dropped

    def _lost(self, snap: MonitorSnapshot) -> Iterator[Metric]:
        lost = snap.lost
        if lost is None:
            return
        fleet = GaugeMetricFamily("rainier_fleet_fp8_lost_flops", "FP8 FLOP/s lost, by cause.", labels=["cause"])
        site = GaugeMetricFamily("rainier_site_fp8_lost_flops", "Site FP8 FLOP/s lost, by cause.",
                                 labels=["site", "cause"])
        us = GaugeMetricFamily("rainier_ultraserver_fp8_lost_flops",
                               "UltraServer FP8 FLOP/s lost, by cause (only where non-zero).",
                               labels=["site", "ultraserver", "cause"])
        for cause in CAUSES:
            fleet.add_metric([cause], float(lost.site[cause].sum()))
            for s, value in enumerate(lost.site[cause].tolist()):
                site.add_metric([f"s{s}", cause], value)
            for u in np.flatnonzero(lost.ultraserver[cause] > 0).tolist():
                us.add_metric([f"s{self._topo.ultraserver_site[u]}", f"u{u}", cause],
                              float(lost.ultraserver[cause][u]))
        yield fleet
        yield site
        yield us

    def _entities(self, entity: str, name: str, text: str, snap: MonitorSnapshot) -> Iterator[Metric]:
        assert snap.health is not None
        ids, states, reasons = snap.health.ids[entity], snap.health.states[entity], snap.health.reasons[entity]
        if ids.size > self._max:
            keep = np.argsort(-states, kind="stable")[: self._max]  # worst states first
            self.dropped[entity] += int(ids.size - self._max)
            if entity not in self._warned:
                self._warned.add(entity)
                log.warning("per-entity series over budget; keeping the worst", family=name,
                            unhealthy=int(ids.size), max_series=self._max)
            ids, states, reasons = ids[keep], states[keep], reasons[keep]
        names, rows = self._location(entity, ids)
        family = GaugeMetricFamily(name, text, labels=[*names, "state"])
        why = GaugeMetricFamily(f"{name}_reason", f"Why ({name}): one series per reason.", labels=[names[0], "reason"])
        state_names = STATE_NAMES[entity]
        for row, state, mask in zip(rows, states.tolist(), reasons.tolist(), strict=True):
            family.add_metric([*row, state_names[state]], 1.0)
            for reason in reason_names(mask):
                why.add_metric([row[0], reason], 1.0)
        yield family
        yield why
