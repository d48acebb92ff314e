"""Specification of slow EFA loss (docs/detection.md, layer 4) as issue 22 asks
for it: a port whose retransmits rise to three times its own rate is found
within 15 minutes of the rise, a new port is judged within 10 minutes, the
noisy-but-steady trickles of healthy ports (lognormal across ports, per-site
backgrounds, bursts) never raise, and a monitor restarted from its checkpoint
judges as if it had never stopped."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from structlog.testing import capture_logs

from harness.waits import wait_until
from rainierd.core.analysis import MonitorCore
from rainierd.core.config import MonitorConfig
from rainierd.core.detect._stats import PeerSample
from rainierd.core.detect.slow_loss import SlowLossParams, SlowLossTest
from rainierd.core.learned import VERSION, LearnedStateError
from rainierd.fleet.topology import build_fleet, build_topology
from rainierd.monitor import Monitor
from rainierd.monitor.checkpoint_file import load_checkpoint, save_checkpoint
from rainierd.monitor.checkpointing import Checkpointer
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.sim.profile import PROFILES
from tests.helpers import hear
from tests.unit.monitor.test_monitor import tick_messages

REALISTIC = PROFILES["realistic"]
SITE_RATES = REALISTIC.site_retrans_per_s  # (0.2, 0.8, 0.4) retransmits a second, each port lognormal around it
SENT_BYTES_S = 4.9e9  # a port at the simulator's 20 % load: 3e-7 of it is 0.18 packets a second
BURST_PER_S = REALISTIC.spike_per_s  # a burst of ~50 retransmits, per port-second
FIFTEEN_MINUTES_S = 900.0
# The quietest trickles whose tripling is promised to show within 15 minutes: a port with an hour of history, the
# realistic profile's 2nd percentile (0.2/s x e^(-2 x 0.7)); a new port, at 10 minutes of history, its 16th
# (0.2/s x e^(-0.7)): ten minutes of a quieter port hold too few retransmits (60) to know its rate to ~15 %.
QUIETEST_PER_S = 0.05
QUIETEST_NEW_PER_S = 0.1


def drive(test: SlowLossTest, rate: np.ndarray, *, seconds: float, dt_s: float, rng: np.random.Generator,
          onset_s: float | None = None, faulty: np.ndarray | None = None, start_s: float = 0.0,
          rise_per_s: float | None = None, sent_bytes_s: float = SENT_BYTES_S) -> np.ndarray:
    """Feed ``test`` Poisson retransmits at ``rate`` (x3 on ``faulty`` from ``onset_s``, or ``rise_per_s`` more)
    plus bursts, each port sending ``sent_bytes_s``, as the EFA detector does (own rate, update, learn); return
    each port's first raise, in seconds after the onset (NaN: never raised), or after ``start_s`` without an
    onset.  The rate is per packet sent once learned: a run that changes ``sent_bytes_s`` but not ``rate``
    changes the ports' loss."""
    n = rate.size
    dts, fresh = np.full(n, dt_s, np.float32), np.ones(n, bool)
    sent = np.full(n, sent_bytes_s / SlowLossParams().loss_packet_bytes, np.float32)  # packets a second
    first = np.full(n, np.nan)
    faulty_rate = 3.0 * rate if rise_per_s is None else rate + rise_per_s
    for step in range(int(seconds / dt_s)):
        now_s = start_s + step * dt_s
        now_rate = rate if onset_s is None or now_s < onset_s else np.where(faulty, faulty_rate, rate)
        counts = rng.poisson(now_rate * dt_s).astype(np.float32)
        burst = rng.random(n) < -np.expm1(dt_s * np.log1p(-BURST_PER_S))
        counts[burst] += rng.poisson(50.0, int(burst.sum()))
        own = test.own_rate(sent)
        lossy = test.update(counts, dts, fresh, own, sent)
        first[lossy & np.isnan(first)] = now_s - (onset_s if onset_s is not None else start_s)
        test.learn(counts, own, fresh, dts, sent, settled_s=30.0, healthy=~lossy)
    return first


def ports(n_per_site: int, rng: np.random.Generator, *, sigma: float = 0.7,
          sites: tuple[float, ...] = SITE_RATES) -> tuple[np.ndarray, np.ndarray]:
    """Return (each port's site, each port's healthy trickle): its site's rate times a lognormal of ``sigma``."""
    site = np.repeat(np.arange(len(sites)), n_per_site)
    return site, np.asarray(sites)[site] * rng.lognormal(0.0, sigma, site.size)


class TestStatistics:
    """The test alone on Poisson trickles with bursts: many ports, fast."""

    @pytest.mark.parametrize("seed", [0, 1, 2])
    @pytest.mark.parametrize("sites", [SITE_RATES, (0.05, 2.0)], ids=["realistic-sites", "quiet-and-noisy-sites"])
    def test_a_new_port_tripling_its_trickle_after_ten_minutes_is_found_within_fifteen(
        self, seed: int, sites: tuple[float, ...],
    ) -> None:
        """Ports no monitor has seen, one in four tripling its trickle once it has 10 minutes of history: every
        one with a trickle of at least 0.1/s is raised within 15 minutes of the rise, and no port that did not
        change is raised."""
        rng = np.random.default_rng(seed)
        site, rate = ports(100, rng, sites=sites)
        faulty = np.zeros(rate.size, bool)
        faulty[::4] = True
        test = SlowLossTest(rate.size, PeerSample.of(rate.size), SlowLossParams(), site=site)
        first = drive(test, rate, seconds=600.0 + FIFTEEN_MINUTES_S, dt_s=1.0, rng=rng, onset_s=600.0, faulty=faulty)
        judged = faulty & (rate >= QUIETEST_NEW_PER_S)
        assert judged.sum() >= 20
        assert np.isfinite(first[judged]).all(), f"missed trickles {rate[judged & np.isnan(first)]}"
        assert (first[judged] <= FIFTEEN_MINUTES_S).all()
        assert np.isnan(first[~faulty]).all()

    def test_the_same_rise_on_a_port_with_a_long_history_is_found_within_fifteen_minutes(self) -> None:
        """Ports with an hour of history (their rates learned with the delay) tripling: raised within 15 minutes,
        the median within 5."""
        rng = np.random.default_rng(7)
        site, rate = ports(100, rng)
        faulty = np.zeros(rate.size, bool)
        faulty[::8] = True
        test = SlowLossTest(rate.size, PeerSample.of(rate.size), SlowLossParams(), site=site)
        first = drive(test, rate, seconds=3_600.0 + FIFTEEN_MINUTES_S, dt_s=5.0, rng=rng, onset_s=3_600.0,
                      faulty=faulty)
        found = first[faulty & (rate >= QUIETEST_PER_S)]
        assert (found <= FIFTEEN_MINUTES_S).all()
        assert np.median(found) <= 300.0
        assert np.isnan(first[~faulty]).all()

    @pytest.mark.parametrize("dt_s", [1.0, 5.0])
    def test_noisy_but_steady_trickles_never_raise_over_thousands_of_port_hours(self, dt_s: float) -> None:
        """3,000 new ports (three sites at 0.2, 0.8 and 0.4/s, lognormal sigma 0.7 across ports, a burst of ~50
        every 200 s a port) over 2 h at 1 s and 6 h at 5 s: 6,000 and 18,000 port-hours, their first hours
        (the least known) among them, and no raise.  At loss_exponent 12 the same control raised 1 port in
        18,000 port-hours, each two units of exponent dividing that by ~7 (docs/detection.md, layer 4): at 20,
        about 4e-4, so a raise here is a change in the test, not bad luck (p < 0.1 %)."""
        rng = np.random.default_rng(11)
        site, rate = ports(1_000, rng)
        test = SlowLossTest(rate.size, PeerSample.of(rate.size), SlowLossParams(), site=site)
        first = drive(test, rate, seconds=7_200.0 if dt_s == 1.0 else 21_600.0, dt_s=dt_s, rng=rng)
        assert int(np.isfinite(first).sum()) == 0

    @pytest.mark.parametrize("seed", [0, 1, 2])
    def test_a_quiet_new_port_tripling_after_ten_minutes_is_found_within_fifteen(self, seed: int) -> None:
        """New ports quieter than 0.1/s (sites at 0.03, 0.05 and 0.08/s, a lognormal of 0.3 across ports), every
        other one tripling once it has 10 minutes of history (30 retransmits at 0.05/s): every one of at least
        0.1/s, 9 in 10 of 0.07-0.1/s and 8 in 10 of 0.05-0.07/s raised within 15 minutes of the rise, and no
        port that did not change (docs/detection.md, layer 4: ten minutes of a port of 0.05/s cannot promise
        all)."""
        rng = np.random.default_rng(100 + seed)
        site, rate = ports(150, rng, sigma=0.3, sites=(0.03, 0.05, 0.08))
        faulty = np.zeros(rate.size, bool)
        faulty[::2] = True
        test = SlowLossTest(rate.size, PeerSample.of(rate.size), SlowLossParams(), site=site)
        first = drive(test, rate, seconds=600.0 + FIFTEEN_MINUTES_S, dt_s=1.0, rng=rng, onset_s=600.0, faulty=faulty)
        found = np.isfinite(first) & (first <= FIFTEEN_MINUTES_S)
        assert found[faulty & (rate >= 0.1)].all(), f"missed {rate[faulty & (rate >= 0.1) & ~found]}"
        for low, high, share in ((0.07, 0.1, 0.9), (0.05, 0.07, 0.8)):
            band = faulty & (rate >= low) & (rate < high)
            assert band.sum() >= 30
            assert found[band].mean() >= share, f"{low}-{high}/s: {found[band].sum()} of {band.sum()}"
        assert np.isnan(first[~faulty]).all()

    @pytest.mark.parametrize("seed", [0, 1])
    def test_loss_of_3e_7_after_half_an_hour_is_found_within_fifteen_minutes(self, seed: int) -> None:
        """Silent loss of 3e-7 as the simulator injects it (0.18 retransmits/s more, on a port whose mean traffic
        is 1 GB/s: the training profile's) on ports of three sites (0.2, 0.8, 0.4/s, lognormal 0.7) after 30
        minutes of history: 9 in 10 ports under 0.2/s, two in three of 0.2-0.35/s and one in seven of
        0.35-0.5/s raised within 15 minutes, and no port that did not change (at fcbc50c: 4 in 5, 1 in 10 and
        none; a noisier port cannot show a rise of 0.18/s within 15 minutes at e^-20, docs/detection.md)."""
        rng = np.random.default_rng(200 + seed)
        site, rate = ports(300, rng)
        faulty = np.zeros(rate.size, bool)
        faulty[::4] = True
        test = SlowLossTest(rate.size, PeerSample.of(rate.size), SlowLossParams(), site=site)
        first = drive(test, rate, seconds=1_800.0 + FIFTEEN_MINUTES_S, dt_s=1.0, rng=rng, onset_s=1_800.0,
                      faulty=faulty, rise_per_s=0.18, sent_bytes_s=1.05e9)
        found = np.isfinite(first) & (first >= 0.0) & (first <= FIFTEEN_MINUTES_S)
        for low, high, share in ((0.0, 0.2, 0.9), (0.2, 0.35, 0.65), (0.35, 0.5, 0.15)):
            band = faulty & (rate >= low) & (rate < high)
            assert band.sum() >= 30
            assert found[band].mean() >= share, f"{low}-{high}/s: {found[band].sum()} of {band.sum()}"
        assert np.isnan(first[~faulty]).all()

    def test_quiet_new_ports_never_raise_in_their_first_hours(self) -> None:
        """6,000 new ports quieter than a site's usual trickle (0.02, 0.05 and 0.1/s, lognormal 0.7: a few tens
        of retransmits learned in their first minutes, the least known rates there are) over 2 h, with bursts:
        no raise."""
        rng = np.random.default_rng(12)
        site, rate = ports(2_000, rng, sites=(0.02, 0.05, 0.1))
        test = SlowLossTest(rate.size, PeerSample.of(rate.size), SlowLossParams(), site=site)
        first = drive(test, rate, seconds=7_200.0, dt_s=1.0, rng=rng)
        assert int(np.isfinite(first).sum()) == 0

    def test_a_port_s_prior_is_its_site_s_background(self) -> None:
        """Before it has history a port's rate is its site's, not the fleet's: sites four times apart in optics
        give their new ports rates four times apart."""
        rng = np.random.default_rng(3)
        site, rate = ports(200, rng, sigma=0.0, sites=(0.2, 0.8))
        test = SlowLossTest(rate.size, PeerSample.of(rate.size), SlowLossParams(), site=site)
        drive(test, rate, seconds=60.0, dt_s=1.0, rng=rng)
        test.rates = type(test.rates).empty(rate.size, halflife_s=3_600.0, prior_s=10.0)  # forget the ports
        own = test.own_rate(np.full(rate.size, SENT_BYTES_S / SlowLossParams().loss_packet_bytes, np.float32))
        assert own[site == 0].mean() == pytest.approx(0.2, rel=0.25)
        assert own[site == 1].mean() == pytest.approx(0.8, rel=0.25)


def simulate(core: MonitorCore, model: FleetModel, *, ticks: range, port: int, onset_s: float,
             rng: np.random.Generator) -> list[tuple[float, int, tuple[str, ...]]]:
    """Run ``model`` into ``core`` for ``ticks``, port ``port`` retransmitting three times its own trickle from
    ``onset_s``; return every EFA raise as (seconds after the onset, port, reasons)."""
    topo, tick_s = core.topology, model.tick_s
    rate = float(model.statics.efa_retrans_per_s[port])  # the port's true trickle, to triple
    out = []
    for tick in ticks:
        sample = model.step(tick)
        if tick * tick_s >= onset_s:  # kept in the model's records: a counter only grows
            sample.efa["retrans_pkts_total"][port] += np.uint64(rng.poisson(2.0 * rate * tick_s))
        events = core.step([f for _t, f in tick_frames(topo, sample, publisher="t")], now_s=tick * tick_s).events
        out += [(tick * tick_s - onset_s, e.id, e.reasons) for e in events if e.entity == "efa" and e.raised]
    return out


TICK_S = 5.0


def realistic(seed: int) -> tuple[MonitorCore, FleetModel]:
    """Three sites of one UltraServer each (192 ports, the realistic profile's three trickles)."""
    topo = build_fleet(3, 1)
    return MonitorCore(topo), FleetModel(topo, np.random.default_rng(seed), tick_s=TICK_S, start_s=0.0,
                                         profile=REALISTIC)


class TestRestartBeforeSlowLoss:
    """A slow-loss test taken back from its arrays just before loss begins judges as if it had never stopped."""

    def test_loss_just_after_a_restart_is_found_as_without_the_restart_and_not_by_a_new_test(self) -> None:
        """Half an hour learned, the arrays taken back by a new test, 3e-7 of loss (0.18/s more) on one port in
        four from the first second after: the restored test finds as many of them within 15 minutes as one that
        never stopped (give or take two), and a test with nothing learned (judging after 2 minutes, learning
        the loss as the port's rate) finds under half as many."""
        rng = np.random.default_rng(21)
        site, rate = ports(100, rng)
        faulty = np.zeros(rate.size, bool)
        faulty[::4] = True
        kept = SlowLossTest(rate.size, PeerSample.of(rate.size), SlowLossParams(), site=site)
        drive(kept, rate, seconds=1_800.0, dt_s=1.0, rng=rng)
        restored = SlowLossTest(rate.size, PeerSample.of(rate.size), SlowLossParams(), site=site)
        restored.load(kept.arrays())
        new = SlowLossTest(rate.size, PeerSample.of(rate.size), SlowLossParams(), site=site)
        found = {}
        for name, test in (("kept", kept), ("restored", restored), ("new", new)):
            first = drive(test, rate, seconds=FIFTEEN_MINUTES_S, dt_s=1.0, rng=np.random.default_rng(22),
                          onset_s=1_800.0, start_s=1_800.0, faulty=faulty, rise_per_s=0.18)
            assert np.isnan(first[~faulty]).all()
            found[name] = int((np.isfinite(first[faulty]) & (first[faulty] <= FIFTEEN_MINUTES_S)).sum())
        assert found["kept"] >= 25
        assert abs(found["restored"] - found["kept"]) <= 2
        assert found["new"] < found["restored"] / 2

    def test_the_window_held_back_is_saved_and_taken_back(self) -> None:
        """What a port's rate holds back for its delay (the window being gathered and the one before it) is in
        the arrays a checkpoint saves, so retransmits seen before a restart are neither lost nor learned early."""
        rng = np.random.default_rng(23)
        site, rate = ports(10, rng)
        test = SlowLossTest(rate.size, PeerSample.of(rate.size), SlowLossParams(), site=site)
        drive(test, rate, seconds=2_000.0, dt_s=5.0, rng=rng)
        arrays = test.arrays()
        assert (arrays["rates.held_seconds"] > 0).all()
        assert (arrays["rates.pending_seconds"] > 0).all()
        back = SlowLossTest(rate.size, PeerSample.of(rate.size), SlowLossParams(), site=site)
        back.load(arrays)
        assert all(np.array_equal(arrays[k], back.arrays()[k], equal_nan=True) for k in arrays)


class TestSimulated:
    """Through the whole monitor core, on the realistic profile."""

    @pytest.mark.parametrize(("seed", "port"), [(0, 5), (1, 70), (2, 150)], ids=["site-0.2", "site-0.8", "site-0.4"])
    def test_a_port_tripling_its_trickle_ten_minutes_after_the_monitor_starts_is_found_within_fifteen(
        self, seed: int, port: int,
    ) -> None:
        """Ten minutes into a monitor's life (every port new) one port's retransmits triple: that port, and no
        other of the 192 (96 port-hours of control a seed), raised for loss_rate within 15 minutes."""
        core, model = realistic(seed)
        onset_s = 600.0
        raised = simulate(core, model, ticks=range(int((onset_s + FIFTEEN_MINUTES_S) / TICK_S)), port=port,
                          onset_s=onset_s, rng=np.random.default_rng(seed))
        assert [(p, "loss_rate" in reasons) for _at, p, reasons in raised] == [(port, True)]
        assert 0.0 < raised[0][0] <= FIFTEEN_MINUTES_S


class TestRestart:
    """A monitor restarted from its checkpoint file keeps what it learned."""

    def test_a_restart_costs_no_learning(self, tmp_path: Path) -> None:
        """Half an hour learned, the checkpoint saved on the way out, a new monitor core restored from the files:
        every learned array is back, and a port that triples its trickle a minute after the restart is raised
        within 15 minutes, as if there had been no restart."""
        path = tmp_path / "streams.npz"
        first, model = realistic(4)
        rng = np.random.default_rng(4)
        restart_tick, port = int(1_800 / TICK_S), 70
        onset_s = restart_tick * TICK_S + 60.0
        assert simulate(first, model, ticks=range(restart_tick), port=port, onset_s=1e9, rng=rng) == []
        fleet = "rainier-test"
        asyncio.run(Checkpointer(path, first.ingest, fleet=fleet, learned=first).save(final=True))
        second = MonitorCore(first.topology)
        with capture_logs() as logs:
            assert Checkpointer(path, second.ingest, fleet=fleet, learned=second).restore()
        assert "learned-state checkpoint restored: baselines continue" in [e["event"] for e in logs]
        saved, back = first.learned(), second.learned()
        assert saved.keys() == back.keys()
        assert all(np.array_equal(saved[k], back[k], equal_nan=saved[k].dtype.kind == "f") for k in saved)
        raised = simulate(second, model, ticks=range(restart_tick, restart_tick + int(960 / TICK_S)), port=port,
                          onset_s=onset_s, rng=rng)
        assert [(p, "loss_rate" in reasons) for _at, p, reasons in raised] == [(port, True)]
        assert 0.0 < raised[0][0] <= FIFTEEN_MINUTES_S


    async def test_the_monitor_saves_its_learned_state_on_the_way_out_and_takes_it_back(
        self, tmp_path: Path,
    ) -> None:
        """A monitor with a state file, analysing until it is stopped: the learned file is written (the stop
        waits for it), and a new monitor started from the state file holds every array the first one learned."""
        path = tmp_path / "streams.npz"
        first = Monitor(build_topology("demo"), MonitorConfig(tick_s=0.05), checkpoint_file=path)
        for messages in tick_messages(3):
            for topic, payload in messages:
                hear(first, topic, payload)
        analysing = asyncio.create_task(first.analyse())
        await wait_until(lambda: first.checkpointer is not None and first.checkpointer.saves >= 2, 10, "analyses")
        analysing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await analysing
        assert first.checkpointer is not None
        assert first.checkpointer.learned_path.exists()
        assert first.checkpointer.learned_failures == 0
        saved = first.core.learned()
        assert np.isfinite(saved["efa.share.level"]).any()  # it did learn something to carry over
        second = Monitor(build_topology("demo"), MonitorConfig(tick_s=0.05), checkpoint_file=path)
        second.restore()
        back = second.core.learned()
        assert all(np.array_equal(saved[k], back[k], equal_nan=saved[k].dtype.kind == "f") for k in saved)


class TestRefused:
    """A learned-state file that does not belong to this monitor is refused with its reason, never half used."""

    @staticmethod
    def saved(tmp_path: Path, core: MonitorCore, **changes: np.ndarray) -> Path:
        path = tmp_path / "streams.npz"
        save_checkpoint(path.with_name("streams.npz.learned"), core.learned() | changes, fleet="f")
        return path

    @staticmethod
    def restore_logs(path: Path, core: MonitorCore) -> list[dict[str, object]]:
        with capture_logs() as logs:
            Checkpointer(path, core.ingest, fleet="f", learned=core).restore()
        return [e for e in logs if "learned" in str(e["event"])]

    def test_another_layout_is_refused_and_nothing_taken(self, tmp_path: Path) -> None:
        """A file of another layout version: refused, the reason logged, every baseline as it was."""
        core = MonitorCore(build_fleet(1, 1))
        path = self.saved(tmp_path, core, version=np.array(VERSION + 1),
                          **{"efa.share.level": np.ones(core.topology.n_efa, np.float32)})
        logs = self.restore_logs(path, core)
        assert [(e["event"], e["error_type"]) for e in logs] == [
            ("learned-state checkpoint not used; baselines learn afresh", "LearnedStateError")]
        assert f"this monitor reads layout {VERSION}" in str(logs[0]["reason"])
        assert np.isnan(core.detector.efa.share_base.level).all()

    def test_another_topology_is_refused(self, tmp_path: Path) -> None:
        """Learned on a fleet numbered otherwise (two UltraServers, not one): refused, saying so."""
        path = self.saved(tmp_path, MonitorCore(build_fleet(1, 2)))
        logs = self.restore_logs(path, MonitorCore(build_fleet(1, 1)))
        assert "another topology" in str(logs[0]["reason"])

    def test_an_array_that_does_not_fit_changes_nothing(self) -> None:
        """One array of the wrong size among good ones: LearnedStateError, and not even the good ones are taken."""
        source, target = MonitorCore(build_fleet(1, 1)), MonitorCore(build_fleet(1, 1))
        source.detector.chips.baseline.level[:] = 0.9
        arrays = source.learned() | {"efa.latency.level": np.zeros(3, np.float32)}
        with pytest.raises(LearnedStateError, match="does not fit"):
            target.restore_learned(arrays)
        assert np.isnan(target.detector.chips.baseline.level).all()

    def test_a_negative_duration_is_refused(self) -> None:
        """A history of negative seconds is no monitor's: refused."""
        core = MonitorCore(build_fleet(1, 1))
        arrays = core.learned()
        arrays["efa.slow_loss.rates.history_s"] = np.full(core.topology.n_efa, -1.0, np.float32)
        with pytest.raises(LearnedStateError, match="negative"):
            core.restore_learned(arrays)

    def test_a_checkpoint_without_learned_state_restores_its_accounting_and_says_so(self, tmp_path: Path) -> None:
        """A checkpoint from before learned state was saved (no file beside it): the accounting is restored, and
        the log says the baselines learn afresh."""
        core = MonitorCore(build_fleet(1, 1))
        path = tmp_path / "streams.npz"
        save_checkpoint(path, core.ingest.checkpoint(), fleet="f")
        with capture_logs() as logs:
            assert Checkpointer(path, core.ingest, fleet="f", learned=core).restore()
        assert "no learned-state checkpoint; baselines learn afresh" in [e["event"] for e in logs]

    def test_the_file_holds_what_the_core_learned(self, tmp_path: Path) -> None:
        """The learned file round-trips through the checkpoint format with its version and topology."""
        core = MonitorCore(build_fleet(1, 1))
        path = self.saved(tmp_path, core)
        arrays = load_checkpoint(path.with_name("streams.npz.learned"), fleet="f")
        assert arrays is not None
        assert int(arrays["version"]) == VERSION
        assert str(arrays["topology"]) == core.topology_fingerprint()
