"""Specification of the EFA evidence pass (``native.PortEvidence``, behind ``EfaDetector.update``): on a
simulated fleet whose ports degrade, lose packets, slow down, go down and fall silent with their node, every
port's CUSUMs, EWMAs, learned levels, states and reasons are the numpy detector's (bd1c9ba) byte for byte, tick
after tick."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rainierd.core.detect._common import Reason, counter_delta, flag, persistence_seconds
from rainierd.core.detect._paths import HEALTHY, NEEDS
from rainierd.core.detect._stats import ewma, robust_center_scale
from rainierd.core.detect._tracker import Transitions
from rainierd.core.detect.efa import EfaDetector
from rainierd.sim.faults import Fault, FaultKind
from tests.unit.native._oracles import compare_ticks, deviation


class _NumpyPorts(EfaDetector):
    """EfaDetector.update as numpy computed it before the pass (bd1c9ba): the oracle."""

    def update(self, tick: int) -> Transitions:
        p, table = self.params, self.state.efa
        heard = table.samples > self.seen
        np.copyto(self.seen, table.samples)
        present = ~(table.gauges["present"] == 0)
        fresh = heard & np.isfinite(table.dt_s) & table.has(*NEEDS["efa"]) & present
        dt = table.dt_s
        held = persistence_seconds(dt, fresh, self.sample, self.state.node_cadence.typical_s())
        rate = table.rates["tx_bytes_total"] + table.rates["rx_bytes_total"]
        np.copyto(rate, np.float32(np.nan), where=~fresh)
        ref = self._node_reference(rate, dt, fresh)
        active = fresh & (ref > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.divide(rate, ref, dtype=np.float32)
        np.copyto(share, np.float32(1.0), where=~active)
        ratio = share / self.share_base.reference(1.0)
        _, scale = robust_center_scale(ratio, active, floor=p.bw_floor, sample=self.sample)
        self.share = ewma(self.share, ratio, active, alpha=p.ewma_alpha)
        latency = table.gauges["latency_us"]
        lat_ok = fresh & (latency > 0)
        lat_center, _ = robust_center_scale(latency, lat_ok, floor=p.latency_floor, sample=self.sample)
        lat_reference = self.latency_base.reference(lat_center)
        lat_dev = deviation(latency, lat_reference, lat_ok, floor=p.latency_floor, sample=self.sample)
        with np.errstate(invalid="ignore", divide="ignore"):
            self.latency_ratio = ewma(self.latency_ratio, latency / lat_reference, lat_ok, alpha=p.ewma_alpha)
        retrans = self._retransmits(fresh)
        bursting, lossy = self._judge_retransmits(retrans, dt, held)
        unresponsive = counter_delta(table, "unresponsive_remote_events_total") > 0
        low = active & (ratio < p.down_below)
        down = (low & self.was_low) | (active & unresponsive)
        np.copyto(self.was_low, low, where=fresh)
        shortfall = 1.0 - ratio
        shortfall /= np.float32(scale)
        far_latency = lat_ok & (latency > np.float32(p.latency_band * lat_center))
        reasons = np.zeros(share.shape, dtype=np.int32)
        flag(reasons, self.throughput.update(shortfall, active & ~down & self.share_base.learned(), seconds=held,
                                             drain_seconds=dt), Reason.BANDWIDTH)
        outside = self.band.update(far_latency.astype(np.float32), fresh, seconds=held)
        flag(reasons, self.latency.update(lat_dev, lat_ok & ~down & self.latency_base.learned(), seconds=held,
                                          drain_seconds=dt) | (outside & far_latency), Reason.LATENCY)
        flag(reasons, bursting, Reason.RETRANSMITS)
        flag(reasons, lossy, Reason.LOSS_RATE)
        flag(reasons, down, Reason.DOWN)
        flag(reasons, fresh & unresponsive, Reason.UNRESPONSIVE)
        changes = self._verdict(tick, reasons, down, fresh=fresh, heard=heard, present=present, held=held)
        healthy = fresh & (self.tracker.state == HEALTHY)
        self._learn(share, latency, healthy & active, healthy & lat_ok, held)
        self.slow_loss.learn(retrans.counts, retrans.own_rate, retrans.sending, dt, retrans.sent_packets_s,
                             settled_s=p.baseline_learn_s,
                             healthy=(self.tracker.state == HEALTHY) & (self.retrans.s < 0.25 * p.retrans_h))
        return changes


def _state(ports: EfaDetector) -> dict[str, npt.NDArray[np.generic]]:
    out = {name: getattr(ports, name) for name in ("sums", "share", "latency_ratio", "was_low", "retrans_share")}
    out["retrans"] = ports.retrans.s
    for name in ("level", "history_s"):
        out[f"share_base.{name}"] = getattr(ports.share_base, name)
        out[f"latency_base.{name}"] = getattr(ports.latency_base, name)
    out["state"], out["reason"] = ports.tracker.state, ports.tracker.reason
    out["slow_loss"] = ports.slow_loss.sums
    return out


def test_every_ports_evidence_and_state_is_the_numpy_detectors_tick_after_tick() -> None:
    faults = [Fault(FaultKind.EFA_DEGRADED, 10, 0.4, 40, 140), Fault(FaultKind.EFA_LOSS, 20, 0.02, 40, 150),
              Fault(FaultKind.EFA_DOWN, 33, 0.0, 45, 120), Fault(FaultKind.EFA_SLOW, 47, 4.0, 40, 150),
              Fault(FaultKind.EFA_NODE_DEGRADED, 5, 0.5, 50, 150), Fault(FaultKind.NODE_LOST, 9, 0.0, 60, 110)]
    raised = compare_ticks(faults, seed=5, ticks=170, detector=lambda core: core.detector.efa,
                           oracle=lambda core: _NumpyPorts(core.state), state=_state)  # type: ignore[arg-type]
    assert raised  # ports were raised: the comparison covered faults, not only health
