"""Health of NeuronLinks and EFA ports: healthy, degraded or down, with the
reasons, from peer comparison (robust median/MAD over links of the same kind,
or EFA ports of the same UltraServer), per-link clipped CUSUMs for gray
degradation, direct evidence (lanes, zero traffic) for hard faults, and a
decaying count of drops for flapping.  docs/detection.md explains the choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from rainierd._types import F32, I64
from rainierd.core.detect._common import Reason, counter_delta, flag, new_samples
from rainierd.core.detect._stats import ClippedCusum, PeerSample, ewma, robust_center_scale, row_nanmedian
from rainierd.core.detect._tracker import StateTracker, Transitions
from rainierd.core.state import FleetState
from rainierd.hardware import TRN2, Trainium2
from rainierd.topology import LINK_KIND_NAMES

__all__ = ["DEGRADED", "DOWN", "HEALTHY", "NEEDS", "EfaDetector", "LinkDetector", "PathParams"]

HEALTHY, DEGRADED, DOWN = 0, 1, 2
NEEDS: Final[dict[str, tuple[str, ...]]] = {
    "neuronlink": ("bw_bytes_s", "lanes_up"),  # latency and error counters are judged when present
    "efa": ("tx_bytes_total", "rx_bytes_total"),  # latency and retransmits are judged when present
}
"""Fields a sample must carry for its link or port to be judged at all."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PathParams:
    """Thresholds of the path detectors (docs/detection.md justifies them)."""

    z_cap: float = 6.0  # most a single tick can add to a deviation CUSUM
    z_k: float = 2.0  # deviation below this many sigmas is noise
    z_h: float = 20.0  # ~5 ticks of a full-cap deviation to raise
    bw_floor: float = 0.01  # smallest bandwidth-ratio sigma believed
    latency_floor: float = 0.02
    # Error and retransmit CUSUMs take rates per second, each step weighted by its interval: the same
    # storm raises in the same seconds at any tick (h is in errors; at a 1 s tick, as before).
    errors_cap: float = 10.0  # errors a second counted at most
    errors_k: float = 3.0  # errors a second that are noise
    errors_h: float = 28.0
    retrans_cap: float = 10.0  # retransmits a second above the fleet's background counted at most
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
    # Slow EFA loss (docs/detection.md, layer 4): a Poisson CUSUM per port of its retransmits against
    # loss_ratio times the fleet's background rate, in packets per second, so it means the same at any
    # tick.  loss_h (packets) trades false alarms for time to detect: 3e-7 loss (~1.9x the 0.2/s
    # background) is found in a median ~4.5 minutes, and no false raise was seen in 1.3e8 port-seconds
    # of fault-free runs.  Counts a port can add in one interval are capped, so a burst is not loss.
    loss_ratio: float = 2.0
    loss_h: float = 30.0
    loss_floor_per_s: float = 0.01  # the background rate assumed at least
    loss_background_halflife_s: float = 600.0  # how slowly the fleet's background adapts


@dataclass(eq=False)
class LinkDetector:
    """NeuronLink health for the whole fleet."""

    state: FleetState
    params: PathParams = field(default_factory=PathParams)
    hardware: Trainium2 = TRN2

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
        topo = self.state.topology
        kind = topo.link_kind
        self.kind = kind.astype(np.int8)
        # Every node reports its links in one order (topology.py), so a kind's
        # figure reaches each link by broadcasting over that order, with no
        # gather over millions of links.
        self.per_node = topo.links_per_node
        self.kind_order = kind[:self.per_node].copy()
        assert (kind.reshape(-1, self.per_node) == self.kind_order).all(), "nodes must share one link order"
        hw = self.hardware
        self.nominal = np.where(kind == 1, hw.neuronlink_ring_bytes_s, hw.neuronlink_intra_bytes_s).astype(np.float32)

    def update(self, tick: int) -> Transitions:
        """Fold in the links' new samples; return the state changes."""
        p, table = self.params, self.state.links
        # A link is judged only on samples that carry its bandwidth and lanes;
        # without them it is unknown (never healthy, never down by default).
        fresh = new_samples(table, self.seen) & table.has(*NEEDS["neuronlink"])
        np.copyto(self.seen, table.samples)
        ratio = table.gauges["bw_bytes_s"] / self.nominal
        raw = ratio.copy()  # bandwidth / nominal, before it is taken relative to the kind's median
        latency = table.gauges["latency_us"]
        lanes = table.gauges["lanes_up"]
        up = lanes > 0
        # Each kind's median and spread, on the peer sample; then one gather
        # gives every link its kind's figures.
        picked = {name: self.sample.pick(a) for name, a in
                  (("ratio", ratio), ("latency", latency), ("fresh", fresh), ("up", up), ("kind", self.kind))}
        n_kinds = len(LINK_KIND_NAMES)
        center, scale = np.ones(n_kinds, np.float32), np.ones(n_kinds, np.float32)
        lat_center, lat_scale = np.ones(n_kinds, np.float32), np.ones(n_kinds, np.float32)
        for kind in range(n_kinds):
            of_kind = picked["fresh"] & (picked["kind"] == kind) & picked["up"]
            center[kind], scale[kind] = robust_center_scale(picked["ratio"], of_kind, floor=p.bw_floor)
            lat_center[kind], lat_scale[kind] = robust_center_scale(
                picked["latency"], of_kind & (picked["latency"] > 0), floor=p.latency_floor, relative=True)
        by_node = (-1, self.per_node)
        order = self.kind_order
        med = center[order]
        bw_dev = (med - ratio.reshape(by_node)).reshape(-1)
        bw_dev.reshape(by_node)[:] /= scale[order]
        lat_dev = (latency.reshape(by_node) / lat_center[order]).reshape(-1)
        lat_dev -= 1.0
        lat_dev.reshape(by_node)[:] /= lat_scale[order]
        np.copyto(lat_dev, 0.0, where=~(latency > 0))
        ratio.reshape(by_node)[:] /= med  # from here on: bandwidth / its kind's median
        self.bw_ratio = ewma(self.bw_ratio, ratio, fresh, alpha=p.ewma_alpha)
        np.copyto(self.now_ratio, ratio, where=fresh)
        errors = counter_delta(table, "crc_errors_total", "replay_total")
        errors /= table.dt_s  # per second

        # Healthy noise never takes a link with all lanes up below drop_below
        # (contention dips bottom out near 0.67 at the default noise, 0.56 at
        # twice it), so such a tick, or a tick ending with no lane up, is the
        # link going down, if only briefly.  (Bandwidth is judged against its
        # kind's median here, which a healthy fleet holds at its nominal.)
        down = ~up | (raw < p.down_below)
        all_lanes = self.hardware.neuronlink_lanes
        dropped = fresh & (down | ((raw < p.drop_below) & (lanes == all_lanes)))
        np.multiply(self.drops, np.float32(np.exp(-1.0 / p.flap_window_ticks)), out=self.drops, where=fresh)
        np.add(self.drops, np.float32(1.0), out=self.drops, where=dropped & ~self.was_dropped)
        np.copyto(self.was_dropped, dropped, where=fresh)

        reasons = np.zeros(ratio.shape, dtype=np.int32)
        flag(reasons, up & (lanes < all_lanes), Reason.LANES)
        judged = fresh & ~down
        # The evidence arrays are spent once added: each is its CUSUM's scratch.
        flag(reasons, self.bw.update(bw_dev, judged, scratch=bw_dev), Reason.BANDWIDTH)
        flag(reasons, self.latency.update(lat_dev, judged, scratch=lat_dev), Reason.LATENCY)
        flag(reasons, self.errors.update(errors, fresh, scratch=errors, seconds=table.dt_s), Reason.ERRORS)
        flag(reasons, self.drops >= p.flap_drops, Reason.FLAPPING)
        flag(reasons, dropped, Reason.DOWN)
        # A drop raises at once; a link that dropped recently must stay clean
        # for flap_hold_ticks before it clears, so a flapping link is one
        # event for its whole episode, never a string of downs.
        candidate = (reasons != 0).astype(np.int8)  # DEGRADED
        candidate[dropped] = DOWN
        np.copyto(self.tracker.hold, p.flap_hold_ticks, where=self.drops > p.recent_drop)
        return self.tracker.update(candidate, reasons, fresh, tick)

    def path_fraction(self) -> F32:
        """Return, per link, the bandwidth share its collectives get now (1 if healthy).

        From the latest sample, not the smoothed one: a flapping link held
        unhealthy between drops costs only while it is actually down.  A link
        that is down now costs half (its traffic reroutes over a neighbour).
        """
        out = np.ones(self.state.topology.n_links, np.float32)
        bad = np.flatnonzero(self.tracker.state)
        out[bad] = self._fraction(bad)
        return out

    def _fraction(self, ids: I64) -> F32:
        lanes = self.state.links.gauges["lanes_up"][ids]
        ratio = self.now_ratio[ids]
        down_now = (lanes == 0) | (ratio < self.params.down_below)
        return np.where(down_now, np.float32(0.5), np.clip(ratio, 0.05, 1.0)).astype(np.float32)

    def slowest_by_ultraserver(self) -> F32:
        """Return each UltraServer's lowest path fraction (1 where every link is healthy).

        Only unhealthy links can be below 1, so only they are visited.
        """
        topo = self.state.topology
        out = np.ones(topo.n_ultraservers, np.float32)
        bad = np.flatnonzero(self.tracker.state)
        np.minimum.at(out, topo.node_ultraserver[topo.link_node[bad]], self._fraction(bad))
        return out


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
        self.loss = np.zeros(n, np.float32)  # Poisson CUSUM of retransmits over the background, packets
        self.lossy = np.zeros(n, bool)  # over loss_h, and not yet back under half of it
        self.background_per_s = float("nan")  # the fleet's retransmit rate per port, bursts clipped
        self._background_s = 0.0  # seconds the background has been estimated over (a plain mean at first)
        self.tracker = StateTracker.create(n, raise_after=[0, p.raise_after, p.raise_after],
                                           clear_after=p.clear_after)

    def update(self, tick: int) -> Transitions:
        """Fold in the ports' new samples; return the state changes."""
        p, table = self.params, self.state.efa
        fresh = new_samples(table, self.seen) & table.has(*NEEDS["efa"])
        np.copyto(self.seen, table.samples)
        rate = table.rates["tx_bytes_total"] + table.rates["rx_bytes_total"]
        np.copyto(rate, np.float32(np.nan), where=~fresh)
        # Traffic follows the job: compare a port with its UltraServer's ports,
        # so a stalled or slowed group does not look like a group of bad ports.
        # An all-NaN group (stalled, silent) has no median: NaN.
        ref = np.repeat(row_nanmedian(rate.reshape(-1, self.per_us)), self.per_us)
        active = fresh & (ref > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = rate / ref
        np.copyto(share, np.float32(1.0), where=~active)
        _, scale = robust_center_scale(share, active, floor=p.bw_floor, sample=self.sample)
        self.share = ewma(self.share, share, active, alpha=p.ewma_alpha)
        latency = table.gauges["latency_us"]
        lat_center, lat_scale = robust_center_scale(latency, fresh, floor=p.latency_floor, sample=self.sample,
                                                    relative=True)
        retrans = counter_delta(table, "retrans_pkts_total")
        slow_loss = self._slow_loss(retrans, table.dt_s, fresh)
        # Retransmit bursts are judged above the fleet's background: a trickle every port shares is not a fault.
        if np.isfinite(self.background_per_s):
            retrans -= np.float32(self.background_per_s) * table.dt_s
        unresponsive = counter_delta(table, "unresponsive_remote_events_total") > 0

        down = active & ((share < p.down_below) | unresponsive)
        shortfall = 1.0 - share
        shortfall /= scale
        lat_dev = latency / lat_center
        lat_dev -= 1.0
        lat_dev /= lat_scale
        reasons = np.zeros(share.shape, dtype=np.int32)
        flag(reasons, self.throughput.update(shortfall, active & ~down), Reason.BANDWIDTH)
        flag(reasons, self.latency.update(lat_dev, fresh & ~down), Reason.LATENCY)
        flag(reasons, self.retrans.update(retrans / table.dt_s, fresh, seconds=table.dt_s), Reason.RETRANSMITS)
        flag(reasons, slow_loss, Reason.LOSS_RATE)
        flag(reasons, down, Reason.DOWN)
        flag(reasons, fresh & unresponsive, Reason.UNRESPONSIVE)
        candidate = (reasons != 0).astype(np.int8)  # DEGRADED
        candidate[down] = DOWN
        return self.tracker.update(candidate, reasons, fresh, tick)

    def _slow_loss(self, counts: F32, dt_s: F32, fresh: np.ndarray) -> np.ndarray:
        """Fold each port's retransmits into its loss CUSUM; return where it is over ``loss_h``.

        The in-control rate is the fleet's own background (a trickle every port
        shares is not a fault), estimated on the peer sample with each port's
        count capped, and adapting over ``loss_background_halflife_s``.
        """
        p = self.params
        ok = fresh & np.isfinite(counts) & (dt_s > 0)
        background = max(self.background_per_s, p.loss_floor_per_s) if np.isfinite(self.background_per_s) \
            else None
        # Counts above a few standard deviations of the alternative are a burst, not a rate (before
        # there is a background, nothing is capped).
        high = p.loss_ratio * (background if background is not None else p.loss_floor_per_s)
        interval = np.where(ok, dt_s, np.float32(0.0))  # seconds each port's count covers (0: none)
        expected = high * interval
        cap = expected + 3.0 * np.sqrt(expected) + 1.0 if background is not None else np.inf
        clipped = np.minimum(np.where(ok, counts, 0.0), cap)
        sample_ok, sample_dt = self.sample.pick(ok), self.sample.pick(interval)
        seconds = float(sample_dt[sample_ok].sum())
        if seconds > 0:
            now = float(self.sample.pick(clipped)[sample_ok].sum()) / seconds
            step_s = float(np.median(sample_dt[sample_ok]))
            # A plain mean over what has been seen, until that is longer than the half-life allows.
            self._background_s += step_s
            weight = max(1.0 - 0.5 ** (step_s / p.loss_background_halflife_s), step_s / self._background_s)
            self.background_per_s = now if not np.isfinite(self.background_per_s) else (
                self.background_per_s + weight * (now - self.background_per_s))
        if background is None:  # the first interval only sets the background
            return np.zeros(counts.shape, bool)
        # Lucas's Poisson CUSUM: reference value k between the background and loss_ratio times it.
        k_per_s = (high - background) / np.log(p.loss_ratio)
        step = clipped - np.float32(k_per_s) * interval
        # No one interval raises alone: after a long gap (a node back from silence) a burst or two in
        # its one interval would otherwise read as minutes of loss.
        np.minimum(step, np.float32(0.25 * p.loss_h), out=step)
        np.add(self.loss, step.astype(np.float32), out=self.loss, where=ok)
        # Hysteresis: raised at loss_h, cleared under half of it, so noise around the threshold during a
        # fault is one detection; the ceiling bounds how long it takes to clear once the loss has ended
        # (a fall of loss_h at the background's drift: ~4 minutes at 0.2/s).
        np.clip(self.loss, 0.0, np.float32(1.5 * p.loss_h), out=self.loss)
        self.lossy |= self.loss >= p.loss_h
        self.lossy &= self.loss > 0.5 * p.loss_h
        return self.lossy

    def path_fraction(self) -> F32:
        """Return, per port, the share of its bandwidth collectives get (1 if healthy)."""
        out = np.ones(self.state.topology.n_efa, np.float32)
        bad = np.flatnonzero(self.tracker.state)
        out[bad] = self._fraction(bad)
        return out

    @property
    def failover_fraction(self) -> float:
        """Return the bandwidth share a node keeps when one of its ports is down (its other ports carry on)."""
        return 1.0 - 1.0 / self.state.topology.efa_ports_per_node

    def _fraction(self, ids: I64) -> F32:
        measured = np.clip(np.nan_to_num(self.share[ids], nan=1.0), 0.0, 1.0)
        down = self.tracker.state[ids] == DOWN
        return np.where(down, np.float32(self.failover_fraction), np.maximum(measured, 0.05)).astype(np.float32)

    def slowest_by_ultraserver(self) -> F32:
        """Return each UltraServer's lowest port fraction (1 where every port is healthy)."""
        topo = self.state.topology
        out = np.ones(topo.n_ultraservers, np.float32)
        bad = np.flatnonzero(self.tracker.state)
        np.minimum.at(out, topo.node_ultraserver[topo.efa_node[bad]], self._fraction(bad))
        return out
