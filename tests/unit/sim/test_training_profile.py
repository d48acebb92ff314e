"""Specification of the training profile: agents out of phase with skewed
clocks and 25 ms jitter, traffic that swings x16 within each step with every
byte counter the exact integral of that swing up to its agent's sample, a
fleet of partial UltraServers with 8 EFA ports a node, and a job mix with an
idle UltraServer (docs/simulator-profiles.md)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from rainierd.fleet.topology import Topology
from rainierd.sim.fleet import FleetModel, FleetParams, TickSample
from rainierd.sim.frames import tick_batches
from rainierd.sim.profile import PROFILES, Profile
from rainierd.sim.stepcycle import StepCycle

TRAINING = PROFILES["training"]
FLEET = TRAINING.fleet(8, name="training-8")
START_S = 1_000.0


def run(ticks: int, *, profile: Profile = TRAINING, topo: Topology = FLEET, seed: int = 3,
        noise: float = 1.0) -> tuple[FleetModel, list[TickSample]]:
    """Return the model and copies of ``ticks`` ticks' samples at a 1 s tick."""
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=1.0, start_s=START_S, profile=profile,
                       params=FleetParams(noise=noise))
    out = []
    for k in range(ticks):
        s = model.step(k)
        out.append(replace(s, chips=s.chips.copy(), links=s.links.copy(), efa=s.efa.copy()))
    return model, out


def numeric_integral(cycle: StepCycle, from_s: float, to_s: float, phase: float, points: int = 200_001) -> float:
    """Return the integral of the cycle's rate by the trapezoid rule on a fine grid (independent of ``seconds``)."""
    t = np.linspace(from_s, to_s, points)
    r = cycle.rate(t, np.full(points, phase))
    return float(np.sum((r[1:] + r[:-1]) / 2.0) * (to_s - from_s) / (points - 1))


class TestStepCycle:
    CYCLE = StepCycle(period_s=6.0, comm_share=0.25, swing=16.0)

    def test_levels_swing_and_average_one(self) -> None:
        """The collective phase runs x16 the compute phase, and a whole step averages 1."""
        c = self.CYCLE
        assert (c.high / c.low, c.comm_share * c.high + (1 - c.comm_share) * c.low) == (
            pytest.approx(16.0), pytest.approx(1.0))

    @pytest.mark.parametrize(("from_s", "to_s", "phase"), [(0.0, 1.0, 0.0), (0.3, 1.7, 0.9), (5.2, 19.9, 0.41),
                                                          (1e6 + 0.1, 1e6 + 1.05, 0.77)])
    def test_seconds_is_the_integral_of_the_rate(self, from_s: float, to_s: float, phase: float) -> None:
        """``seconds`` equals the rate's integral over any interval, across cycle boundaries and far from 0."""
        got = float(self.CYCLE.seconds(np.array([from_s]), np.array([to_s]), np.array([phase]))[0])
        assert got == pytest.approx(numeric_integral(self.CYCLE, from_s, to_s, phase), rel=1e-4)

    def test_refuses_a_shape_without_collectives(self) -> None:
        """A comm share of 0 or a swing below 1 is not a step cycle."""
        with pytest.raises(ValueError, match="step cycle"):
            StepCycle(period_s=6.0, comm_share=0.0, swing=16.0)


class TestClocks:
    def test_frames_carry_skewed_out_of_phase_timestamps(self) -> None:
        """Each agent stamps its frames with its own clock: a fixed offset within +-1.5 s of its true sample
        time, which is its own phase of the tick plus 25 ms of jitter; the batches carry those stamps."""
        _model, samples = run(40)
        stamped = np.array([s.node_t_s for s in samples])
        sampled = np.array([s.node_sampled_t_s for s in samples])
        nominal = np.array([s.t_s for s in samples])[:, None]
        offset = stamped - sampled
        present = FLEET.node_present
        assert np.ptp(offset, axis=0).max() < 1e-9  # fixed per agent
        assert (np.abs(offset[0]) <= 1.5).all()
        assert (offset[0].max() > 0.5, offset[0].min() < -0.5) == (True, True)  # both ways
        phase = sampled - nominal
        assert np.ptp(phase.mean(axis=0)) > 0.3  # agents out of phase with each other
        assert np.std(phase - phase.mean(axis=0), axis=0).mean() == pytest.approx(0.025, rel=0.2)
        batch = [f for _t, f in tick_batches(FLEET, samples[-1], publisher="p", nodes_per_batch=64)
                 if hasattr(f, "node_t_s")]
        sent = np.concatenate([f.node_t_s for f in batch])  # type: ignore[union-attr]
        assert sent.tolist() == samples[-1].node_t_s[present].tolist()


class TestTraffic:
    def interval_rates(self, profile: Profile) -> tuple[FleetModel, list[TickSample], np.ndarray, np.ndarray]:
        """Return a noise-free run's EFA counter deltas and true intervals per tick and port."""
        model, samples = run(14, profile=profile, noise=0.0)
        t = np.array([s.node_sampled_t_s for s in samples])[:, FLEET.efa_node]
        counts = np.array([s.efa["tx_bytes_total"].astype(np.float64) for s in samples])
        return model, samples, np.diff(counts, axis=0), np.diff(t, axis=0)

    def test_counters_are_the_exact_integral_of_the_swing(self) -> None:
        """Over each interval and over a whole step, a port's byte delta is its mean rate times the integral of
        its job's step cycle between its agent's true sample times (to a byte a tick)."""
        model, samples, delta, _dt = self.interval_rates(TRAINING)
        assert model.cycle is not None
        sampled = np.array([s.node_sampled_t_s for s in samples])
        phases = model.training.cycle_phase()[model.training.efa_group]
        used = np.flatnonzero(FLEET.node_present[FLEET.efa_node] & (delta[-1] > 0))[::37]
        for port in used:
            node = FLEET.efa_node[port]
            integral = np.array([numeric_integral(model.cycle, sampled[k, node] - START_S,
                                                  sampled[k + 1, node] - START_S, phases[port])
                                 for k in range(6, 12)])
            per_second = delta[6:12, port] / integral  # the port's mean rate: one value
            assert np.ptp(per_second) / per_second.mean() < 1e-4
            step = delta[6:12, port].sum()  # six 1 s intervals: one 6 s step
            assert step == pytest.approx(per_second.mean() * integral.sum(), rel=1e-4, abs=6.0)

    def test_swing_is_visible_within_a_step(self) -> None:
        """Interval rates of one port swing by ~x16 over a step, and agents of one job sampled at the same tick
        see different rates; with flat traffic (the realistic profile) neither happens."""
        _model, _samples, delta, dt = self.interval_rates(TRAINING)
        present = FLEET.node_present[FLEET.efa_node] & (delta[-1] > 0)
        rate = (delta / dt)[6:, present]
        assert (rate.max(axis=0) / rate.min(axis=0)).max() > 12.0
        assert (rate[-1].max() / rate[-1].min()) > 4.0
        flat = replace(TRAINING, step_swing=1.0)
        _model, _samples, delta, dt = self.interval_rates(flat)
        rate = (delta / dt)[6:, present]
        assert (rate.max(axis=0) / rate.min(axis=0)).max() < 1.01

    def test_link_gauge_is_the_counter_interval_average(self) -> None:
        """A NeuronLink's bandwidth gauge is its counter's delta over its agent's true interval."""
        _model, samples = run(6)
        a, b = samples[-2:]
        assert a.node_sampled_t_s is not None
        assert b.node_sampled_t_s is not None
        dt = (b.node_sampled_t_s - a.node_sampled_t_s)[FLEET.link_node]
        delta = b.links["tx_bytes_total"].astype(float) - a.links["tx_bytes_total"].astype(float)
        assert delta / dt == pytest.approx(b.links["bw_bytes_s"].astype(float), rel=1e-6, abs=2.0)


class TestFleet:
    def test_partial_ultraservers_and_eight_ports(self) -> None:
        """Every fourth UltraServer is partial (3, then 2 nodes), nodes have 8 EFA ports, over 3 sites."""
        nodes = FLEET.node_present.reshape(-1, 4).sum(axis=1)
        assert (nodes.tolist(), FLEET.efa_ports_per_node, FLEET.n_sites) == ([4, 4, 4, 3, 4, 4, 4, 2], 8, 3)

    def test_absent_nodes_publish_nothing(self) -> None:
        """The batches hold the present nodes only."""
        _model, samples = run(1)
        batch = [f for _t, f in tick_batches(FLEET, samples[0], publisher="p", nodes_per_batch=64)
                 if hasattr(f, "node")]
        sent = np.concatenate([f.node for f in batch])  # type: ignore[union-attr]
        assert sent.tolist() == np.flatnonzero(FLEET.node_present).tolist()

    def test_job_mix_leaves_an_idle_ultraserver(self) -> None:
        """The profile runs the job mix: jobs hold most UltraServers and at least one idles."""
        _model, samples = run(2)
        truth = samples[-1].truth
        assert truth.jobs
        assert truth.unallocated is not None
        assert len(truth.unallocated) >= 1

    def test_noisy_trickles_differ_by_port(self) -> None:
        """Healthy ports retransmit at a trickle that differs from port to port (as in the realistic profile)."""
        model, _samples = run(1)
        trickle = model.statics.efa_retrans_per_s
        assert trickle.min() > 0
        assert trickle.max() / trickle.min() > 10

    def test_healthy_retransmits_follow_the_packets_each_port_sends(self) -> None:
        """Over 5 minutes with noise off (no bursts), a healthy port retransmits its trickle's share of the packets
        it sends (its trickle at full traffic, Poisson): idle ports retransmit nothing, and the fleet's
        retransmits are the expected count, within four Poisson deviations."""
        model, samples = run(300, noise=0.0)
        first, last = samples[0].efa, samples[-1].efa
        sent = (last["tx_bytes_total"] - first["tx_bytes_total"]).astype(float) / 8_192.0
        retrans = (last["retrans_pkts_total"] - first["retrans_pkts_total"]).astype(float)
        full_bytes_s = model.hw.efa_port_bytes_s * model.params.efa_load * model.statics.efa_share
        per_packet = model.statics.efa_retrans_per_s / (full_bytes_s / 8_192.0)
        expected = float((per_packet * sent).sum())
        assert abs(retrans.sum() - expected) < 4.0 * np.sqrt(expected)
        idle = sent == 0
        assert idle.any()
        assert retrans[idle].tolist() == [0.0] * int(idle.sum())
