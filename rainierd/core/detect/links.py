"""Health of NeuronLinks and EFA ports: healthy, degraded or down, with the
reasons, from peer comparison (robust median/MAD over links of the same kind,
or EFA ports of the same UltraServer), per-link clipped CUSUMs for gray
degradation, direct evidence (lanes, zero traffic) for hard faults, and a
decaying count of drops for flapping.  docs/detection.md explains the choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rainierd._types import F32
from rainierd.core.detect._common import Reason, counter_delta, new_samples
from rainierd.core.detect._stats import ClippedCusum, PeerSample, ewma, robust_center_scale, row_nanmedian
from rainierd.core.detect._tracker import StateTracker, Transitions
from rainierd.core.state import FleetState
from rainierd.hardware import TRN2
from rainierd.topology import LINK_KIND_NAMES

__all__ = ["DEGRADED", "DOWN", "HEALTHY", "EfaDetector", "LinkDetector", "PathParams"]

HEALTHY, DEGRADED, DOWN = 0, 1, 2


@dataclass(frozen=True, slots=True, kw_only=True)
class PathParams:
    """Thresholds of the path detectors (docs/detection.md justifies them)."""

    z_cap: float = 6.0  # most a single tick can add to a deviation CUSUM
    z_k: float = 2.0  # deviation below this many sigmas is noise
    z_h: float = 20.0  # ~5 ticks of a full-cap deviation to raise
    bw_floor: float = 0.01  # smallest bandwidth-ratio sigma believed
    latency_floor: float = 0.02
    errors_cap: float = 10.0  # errors a tick counted at most
    errors_k: float = 3.0
    errors_h: float = 28.0
    retrans_cap: float = 10.0
    retrans_k: float = 2.0
    retrans_h: float = 32.0
    down_below: float = 0.05  # bandwidth ratio under which a link is down
    drop_below: float = 0.5  # a tick this low with every lane up counts as a drop (noise x2 dips to 0.56)
    flap_window_ticks: float = 60.0  # decay time of the drop count
    flap_drops: float = 1.8  # ~2 drops within the window is flapping
    flap_hold_ticks: int = 60  # clean ticks a link that dropped needs to clear
    recent_drop: float = 0.3  # drop count above which a drop was recent (~70 ticks)
    raise_after: int = 2
    clear_after: int = 10
    ewma_alpha: float = 0.2


@dataclass(eq=False)
class LinkDetector:
    """NeuronLink health for the whole fleet."""

    state: FleetState
    params: PathParams = field(default_factory=PathParams)

    def __post_init__(self) -> None:
        n = self.state.topology.n_links
        p = self.params
        self.seen = np.zeros(n, dtype=np.uint32)
        self.bw = ClippedCusum.zeros(n, k=p.z_k, h=p.z_h, cap=p.z_cap)
        self.latency = ClippedCusum.zeros(n, k=p.z_k, h=p.z_h, cap=p.z_cap)
        self.errors = ClippedCusum.zeros(n, k=p.errors_k, h=p.errors_h, cap=p.errors_cap)
        self.drops = np.zeros(n, np.float32)
        self.was_dropped = np.zeros(n, dtype=bool)
        self.bw_ratio = np.full(n, np.nan, np.float32)  # EWMA of bandwidth / its kind's median
        self.now_ratio = np.ones(n, np.float32)  # the latest bandwidth / its kind's median
        # A drop (lanes gone, or bandwidth far below any noise) raises at once.
        self.tracker = StateTracker.create(n, raise_after=[0, p.raise_after, 1], clear_after=p.clear_after)
        self.sample = PeerSample.of(n)
        kind = self.state.topology.link_kind
        self.nominal = np.where(kind == 1, TRN2.neuronlink_ring_bytes_s, TRN2.neuronlink_intra_bytes_s).astype(
            np.float32)

    def update(self, tick: int) -> Transitions:
        """Fold in the links' new samples; return the state changes."""
        p, table, topo = self.params, self.state.links, self.state.topology
        fresh = new_samples(table, self.seen)
        self.seen = table.samples.copy()
        ratio = table.gauges["bw_bytes_s"] / self.nominal
        latency = table.gauges["latency_us"]
        lanes = table.gauges["lanes_up"]
        bw_dev, lat_dev = np.zeros_like(ratio), np.zeros_like(ratio)
        med = np.ones_like(ratio)
        for kind in range(len(LINK_KIND_NAMES)):
            of_kind = fresh & (topo.link_kind == kind)
            center, scale = robust_center_scale(ratio, of_kind & (lanes > 0), floor=p.bw_floor, sample=self.sample)
            bw_dev = np.where(of_kind, (center - ratio) / scale, bw_dev)
            med = np.where(of_kind, center, med)
            up = of_kind & (lanes > 0) & (latency > 0)
            lat_center, lat_scale = robust_center_scale(latency, up, floor=p.latency_floor, sample=self.sample,
                                                        relative=True)
            lat_dev = np.where(up, (latency / lat_center - 1.0) / lat_scale, lat_dev)
        self.bw_ratio = ewma(self.bw_ratio, ratio / med, fresh, alpha=p.ewma_alpha)
        self.now_ratio = np.where(fresh, ratio / med, self.now_ratio)
        errors = counter_delta(table, "crc_errors_total") + counter_delta(table, "replay_total")

        # Healthy noise never takes a link with all lanes up below drop_below
        # (contention dips bottom out near 0.67 at the default noise, 0.56 at
        # twice it), so such a tick, or a tick ending with no lane up, is the
        # link going down, if only briefly.
        down = (lanes == 0) | (ratio < p.down_below)
        dropped = fresh & (down | ((ratio < p.drop_below) & (lanes == TRN2.neuronlink_lanes)))
        decay = np.exp(-1.0 / p.flap_window_ticks)
        self.drops = np.where(fresh, self.drops * decay + (dropped & ~self.was_dropped), self.drops)
        self.was_dropped = np.where(fresh, dropped, self.was_dropped)
        flapping = self.drops >= p.flap_drops
        recently_dropped = self.drops > p.recent_drop

        reasons = np.zeros(ratio.shape, dtype=np.int64)
        reasons |= np.where((lanes > 0) & (lanes < TRN2.neuronlink_lanes), int(Reason.LANES), 0)
        reasons |= np.where(self.bw.update(bw_dev, fresh & ~down), int(Reason.BANDWIDTH), 0)
        reasons |= np.where(self.latency.update(lat_dev, fresh & ~down), int(Reason.LATENCY), 0)
        reasons |= np.where(self.errors.update(np.maximum(errors, 0.0), fresh), int(Reason.ERRORS), 0)
        reasons |= np.where(flapping, int(Reason.FLAPPING), 0)
        reasons |= np.where(dropped, int(Reason.DOWN), 0)
        # A drop raises at once; a link that dropped recently must stay clean
        # for flap_hold_ticks before it clears, so a flapping link is one
        # event for its whole episode, never a string of downs.
        candidate = np.where(dropped, DOWN, np.where(reasons != 0, DEGRADED, HEALTHY))
        self.tracker.hold = np.where(recently_dropped, p.flap_hold_ticks, self.tracker.hold)
        return self.tracker.update(candidate, reasons, fresh, tick)

    def path_fraction(self) -> F32:
        """Return, per unhealthy link, the bandwidth share its collectives get now (1 if healthy).

        From the latest sample, not the smoothed one: a flapping link held
        unhealthy between drops costs only while it is actually down.  A link
        that is down now costs half (its traffic reroutes over a neighbour).
        """
        lanes = self.state.links.gauges["lanes_up"]
        down_now = (lanes == 0) | (self.now_ratio < self.params.down_below)
        measured = np.clip(self.now_ratio, 0.05, 1.0)
        return np.where(self.tracker.state == HEALTHY, 1.0, np.where(down_now, 0.5, measured))


@dataclass(eq=False)
class EfaDetector:
    """EFA port health for the whole fleet, each port compared with its UltraServer's."""

    state: FleetState
    params: PathParams = field(default_factory=PathParams)

    def __post_init__(self) -> None:
        topo, p = self.state.topology, self.params
        n = topo.n_efa
        self.per_us = topo.efa_ports_per_node * topo.nodes_per_ultraserver
        self.seen = np.zeros(n, dtype=np.uint32)
        self.throughput = ClippedCusum.zeros(n, k=p.z_k, h=p.z_h, cap=p.z_cap)
        self.latency = ClippedCusum.zeros(n, k=p.z_k, h=p.z_h, cap=p.z_cap)
        self.retrans = ClippedCusum.zeros(n, k=p.retrans_k, h=p.retrans_h, cap=p.retrans_cap)
        self.share = np.full(n, np.nan, np.float32)  # EWMA of throughput / its UltraServer's median
        self.sample = PeerSample.of(n)
        self.tracker = StateTracker.create(n, raise_after=[0, p.raise_after, p.raise_after],
                                           clear_after=p.clear_after)

    def update(self, tick: int) -> Transitions:
        """Fold in the ports' new samples; return the state changes."""
        p, table = self.params, self.state.efa
        fresh = new_samples(table, self.seen)
        self.seen = table.samples.copy()
        rate = np.where(fresh, table.rates["tx_bytes_total"] + table.rates["rx_bytes_total"], np.float32(np.nan))
        # Traffic follows the job: compare a port with its UltraServer's ports,
        # so a stalled or slowed group does not look like a group of bad ports.
        # An all-NaN group (stalled, silent) has no median: NaN.
        group_median = row_nanmedian(np.where(np.isfinite(rate), rate, np.nan).reshape(-1, self.per_us))
        ref = np.repeat(group_median, self.per_us)
        active = fresh & (ref > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(active, rate / ref, 1.0)
        _, scale = robust_center_scale(share, active, floor=p.bw_floor, sample=self.sample)
        self.share = ewma(self.share, share, active, alpha=p.ewma_alpha)
        latency = table.gauges["latency_us"]
        lat_center, lat_scale = robust_center_scale(latency, fresh, floor=p.latency_floor, sample=self.sample,
                                                    relative=True)
        retrans = counter_delta(table, "retrans_pkts_total")
        unresponsive = counter_delta(table, "unresponsive_remote_events_total")

        down = active & ((share < p.down_below) | (unresponsive > 0))
        reasons = np.zeros(share.shape, dtype=np.int64)
        reasons |= np.where(self.throughput.update((1.0 - share) / scale, active & ~down), int(Reason.BANDWIDTH), 0)
        reasons |= np.where(self.latency.update((latency / lat_center - 1.0) / lat_scale, fresh & ~down),
                            int(Reason.LATENCY), 0)
        reasons |= np.where(self.retrans.update(np.maximum(retrans, 0.0), fresh), int(Reason.RETRANSMITS), 0)
        reasons |= np.where(down, int(Reason.DOWN), 0)
        reasons |= np.where(fresh & (unresponsive > 0), int(Reason.UNRESPONSIVE), 0)
        candidate = np.where(down, DOWN, np.where(reasons != 0, DEGRADED, HEALTHY))
        return self.tracker.update(candidate, reasons, fresh, tick)

    def path_fraction(self) -> F32:
        """Return, per port, the share of its bandwidth collectives get (1 if healthy)."""
        state = self.tracker.state
        measured = np.clip(np.nan_to_num(self.share, nan=1.0), 0.0, 1.0)
        failover = 1.0 - 1.0 / self.state.topology.efa_ports_per_node
        return np.where(state == DOWN, failover, np.where(state == DEGRADED, np.maximum(measured, 0.05), 1.0))
