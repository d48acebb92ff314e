"""EFA port health for the whole fleet: healthy, degraded, down or stale, with
the reasons.  Each port is compared with the other ports of its node (one agent
samples them in one frame, so their rates cover the same seconds whatever the
agents' phase and skew, and they carry the same job's traffic) and with its own
usual share of them, through per-port clipped CUSUMs of throughput, latency and
retransmit bursts; the
slow-loss test (``slow_loss.py``) judges the trickle below bursts.  Also what a
degraded port costs its collectives (``slow_path_stretch``).  The driver's own
counters (receive drops, RDMA work-request errors, keep-alives) are judged in
``efa_driver.py``.  A port whose agent reports its device gone (``present``
0) is ``stale`` at once (reason ``absent``), its node's other ports untouched:
priced as a port down (its node's other ports carry its share).
docs/detection.md explains the choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from rainierd import native
from rainierd._types import F32, I32, I64, B
from rainierd.core.detect._baseline import Baseline
from rainierd.core.detect._common import Reason, counter_delta, flag, persistence_seconds
from rainierd.core.detect._paths import DOWN, HEALTHY, NEEDS, PathParams, band, cusum
from rainierd.core.detect._stats import PeerSample, ewma, others_nanmedian, robust_center_scale, row_nanmedian
from rainierd.core.detect._tracker import StateTracker, Transitions
from rainierd.core.detect._warmup import Warmup
from rainierd.core.detect.efa_driver import DriverCounters
from rainierd.core.detect.nodepaths import NodeSignal
from rainierd.core.detect.slow_loss import SlowLossParams, SlowLossTest
from rainierd.core.state import FleetState

STALE = DOWN + 1  # the port's device reported gone: worse than down (nothing of it is known)


@dataclass(frozen=True, slots=True, kw_only=True)
class EfaParams(PathParams):
    """Thresholds of the EFA detector, beyond those it shares with NeuronLinks (``PathParams``)."""

    # Retransmit CUSUMs take rates per second, each step weighted by its interval: the same burst
    # raises in the same seconds at any tick (h is in retransmits; at a 1 s tick, as before).
    retrans_cap: float = 10.0  # retransmits a second above the port's own baseline counted at most
    retrans_k: float = 2.0
    retrans_h: float = 32.0
    ewma_alpha: float = 0.2
    # The driver's counters (efa_driver.py), each a rate per second in its own CUSUM: k a second tolerated, at
    # most cap a second counted, raised at h net.  Receive drops and RDMA work-request errors degrade a port.
    drops_k: float = 1.0
    drops_cap: float = 20.0
    drops_h: float = 40.0
    wr_errors_k: float = 0.02
    wr_errors_cap: float = 1.0
    wr_errors_h: float = 2.4
    wr_errors_hold_s: float = 60.0  # an alarm holds until this long without an error (they come one by one)
    # A present device whose keep-alive counter has not risen for this many of its longest gaps between rises,
    # and this many seconds at least, no longer answers its driver: its port is down.
    keep_alive_intervals: float = 3.0
    keep_alive_after_s: float = 10.0


class Retransmits(NamedTuple):
    """The ports' retransmits in one interval and the traffic they are judged against."""

    counts: F32  # packets retransmitted in the interval (NaN: unknown)
    sent_packets_s: F32  # packets sent a second over it: bytes sent over the SRD packet size (NaN: unknown)
    sending: B  # fresh, and sent something: a loss rate is known
    own_rate: F32  # the port's in-control retransmits a second at that traffic (slow_loss.py)


def slow_path_stretch(latency_ratio: F32, share: F32, retrans_share: F32, *, latency_share: float) -> F32:
    """Return how much a path stretches its group's collective: 1 + latency_share x (L - 1) + r.

    L is its latency over its own level beyond what its lost throughput
    explains (``latency_ratio x share``, at least 1: a degraded path's
    queueing is priced in its throughput share), r the bytes it retransmits
    above its own rate over the bytes it sends (docs/throughput-model.md).
    """
    slower = np.maximum(latency_ratio * share, np.float32(1.0))
    stretch: F32 = (np.float32(1.0) + np.float32(latency_share) * (slower - np.float32(1.0)) + retrans_share)
    return stretch.astype(np.float32, copy=False)


@dataclass(eq=False)
class EfaDetector:
    """EFA port health for the whole fleet, each port compared with itself and the other ports of its node."""

    state: FleetState
    params: EfaParams = field(default_factory=EfaParams)
    loss_params: SlowLossParams = field(default_factory=SlowLossParams)

    def __post_init__(self) -> None:
        topo, p = self.state.topology, self.params
        n = topo.n_efa
        self.per_node = topo.efa_ports_per_node
        self.seen = np.zeros(n, dtype=np.uint32)
        # The throughput's, band's and latency's CUSUMs' sums are the rows of one array, which the evidence
        # pass steps together.
        self.sums = np.zeros((3, n), np.float32)
        self.throughput, self.band, self.latency = (
            replace(made, s=row) for made, row in zip(
                (cusum(n, p, k=p.z_k, h=p.z_h, cap=p.z_cap), band(n, p), cusum(n, p, k=p.z_k, h=p.z_h, cap=p.z_cap)),
                self.sums, strict=True))
        self.retrans = cusum(n, p, k=p.retrans_k, h=p.retrans_h, cap=p.retrans_cap)
        baseline = {"halflife_s": p.baseline_halflife_s, "learn_s": p.baseline_learn_s, "clip": p.baseline_clip}
        self.share_base = Baseline.empty(n, **baseline)  # throughput / the median of its node's other ports
        self.latency_base = Baseline.empty(n, **baseline)
        self.latency_warmup = Warmup.of(n, p.latency_seed_samples)
        self.share = np.full(n, np.nan, np.float32)  # EWMA of throughput / its own share of its node's
        self.latency_ratio = np.full(n, np.nan, np.float32)  # EWMA of latency / its own level
        self.was_low = np.zeros(n, dtype=bool)  # the last sample's traffic was near zero
        self.retrans_share = np.zeros(n, np.float32)  # EWMA of bytes retransmitted above its own rate / bytes sent
        self.sample = PeerSample.of(n)
        self.node_signal = NodeSignal.unknown(topo.n_nodes)  # this analysis's figure a node (nodepaths.py)
        # Owns each port's own retransmit rate, its prior the port's site's (sites differ in optics and cabling).
        self.slow_loss = SlowLossTest(n, self.sample, self.loss_params, site=topo.node_site[topo.efa_node])
        self.driver = DriverCounters.create(n, p)
        # Persistence per state: degraded and down raise_after_s, stale (the device reported gone) none.
        self.tracker = StateTracker.create(n, raise_after_s=[0.0, p.raise_after_s, p.raise_after_s, 0.0],
                                           clear_after_s=p.clear_after_s)

    def update(self, tick: int) -> Transitions:
        """Fold in the ports' new samples; return the state changes."""
        p, table = self.params, self.state.efa
        heard = table.samples > self.seen
        np.copyto(self.seen, table.samples)
        present = ~(table.gauges["present"] == 0)  # unknown (NaN) is not absent
        # A sample with an interval to diff (_common.new_samples) and traffic, of a device not reported gone.
        fresh = heard & np.isfinite(table.dt_s) & table.has(*NEEDS["efa"]) & present
        dt = table.dt_s
        # Evidence, persistence and learning count a sample after a gap as one typical interval.
        held = persistence_seconds(dt, fresh, self.sample, self.state.node_cadence.typical_s())
        rate = table.rates["tx_bytes_total"] + table.rates["rx_bytes_total"]
        np.copyto(rate, np.float32(np.nan), where=~fresh)
        # Traffic follows the job: compare a port with the other ports of its node,
        # so a stalled or slowed node or job does not look like a group of bad ports;
        # then with its own usual share of them (traffic is never perfectly
        # balanced).  Only a node's own ports saw the same seconds: each agent
        # samples at its own phase and skew, and training traffic swings x16
        # within a step, so another node's rate over another stretch of time is
        # no reference (issue 22: all 8 ports of one node "degraded" for 452 s).
        # A port with no other port fresh in its node (a node of one port) has no
        # reference: NaN, not judged on traffic (docs/detection.md, "Peers and time bases").
        ref = self._node_reference(rate, dt, fresh)
        latency = table.gauges["latency_us"]
        # The ports' usual latency, on the peer sample: the reference of a port without history of its own.
        picked = self.sample.pick(latency)
        lat_center, _ = robust_center_scale(picked, self.sample.pick(fresh) & (picked > 0), floor=p.latency_floor)
        ports = native.PortEvidence(rate=rate, ref=ref, latency=latency, fresh=fresh,
                                    share_level=self.share_base.level, share_history=self.share_base.history_s,
                                    lat_level=self.latency_base.level, lat_history=self.latency_base.history_s)
        ratio, active, lat_ratio, lat_judged = ports.sample(self.sample.index, self._figures(lat_center, 1.0, 1.0))
        _, scale = robust_center_scale(ratio, active, floor=p.bw_floor)
        _, lat_scale = robust_center_scale(lat_ratio, lat_judged, floor=p.latency_floor)
        retrans = self._retransmits(fresh)
        bursting, lossy = self._judge_retransmits(retrans, dt, held)
        share, reasons, down, active, lat_ok = ports.evidence(
            self._figures(lat_center, scale, lat_scale),
            (Reason.BANDWIDTH, Reason.LATENCY, Reason.RETRANSMITS, Reason.LOSS_RATE, Reason.DOWN,
             Reason.UNRESPONSIVE),
            dt=dt, held=held, unresponsive_rate=table.rates["unresponsive_remote_events_total"],
            bursting=bursting, lossy=lossy, was_low=self.was_low, share_ewma=self.share,
            lat_ewma=self.latency_ratio, sums=self.sums)
        del ports
        changes = self._verdict(tick, reasons, down, fresh=fresh, heard=heard, present=present, held=held)
        healthy = fresh & (self.tracker.state == HEALTHY)
        self._learn(share, latency, healthy & active, healthy & lat_ok, held)
        self.slow_loss.learn(retrans.counts, retrans.own_rate, retrans.sending, dt, retrans.sent_packets_s,
                             settled_s=p.baseline_learn_s,
                             healthy=(self.tracker.state == HEALTHY) & (self.retrans.s < 0.25 * p.retrans_h))
        return changes

    def _figures(self, lat_center: float, scale: float, lat_scale: float) -> list[float]:
        """Return the evidence pass's figures (``native.EFA_FIGURES``, then each CUSUM's), with this tick's
        latency centre and scales.

        A port is down when its traffic is near zero (``down_below`` of its
        usual share) in two samples running, or its remote unresponsive.  One
        sample is not enough: an agent that restarted twice within a few
        seconds leaves counters that never went backwards but moved only
        since its last start, which reads as one interval of near-zero
        traffic.  Far latency is over ``latency_band`` times the ports' centre.
        """
        p = self.params
        figures = [p.baseline_learn_s, p.down_below, p.ewma_alpha, lat_center, p.latency_band * lat_center, scale,
                   lat_scale]
        for made in (self.throughput, self.band, self.latency):
            figures += [made.k, made.h, made.cap, made.h / made.samples, made.ceiling]
        return figures

    def _retransmits(self, fresh: B) -> Retransmits:
        """Return the ports' retransmits this interval, with the packets they sent and their own rate at that
        traffic.  Retransmits follow the packets a port sends (slow_loss.py): a port that sent nothing has no
        loss rate to judge (unknown, not 0)."""
        table = self.state.efa
        sent_packets_s = table.rates["tx_bytes_total"] / np.float32(self.loss_params.loss_packet_bytes)
        return Retransmits(counter_delta(table, "retrans_pkts_total"), sent_packets_s,
                           fresh & (sent_packets_s > 0), self.slow_loss.own_rate(sent_packets_s))

    def _judge_retransmits(self, retrans: Retransmits, dt: F32, held: F32) -> tuple[B, B]:
        """Return the ports retransmitting in bursts, and those losing packets slowly (slow_loss.py).

        Bursts are judged above the port's own rate at its traffic: a trickle
        it always had, that every port shares, or that rises with what it
        sends is not a fault; and above two of its Poisson deviations a
        second, so a port with a high rate is held to the same false-alarm
        rate as a quiet one.  One retransmit in an interval is no burst: at a
        0.25 s tick it reads as 4 a second, over ``retrans_k``, and a healthy
        port retransmitting in proportion to its traffic would add it to an
        alarm draining after its cause ended (issue 38: a clear 0.5 s past
        ``drain_s + clear_after_s``); a burst of 750 a second, or a loss of
        3e-5 of a busy port's packets (~45 a second), loses one count of
        an interval's.  Slow loss is judged by counts (slow_loss.py), not here.
        """
        p = self.params
        lossy = self.slow_loss.update(retrans.counts, dt, retrans.sending, retrans.own_rate, retrans.sent_packets_s)
        excess = retrans.counts / dt
        excess -= retrans.own_rate
        self._price_retransmits(excess, retrans.sending)
        excess -= np.maximum(np.float32(0.0), 2.0 * np.sqrt(retrans.own_rate) - np.float32(p.retrans_k))
        excess -= np.minimum(retrans.counts, np.float32(1.0)) / dt
        rate_learned = self.slow_loss.rates.history_s >= np.float32(p.baseline_learn_s)
        return self.retrans.update(excess, retrans.sending & rate_learned, seconds=held, drain_seconds=dt), lossy

    def _verdict(self, tick: int, reasons: I32, down: B, *, fresh: B, heard: B, present: B, held: F32) -> Transitions:
        """Add the driver's counters' and the device's presence's reasons to ``reasons`` (efa_driver.py); fold
        this tick's candidates into the tracker and return its changes."""
        table = self.state.efa
        absent = heard & ~present
        dropping, erring, silent_device = self.driver.update(table, heard & np.isfinite(table.dt_s), present, held)
        flag(reasons, dropping, Reason.RX_DROPS)
        flag(reasons, erring, Reason.RDMA_WR_ERRORS)
        flag(reasons, silent_device, Reason.KEEP_ALIVE)
        flag(reasons, absent, Reason.ABSENT)
        candidate = (reasons != 0).astype(np.int8)  # DEGRADED
        candidate[down | silent_device] = DOWN
        candidate[absent] = STALE
        evidence = fresh | absent | ((dropping | erring | silent_device) & heard)
        return self.tracker.update(candidate, reasons, evidence, tick, seconds=held, at_s=table.t_s)

    def _node_reference(self, rate: F32, dt: F32, fresh: B) -> F32:
        """Return each port's reference: the median of its node's fresh ports (NaN with no other one fresh).

        The node's own figure, its ports' mean rate, is kept for the node's
        judgement against the nodes carrying the same work (``node_signal``,
        nodepaths.py): the same seconds make both.

        From three ports a node the median with the port itself is the others'
        (one port off the middle does not move it), at a fifth of the cost at
        rainier (6.5 against 33 ms over 500k ports); with two, a port is
        compared with the other alone.
        """
        self.node_signal = NodeSignal.of(rate, dt, fresh, per_node=self.per_node)
        by_node = rate.reshape(-1, self.per_node)
        if self.per_node < 3:
            ref: F32 = others_nanmedian(by_node).reshape(-1)
            return ref
        ref = np.repeat(row_nanmedian(by_node), self.per_node)
        alone = np.count_nonzero(np.isfinite(by_node), axis=1) < 2
        np.copyto(ref, np.float32(np.nan), where=np.repeat(alone, self.per_node))
        return ref

    def _learn(self, share: F32, latency: F32, share_ok: B, lat_ok: B, held: F32) -> None:
        """Fold the sample into the baselines of healthy ports with little evidence against them (_baseline.py)."""
        p = self.params
        self.share_base.update(share, share_ok & (self.throughput.s < 0.25 * p.z_h), held)
        quiet = lat_ok & (self.latency.s < 0.25 * p.z_h)
        self.latency_base.update(latency, self.latency_warmup.update(self.latency_base, latency, quiet, held), held)

    def _price_retransmits(self, excess_per_s: F32, fresh: B) -> None:
        """Track each port's retransmitted bytes above its own rate as a share of the bytes it sends."""
        table = self.state.efa
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.maximum(excess_per_s, np.float32(0.0)) * np.float32(self.loss_params.loss_packet_bytes)
            share /= table.rates["tx_bytes_total"]
        ok = fresh & np.isfinite(share)
        self.retrans_share = ewma(self.retrans_share, share, ok, alpha=self.params.ewma_alpha)

    def path_fraction(self, *, latency_share: float = 0.0) -> F32:
        """Return, per port, the share of its bandwidth collectives get (1 if healthy), its slowness priced in."""
        out = np.ones(self.state.topology.n_efa, np.float32)
        bad = np.flatnonzero(self.tracker.state)
        out[bad] = self._fraction(bad, latency_share)
        return out

    @property
    def failover_fraction(self) -> float:
        """Return the bandwidth share a node keeps when one of its ports is down (its other ports carry on)."""
        return 1.0 - 1.0 / self.state.topology.efa_ports_per_node

    def _fraction(self, ids: I64, latency_share: float) -> F32:
        """Return the share of a healthy port's pace each port keeps: its throughput share over its stretch.

        A port that keeps its traffic but answers slowly, or retransmits,
        stretches its group's EFA collective by 1 + latency_share x (L - 1) + r
        (docs/throughput-model.md): L its latency over its own level beyond
        what its lost throughput explains (a degraded port's queueing is priced
        in its throughput), r the bytes it retransmits above its own rate over
        the bytes it sends.
        """
        measured = np.clip(np.nan_to_num(self.share[ids], nan=1.0), 0.0, 1.0)
        stretch = slow_path_stretch(np.nan_to_num(self.latency_ratio[ids], nan=1.0), measured,
                                    self.retrans_share[ids], latency_share=latency_share)
        kept = np.maximum(measured / stretch, 0.05)
        down = self.tracker.state[ids] >= DOWN  # down or stale: its node's other ports carry its share
        return np.where(down, np.float32(self.failover_fraction), kept).astype(np.float32)

    def slow_paths(self, *, latency_share: float = 0.0) -> tuple[I64, F32]:
        """Return the unhealthy ports and the fraction each keeps, its slowness priced in (every other port's
        is 1), for reductions over other groupings than the UltraServer (a job's ports: ``core/jobmodel.py``)."""
        bad = self.tracker.unhealthy()
        return bad, self._fraction(bad, latency_share)

    def slowest_by_ultraserver(self, *, latency_share: float = 0.0) -> F32:
        """Return each UltraServer's lowest port fraction (1 where every port is healthy)."""
        topo = self.state.topology
        out = np.ones(topo.n_ultraservers, np.float32)
        bad = np.flatnonzero(self.tracker.state)
        np.minimum.at(out, topo.node_ultraserver[topo.efa_node[bad]], self._fraction(bad, latency_share))
        return out
