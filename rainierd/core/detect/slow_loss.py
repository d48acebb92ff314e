"""Slow EFA loss (docs/detection.md, layer 4): Poisson CUSUMs per port of its
retransmits against the packets it sent, so they mean the same at any tick
and at any load.

Retransmits follow traffic (a share of the packets sent is lost and resent,
as the EFA driver's counters show): a port's own rate is learned per packet
sent, and each interval's in-control rate is that share of the packets it
sent in it, so a busy phase, a job starting on idle ports or a port twice
as busy as its neighbours is not a rise (issue 38: rates learned per second
raised 7, 108 and 219 of 300 healthy ports whose retransmits followed their
traffic, at 1, 2 and 4 retransmits a second).  An interval in which a port
sent nothing says nothing about its loss: it is neither judged nor learned
(its ratio is unknown, not 0 and not infinite).  Packets are the bytes sent
over ``loss_packet_bytes``: the wire carries the driver's ``tx_bytes``, not
its ``tx_pkts``.  The tests count retransmits, so one retransmit over a few
packets is one count against a threshold of at least ``loss_h_min``.

In control: the port's own rate per packet (``RateBaseline``: its history,
shrunk to its site's background with a prior of ``loss_prior_s`` seconds of
its site's typical traffic) times the packets it sends, taken
``loss_margin_se`` posterior deviations high.  Out of control: that rate plus
``loss_detect`` of the packets it sends (a loss fraction, so the test means the
same at any load), tuned to no rise smaller than it could show within
``loss_horizon_s``; and in CUSUMs of their own, rises to ``1 + loss_detect_ratio``
(its trickle tripled) and ``1 + loss_detect_ratios_extra`` times its own rate
(their in-control rate taken ``loss_ratio_margin_se`` deviations high once the
rate rests on enough retransmits); each at least ``loss_min_per_s`` and at
least ``loss_uncertain_se`` posterior deviations, so a rate still uncertain is
tested only for a rise its uncertainty cannot explain.  Each port's threshold
is set by its own rate, so every port has the same false-alarm rate: Wald's
bound puts the chance that a healthy excursion reaches h under
exp(-loss_exponent).  Counts a port can add in one interval are capped, so a burst is not loss.  The EFA
detector owns one test, and reads each port's own rate from it (its
retransmit CUSUM judges bursts above that rate).  ``arrays``/``load`` carry
what it learned across a monitor restart (``core/learned.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from rainierd import native
from rainierd._types import F32, I64, B
from rainierd.core.detect._baseline import RateBaseline, fit, take
from rainierd.core.detect._stats import PeerSample, log1p


@dataclass(frozen=True, slots=True, kw_only=True)
class SlowLossParams:
    """Thresholds of the slow-loss test (docs/detection.md, layer 4, justifies them)."""

    loss_detect: float = 2e-7
    # A rise of twice the port's rate (x3) is tested for by a CUSUM of its own: a busy port's trickle
    # tripled is far more than 2e-7 of what it sends, and the fraction test reads most of it as bursts.
    loss_detect_ratio: float = 2.0
    # ... and rises of these multiples of its rate, each in a CUSUM of its own (as the tripled test): a test
    # tuned to a tripling barely drifts up under a rise of 50-100 %, and the fraction test, its in-control
    # rate taken high, loses a third of such a rise to that margin (issue 22: 3e-7 of loss on a port of
    # 0.2-0.5/s).  Each is held to Wald's bound on its own: four tests, at most four times e^-20.
    loss_detect_ratios_extra: tuple[float, ...] = (0.5, 1.0)
    loss_min_per_s: float = 0.05
    # The horizon a rise must show within (issue 22: 15 minutes): the fraction test is tuned to no rise
    # smaller than it could show in that time (``SlowLossTest._findable``).
    loss_horizon_s: float = 900.0
    loss_exponent: float = 20.0
    loss_h_min: float = 10.0  # packets: the threshold of a port whose rate is near zero
    loss_packet_bytes: float = 8_192.0  # EFA's SRD packet (jumbo frames), to turn bytes into packets
    loss_floor_per_s: float = 0.01  # the in-control rate assumed at least, a second, whatever the traffic
    loss_background_halflife_s: float = 600.0  # how slowly each site's background adapts
    # Seconds of its site's background a port's own rate starts from, at its site's typical traffic: the gamma
    # prior's weight.  Ports of a site differ by a lognormal sigma of ~0.7 (docs/detection.md, layer 4): a gamma
    # of that spread weighs 1 / (CV^2 x rate) = 1.6 / rate seconds, 2-8 s at the sites' 0.2-0.8/s; 10 s is
    # that, rounded up.
    loss_prior_s: float = 10.0
    # A port is judged for slow loss once it has loss_judge_s of its own history, and its rate is taken
    # loss_margin_se posterior deviations high, the rise tested at least loss_uncertain_se of them: what it
    # does not know yet about its rate is neither read as loss nor lets a rate it underestimates drift up
    # to h (docs/detection.md, layer 4, gives the false-alarm figures).  Until loss_learn_s every sample is
    # learned at once; from then on, with the delay of loss_delay_s.
    loss_judge_s: float = 120.0
    loss_learn_s: float = 600.0
    loss_margin_se: float = 2.0
    loss_uncertain_se: float = 4.0
    # The ratio tests take a port's rate loss_ratio_margin_se posterior deviations high once it rests on
    # loss_ratio_settled_count retransmits of its own (discounted), loss_margin_se before: their reference
    # value is at least 1.2 times the rate, so a settled rate they underestimate still drifts down, and the
    # full margin hid a third of a 3e-7 rise on ports of 0.2-0.5/s.  A port with fewer retransmits learned (a
    # quiet new one: 30 at 0.05/s in 10 minutes) keeps the full margin: its gamma posterior is skewed, the
    # normal deviation too narrow (at 1 deviation from the start, 3 of 12,000 ports of 0.02-0.1/s raised in
    # their first hour; from 100 retransmits, 1 of 3,000 of the realistic sites' in 2 h; from 300, none).
    loss_ratio_margin_se: float = 1.0
    loss_ratio_settled_count: float = 300.0
    # Hysteresis of the loss test, in units of each port's h: raised at 1, cleared under loss_clear,
    # the sum held under loss_ceiling.  Clearing drains (ceiling - clear) h at the healthy drift, about
    # half of what raising took: a rate test cannot know that loss ended much faster than it saw it
    # begin, and a narrower band would let noise during the loss clear and re-raise it.
    loss_ceiling: float = 1.25
    loss_clear: float = 0.75
    loss_delay_s: float = 900.0  # then a port's rate learns what it saw this long ago, if it stayed healthy
    loss_baseline_halflife_s: float = 3_600.0


_SITE_FIELDS = ("background_per_packet", "site_packets_per_s", "background_s")


def _rates(arrays: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    return {name.removeprefix("rates."): value for name, value in arrays.items() if name.startswith("rates.")}


def burst_cap(alternative: F32, dt_s: F32) -> F32:
    """Return the most retransmits an interval counts: a few deviations over the alternative; more is a burst."""
    expected: F32 = alternative * np.fmax(dt_s, np.float32(0.0)).astype(np.float32, copy=False)
    cap: F32 = np.sqrt(expected, dtype=np.float32)
    cap *= np.float32(3.0)
    cap += expected
    cap += np.float32(1.0)
    return cap


@dataclass(eq=False)
class SlowLossTest:
    """Each port's own retransmit rate and its slow-loss CUSUM, for ``n`` ports (``site``: each port's site)."""

    n: int
    sample: PeerSample  # the ports the sites' backgrounds are estimated on
    params: SlowLossParams = field(default_factory=SlowLossParams)
    site: I64 | None = None  # each port's site (None: one site)

    def __post_init__(self) -> None:
        p = self.params
        self.rates = RateBaseline.empty(self.n, halflife_s=p.loss_baseline_halflife_s, prior_s=p.loss_prior_s,
                                        learn_s=p.loss_learn_s, delay_s=p.loss_delay_s)
        # Poisson CUSUMs of retransmits over the port's rate, in their own h, one a row: for a rise of
        # loss_detect of the packets it sends, for one of loss_detect_ratio times its rate (tripled), then one
        # for each of loss_detect_ratios_extra.
        self.sums = np.zeros((2 + len(p.loss_detect_ratios_extra), self.n), np.float32)
        self.lossy = np.zeros(self.n, bool)  # over h, and not yet back under half of it
        if self.site is None:
            self.site = np.zeros(self.n, np.int64)
        self.n_sites = int(self.site.max(initial=-1)) + 1
        self._sample_site = self.sample.pick(self.site)
        # Each site's retransmits per packet sent, bursts clipped (NaN until seen), its ports' packets a second
        # (the traffic its prior is weighed at), and the seconds both have been estimated over (a plain mean at
        # first): the prior of its ports' own rates.
        self.background_per_packet = np.full(self.n_sites, np.nan)
        self.site_packets_per_s = np.full(self.n_sites, np.nan)
        self.background_s = np.zeros(self.n_sites)

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """Return copies of what it has learned: each port's rate and each site's background."""
        out = {f"rates.{name}": value for name, value in self.rates.arrays().items()}
        return out | {name: getattr(self, name).copy() for name in _SITE_FIELDS}

    def check(self, arrays: Mapping[str, npt.NDArray[Any]]) -> None:
        """Raise ValueError unless ``arrays`` fit ``load``."""
        for name in _SITE_FIELDS:
            fit(arrays, name, getattr(self, name))
        self.rates.check(_rates(arrays))

    def load(self, arrays: Mapping[str, npt.NDArray[Any]]) -> None:
        """Take back ``arrays()``; raises ValueError, changing nothing, unless every array fits."""
        self.check(arrays)
        self.rates.load(_rates(arrays))
        for name in _SITE_FIELDS:
            setattr(self, name, take(arrays, name, getattr(self, name)))

    def _by_site(self, values: npt.NDArray[np.float64]) -> F32:
        """Return each port's site's figure, the sites' mean where its site has none yet (0 before any)."""
        seen = np.isfinite(values)
        fleet = float(values[seen].mean()) if seen.any() else 0.0
        by_site = np.nan_to_num(values, nan=fleet).astype(np.float32)
        assert self.site is not None
        return by_site[self.site] if self.n_sites > 1 else np.full(self.n, by_site[0], np.float32)

    def per_packet(self) -> F32:
        """Return each port's baseline retransmits per packet sent: its own history, shrunk to its site's."""
        return self.rates.rate(self._by_site(self.background_per_packet), self._prior_packets())

    def _prior_packets(self) -> F32:
        """Return the weight of each port's prior: ``loss_prior_s`` of its site's typical traffic, in packets."""
        prior = self._by_site(self.site_packets_per_s)
        prior *= np.float32(self.params.loss_prior_s)
        return prior

    def own_rate(self, sent_packets_s: F32) -> F32:
        """Return each port's in-control retransmits a second at the traffic it sends now (``sent_packets_s``):
        its share per packet times its packets, at least ``loss_floor_per_s`` (NaN where its traffic is unknown)."""
        rate = self.per_packet()
        rate *= sent_packets_s
        np.fmax(rate, np.float32(self.params.loss_floor_per_s), out=rate, where=np.isfinite(rate))
        return rate

    def update(self, counts: F32, dt_s: F32, fresh: B, own_rate: F32, sent_packets_s: F32) -> B:
        """Fold each port's retransmits into its loss CUSUMs; return where any is over its threshold.

        The in-control rate is the port's own (``own_rate``: its share of
        the packets it sends, from its history, starting from its site's
        background, estimated on the peer sample with each port's count
        capped, adapting over ``loss_background_halflife_s``), so a trickle
        a port or its site always had is not a fault, and neither is one
        every port shares, nor one that rises with the port's traffic.  A
        port that sent nothing (``sent_packets_s`` 0 or unknown) is not
        judged.

        Taken ``loss_margin_se`` posterior deviations high (gamma-Poisson:
        the rate over the seconds of traffic its history and prior are worth
        at the traffic it sends now): what it does not know yet about its
        rate is not loss; and no rise smaller than ``loss_uncertain_se``
        deviations is tested for, nor than ``loss_min_per_s``.  The ratio
        tests take it ``loss_ratio_margin_se`` deviations high once it rests
        on ``loss_ratio_settled_count`` retransmits.

        One CUSUM is tuned to ``loss_detect`` of the packets a port sends
        (silent loss at the bottom of the CorrOpt band), at least the
        smallest rise it could show within ``loss_horizon_s``, about
        sqrt(2 E r / T): a rise d over a rate r gains d^2 / 2r of
        log-likelihood a second, so the threshold's E = ``loss_exponent``
        takes 2 E r / d^2 seconds, and a test tuned to a smaller rise cannot
        raise within the horizon at all.  The others are tuned to rises of
        ``loss_detect_ratio`` (its own rate tripled: not the in-control
        rate's, whose margin tripled would test a quiet new port for a rise
        ~40 % above its own) and ``loss_detect_ratios_extra`` times its
        rate, each at least the uncertain spread: one test cannot serve all,
        since a cap that lets a tripled trickle count lets a busy port's
        bursts count too, and a test tuned to a tripling barely drifts up
        under a rise of half the rate.

        Counts above a few standard deviations of the alternative are a
        burst (``burst_cap``), not a rate: in the fraction test a burst
        counts as the alternative's mean, so bursts add no more evidence of
        loss than loss itself would; in the ratio tests, whose alternatives
        are far above the rate, as the port's own rate: no evidence at all.
        Before there is a background, nothing is a burst, and the first
        interval only sets the background.

        Each step is Lucas's Poisson CUSUM between rate r and r + d:
        reference value k = d / ln(1 + d / r), so each step is the
        log-likelihood ratio of the two rates over ln(1 + d / r), and by
        Wald's bound a healthy excursion reaches h packets with chance at
        most exp(-h ln(1 + d / r)): h = ``loss_exponent`` / ln(1 + d / r)
        (at least ``loss_h_min``) gives every port the same false-alarm
        rate.  (The Brownian approximation, exp(-2 (k - r) h / r), agrees
        for d << r and is too low a threshold for a rise of a few times r:
        13 of loss_exponent's 20 for a tripling, measured as false alarms.)
        Sums are in units of each test's h; no one interval raises alone (a
        step is at most a quarter of h: after a long gap, a burst or two in
        one interval would otherwise read as minutes of loss).  A port is
        judged only once its own rate has ``loss_judge_s`` of history:
        before, its rate is mostly its site's.  Hysteresis: raised at h,
        cleared once every test is under ``loss_clear`` of it, so noise
        around the threshold during a fault is one detection; the ceiling
        bounds how long it takes to clear once the loss has ended.

        Computed in three compiled passes over the ports (``native.SlowLossPorts``),
        the logarithms between them in numpy: as some sixty numpy passes
        with their temporaries, ~80 ms of rainier-1m's tick (issue 39).
        """
        p = self.params
        started = bool(np.isfinite(self.background_per_packet).any())
        ports = native.SlowLossPorts(
            counts=counts, dt_s=dt_s, fresh=fresh, own_rate=own_rate, sent_packets_s=sent_packets_s,
            exposure=self.rates.exposure, prior=self._prior_packets(), count=self.rates.count,
            history_s=self.rates.history_s, started=started,
            figures=(p.loss_margin_se, p.loss_ratio_margin_se, p.loss_ratio_settled_count, p.loss_uncertain_se,
                     p.loss_min_per_s, p.loss_detect, 2.0 * p.loss_exponent / p.loss_horizon_s, p.loss_judge_s,
                     p.loss_exponent, p.loss_h_min, p.loss_ceiling, p.loss_clear),
            ratios=(p.loss_detect_ratio, *p.loss_detect_ratios_extra))
        self._update_background(*ports.sample(self.sample.index))
        if not started:  # the first interval only sets the background
            return np.zeros(self.n, bool)
        ratios = ports.ratios()
        log_ratio = log1p(ratios.reshape(-1)).reshape(ratios.shape)
        ports.step(log_ratio, self.sums, self.lossy)
        return self.lossy

    def _update_background(self, clipped: F32, interval: F32, packets: F32, ok: F32) -> None:
        """Fold this interval of the peer sample's ports (each one's count with bursts clipped, its seconds,
        its packets, and 1 where it counts) into each site's retransmits per packet and packets a second (the
        prior of its ports' own rates)."""
        p = self.params
        sample_ok = ok != 0
        sample_dt = interval
        if not (sample_dt[sample_ok] > 0).any():
            return
        sites = self._sample_site[sample_ok]
        seconds = np.bincount(sites, weights=sample_dt[sample_ok], minlength=self.n_sites)
        sent = np.bincount(sites, weights=packets[sample_ok], minlength=self.n_sites)
        counted = np.bincount(sites, weights=clipped[sample_ok], minlength=self.n_sites)
        seen = (seconds > 0) & (sent > 0)
        now = np.divide(counted, sent, out=np.zeros(self.n_sites), where=seen)
        traffic = np.divide(sent, seconds, out=np.zeros(self.n_sites), where=seen)
        step_s = float(np.median(sample_dt[sample_ok]))
        # A plain mean over what has been seen, until that is longer than the half-life allows.
        self.background_s[seen] += step_s
        weight = np.fmax(1.0 - 0.5 ** (step_s / p.loss_background_halflife_s),
                         step_s / np.fmax(self.background_s, step_s))
        first = seen & ~np.isfinite(self.background_per_packet)
        later = seen & ~first
        for estimate, value in ((self.background_per_packet, now), (self.site_packets_per_s, traffic)):
            estimate[first] = value[first]
            estimate[later] += weight[later] * (value[later] - estimate[later])

    def learn(self, retrans: F32, own_rate: F32, fresh: B, dt: F32, sent_packets_s: F32, *, settled_s: float,
              healthy: B) -> None:
        """Fold the retransmits into each port's own rate per packet sent: learned after a delay, if the port
        stayed healthy; an interval in which it sent nothing (or whose traffic is unknown) is not learned.

        A burst (a count beyond a few deviations of the rate it has learned)
        counts as that rate: bursts are not the trickle, and a rate that
        learned them would hide loss.  For its first seconds a port caps
        bursts only loosely (ten times its rate, plus ten): a strict cap near
        a rate still at the prior would hold a port that really retransmits
        more at the prior for good.  Bursts are told only once a port has
        ``settled_s`` of history; a port learns only while ``healthy`` and not lossy.
        """
        interval = np.fmax(dt, np.float32(0.0)).astype(np.float32, copy=False)
        counted = np.fmax(retrans, np.float32(0.0)).astype(np.float32, copy=False)
        loose = own_rate * interval
        loose *= np.float32(10.0)
        loose += np.float32(10.0)
        np.minimum(counted, loose, out=counted)
        settled = self.rates.history_s >= np.float32(settled_s)
        burst = settled & (counted > burst_cap(own_rate, interval))
        np.copyto(counted, own_rate * interval, where=burst)
        clean = healthy & ~self.lossy
        sent = sent_packets_s * interval
        self.rates.update(counted, dt, accept=fresh & np.isfinite(retrans) & (sent > 0), clean=clean, exposure=sent)
