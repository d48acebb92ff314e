"""Specification of the NeuronLink evidence pass (``native.LinkEvidence``, behind ``LinkDetector.update``): on a
simulated fleet whose links degrade, go down, flap, storm with CRC errors and fall silent, every link's CUSUMs,
drops, ratios, learned levels, states and reasons, and the state changes, are the numpy detector's (bd1c9ba)
byte for byte, tick after tick."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rainierd._types import F32
from rainierd.core.detect._common import Reason, counter_delta, flag, new_samples, persistence_seconds
from rainierd.core.detect._paths import DOWN, NEEDS
from rainierd.core.detect._stats import robust_center_scale
from rainierd.core.detect._tracker import Transitions
from rainierd.core.detect.neuronlink import LinkDetector
from rainierd.core.detect.nodepaths import NodeSignal
from rainierd.sim.faults import Fault, FaultKind
from tests.unit.native._oracles import compare_ticks, deviation


class _NumpyLinks(LinkDetector):
    """LinkDetector.update as numpy computed it before the pass (bd1c9ba): the oracle."""

    def _per_link(self, per_kind: F32) -> F32:
        """Return each link's figure of its kind, by broadcasting over the nodes' common link order."""
        return np.tile(per_kind[self.kind_order], self.state.topology.n_nodes).astype(np.float32, copy=False)

    def update(self, tick: int) -> Transitions:
        p, table = self.params, self.state.links
        fresh = new_samples(table, self.seen) & table.has(*NEEDS["neuronlink"])
        np.copyto(self.seen, table.samples)
        dt = table.dt_s
        held = persistence_seconds(dt, fresh, self.sample, self.state.node_cadence.typical_s())
        share = table.gauges["bw_bytes_s"] / self._per_link(self.nominal)
        latency = table.gauges["latency_us"]
        lanes = table.gauges["lanes_up"]
        up = lanes > 0
        _, lat_center = self._traffic_centers(share, latency, fresh & up)
        pace = self._pace(share, fresh & up)
        self.node_signal = NodeSignal.of(pace.reshape(-1), dt, fresh, per_node=self.per_node,
                                         values_per_node=pace.shape[1])
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio_of_pace = pace / self.share_ref
        talking = ratio_of_pace > np.float32(p.idle_below)
        np.copyto(self.talking, talking, where=np.isfinite(ratio_of_pace))
        communicating = talking[:, self.kind_order].reshape(-1)
        grid = share.reshape(-1, self.per_node)
        with np.errstate(invalid="ignore", divide="ignore"):
            for k, cols in enumerate(self.kind_columns):
                grid[:, cols] /= pace[:, k:k + 1]
        node_share = share
        ratio = node_share / self.bw_base.reference(1.0)
        np.copyto(ratio, np.float32(1.0), where=~communicating)
        bw_judged = fresh & up & communicating
        _, bw_scale = robust_center_scale(ratio, bw_judged, floor=p.bw_floor, sample=self.sample)
        np.copyto(self.now_ratio, ratio, where=fresh)
        all_lanes = self.hardware.neuronlink_lanes
        low = fresh & (ratio < p.down_below) & up
        down = ~up | (low & self.was_low)
        np.copyto(self.was_low, low, where=fresh)
        retrained = counter_delta(table, "replay_total") >= np.float32(p.retrain_replays)
        below = np.maximum(np.float32(p.drop_below), np.float32(1.0) - np.float32(p.drop_min_s) / held)
        full = communicating & (lanes == all_lanes)
        dropped = fresh & (down | (full & (ratio < below) & retrained))
        self._count_drops(dropped, fresh, table.dt_s, held)
        bw_dev = np.subtract(np.float32(1.0), ratio, dtype=np.float32)
        bw_dev /= np.float32(bw_scale)
        lat_ok = fresh & up & (latency > 0)
        kind_latency = self._per_link(lat_center)
        lat_dev = deviation(latency, self.latency_base.reference(kind_latency), lat_ok, floor=p.latency_floor,
                            sample=self.sample)
        kind_latency *= np.float32(p.latency_band)
        far_latency = lat_ok & (latency > kind_latency)
        far_level = self.bw_base.learned() & (self.bw_base.level < np.float32(p.bandwidth_band))
        reasons = np.zeros(share.shape, dtype=np.int32)
        flag(reasons, up & (lanes < all_lanes), Reason.LANES)
        judged = bw_judged & ~down
        outside = self.band.update((far_latency | far_level).astype(np.float32), fresh, seconds=held)
        flag(reasons, self.bw.update(bw_dev, judged & self.bw_base.learned(), seconds=held) | (outside & far_level),
             Reason.BANDWIDTH)
        flag(reasons, self.latency.update(lat_dev, lat_ok & ~down & self.latency_base.learned(), seconds=held)
             | (outside & far_latency), Reason.LATENCY)
        errors = counter_delta(table, "crc_errors_total", "replay_total")
        errors /= dt
        flag(reasons, self.errors.update(errors, fresh, seconds=held), Reason.ERRORS)
        flag(reasons, self.drops >= p.flap_drops, Reason.FLAPPING)
        flag(reasons, dropped, Reason.DOWN)
        candidate = ((reasons & ~np.int32(Reason.FLAPPING)) != 0).astype(np.int8)
        candidate[dropped] = DOWN
        changes = self._track(candidate, reasons, fresh, tick, held)
        self._learn(node_share, latency, fresh & up & ~dropped & communicating, lat_ok, held)
        return changes


_COMPARED = ("sums", "now_ratio", "was_low", "drops", "was_dropped", "down_s", "last_down_s", "up_s", "talking",
             "share_ref")


def _state(links: LinkDetector) -> dict[str, npt.NDArray[np.generic]]:
    out = {name: getattr(links, name) for name in _COMPARED}
    for name in ("level", "history_s"):
        out[f"bw_base.{name}"] = getattr(links.bw_base, name)
        out[f"latency_base.{name}"] = getattr(links.latency_base, name)
    out["state"], out["reason"] = links.tracker.state, links.tracker.reason
    return out


def test_every_links_evidence_and_state_is_the_numpy_detectors_tick_after_tick() -> None:
    faults = [Fault(FaultKind.NL_DEGRADED, 70, 0.5, 40, 140), Fault(FaultKind.NL_DOWN, 300, 0.0, 45, 100),
              Fault(FaultKind.NL_FLAPPING, 500, 4.0, 50, 150), Fault(FaultKind.NL_CRC_STORM, 700, 80.0, 40, 130),
              Fault(FaultKind.NODE_LOST, 9, 0.0, 60, 110), Fault(FaultKind.EFA_NODE_DEGRADED, 3, 0.5, 40, 150)]
    raised = compare_ticks(faults, seed=3, ticks=170, detector=lambda core: core.detector.links,
                           oracle=lambda core: _NumpyLinks(core.state), state=_state)  # type: ignore[arg-type]
    assert raised  # links were raised: the comparison covered faults, not only health
