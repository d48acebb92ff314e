"""Specification of the slow-loss passes (``native.SlowLossPorts``, behind ``SlowLossTest.update``): over many
ticks of ports with bursts, rises, gaps, unknown counts, intervals and traffic, the CUSUMs, the verdicts and
the sites' backgrounds are the numpy test's (bd1c9ba) bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from rainierd.core.detect._stats import PeerSample, log1p
from rainierd.core.detect.slow_loss import SlowLossParams, SlowLossTest, burst_cap


def _numpy_update(t: SlowLossTest, *, counts: np.ndarray, dt_s: np.ndarray, fresh: np.ndarray, own_rate: np.ndarray,
                  sent_packets_s: np.ndarray) -> np.ndarray:
    """SlowLossTest.update as numpy computed it before the kernels (bd1c9ba), on ``t``'s state: the oracle."""
    p = t.params

    def rise_of(base: np.ndarray, spread: np.ndarray, times: float) -> np.ndarray:
        rise = own_rate * np.float32(1.0 + times)
        rise -= base
        np.maximum(rise, spread, out=rise)
        return rise

    def steps(counted: np.ndarray, interval: np.ndarray, in_control: np.ndarray, rise: np.ndarray) -> np.ndarray:
        log_ratio = log1p(rise / in_control)
        k_per_s = rise / log_ratio
        h = np.float32(p.loss_exponent) / log_ratio
        np.maximum(h, np.float32(p.loss_h_min), out=h)
        step = (counted - k_per_s * interval).astype(np.float32, copy=False)
        step /= h
        np.minimum(step, np.float32(0.25), out=step)
        return step

    ok = fresh & np.isfinite(counts) & (dt_s > 0) & (sent_packets_s > 0)
    started = bool(np.isfinite(t.background_per_packet).any())
    interval = np.where(ok, dt_s, np.float32(0.0))
    counted = np.where(ok, counts, np.float32(0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        exposure_s = (t.rates.exposure + t._prior_packets()) / sent_packets_s
    spread = np.sqrt(own_rate / exposure_s, dtype=np.float32)
    in_control = spread * np.float32(p.loss_margin_se)
    in_control += own_rate
    settled = t.rates.count >= np.float32(p.loss_ratio_settled_count)
    base = spread * np.where(settled, np.float32(p.loss_ratio_margin_se), np.float32(p.loss_margin_se))
    base += own_rate
    spread *= np.float32(p.loss_uncertain_se)
    np.maximum(spread, np.float32(p.loss_min_per_s), out=spread)
    fraction = np.fmax(sent_packets_s, np.float32(0.0)).astype(np.float32)
    fraction *= np.float32(p.loss_detect)
    np.maximum(fraction, spread, out=fraction)
    findable = in_control * np.float32(2.0 * p.loss_exponent / p.loss_horizon_s)
    np.sqrt(findable, out=findable)
    np.maximum(fraction, findable, out=fraction)
    ratio = rise_of(base, spread, p.loss_detect_ratio)
    by_fraction, by_ratio = counted, counted.copy()
    if started:
        alternative = own_rate + fraction
        burst = counted > burst_cap(alternative, interval)
        by_fraction = np.where(burst, alternative * interval, counted).astype(np.float32)
        burst = by_ratio > burst_cap(base + ratio, interval)
        np.copyto(by_ratio, own_rate * interval, where=burst)
    pick = t.sample.pick
    t._update_background(pick(by_fraction), pick(interval), pick(sent_packets_s * interval), pick(ok))
    if not started:
        return np.zeros(counts.shape, bool)
    judged = ok & (t.rates.history_s >= np.float32(p.loss_judge_s)) & np.isfinite(own_rate)
    tests = [(t.sums[0], steps(by_fraction, interval, in_control, fraction)),
             (t.sums[1], steps(by_ratio, interval, base, ratio))]
    for row, times in zip(t.sums[2:], p.loss_detect_ratios_extra, strict=True):
        rise = rise_of(base, spread, times)
        by_rise = np.where(counted > burst_cap(base + rise, interval), own_rate * interval, counted)
        tests.append((row, steps(by_rise.astype(np.float32, copy=False), interval, base, rise)))
    for cusum, step in tests:
        np.add(cusum, step, out=cusum, where=judged)
        np.clip(cusum, 0.0, np.float32(p.loss_ceiling), out=cusum)
    t.lossy |= (t.sums >= 1.0).any(axis=0)
    t.lossy &= (t.sums > np.float32(p.loss_clear)).any(axis=0)
    return t.lossy


def _pair(n: int, rng: np.random.Generator, params: SlowLossParams, sampled: bool) -> tuple[SlowLossTest, ...]:
    site = rng.integers(0, 3, n).astype(np.int64)
    sample = PeerSample(np.sort(rng.choice(n, n // 3, replace=False)).astype(np.int64)) if sampled \
        else PeerSample.of(n)
    return tuple(SlowLossTest(n, sample, params, site=site) for _ in range(2))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("sampled", [False, True])
def test_sums_verdicts_and_backgrounds_are_numpys_over_many_ticks(seed: int, sampled: bool) -> None:
    rng = np.random.default_rng(seed)
    n = 3_000
    # Judged after 5 s of history, so the CUSUMs move within the run.
    params = SlowLossParams(loss_judge_s=5.0, loss_learn_s=20.0, loss_delay_s=10.0, loss_ratio_settled_count=20.0)
    ours, numpys = _pair(n, rng, params, sampled)
    trickle = rng.lognormal(-1.0, 1.0, n).astype(np.float32)
    lossy_seen = 0
    for step in range(150):
        dt = rng.choice(np.array([1.0, 0.5, 2.0, 0.0, np.nan], np.float32), n, p=[0.8, 0.08, 0.08, 0.02, 0.02])
        sent = rng.choice(np.array([1e5, 3e4, 0.0, np.nan], np.float32), n, p=[0.6, 0.36, 0.02, 0.02])
        rate = np.where(np.arange(n) % 7 == 0, trickle * (1.0 + step / 20.0), trickle)  # every 7th port rises
        counts = rng.poisson(rate * np.nan_to_num(dt)).astype(np.float32)
        counts[rng.random(n) < 0.01] += 60.0  # bursts
        counts[rng.random(n) < 0.01] = np.nan
        fresh = rng.random(n) > 0.03
        own = ours.own_rate(sent)
        assert np.array_equal(own, numpys.own_rate(sent), equal_nan=True)
        own[rng.random(n) < 0.01] = np.nan
        got = ours.update(counts, dt, fresh, own, sent).copy()
        expected = _numpy_update(numpys, counts=counts, dt_s=dt, fresh=fresh, own_rate=own,
                                  sent_packets_s=sent).copy()
        assert ours.sums.tobytes() == numpys.sums.tobytes(), f"tick {step}"
        assert np.array_equal(got, expected)
        for name in ("background_per_packet", "site_packets_per_s", "background_s"):
            assert getattr(ours, name).tobytes() == getattr(numpys, name).tobytes()
        lossy_seen += int(got.sum())
        for test in (ours, numpys):
            test.learn(counts, own, fresh, dt, sent, settled_s=5.0, healthy=~got)
    assert lossy_seen  # the tests raised: the comparison covered CUSUMs over their thresholds
