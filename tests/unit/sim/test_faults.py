"""Specification of fault injection: scenario files, random faults at
calibrated rates, what each fault does to the telemetry, and ground truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rainierd.cli import main
from rainierd.errors import ConfigError
from rainierd.fleet.topology import build_topology
from rainierd.sim.faults import SEVERITIES, Fault, FaultKind, effects, flap_schedule
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.sim.scenarios import load_scenario, random_faults

DEMO = build_topology("demo")
ROOT = Path(__file__).parents[3]


def scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


class TestScenarioFile:
    def test_shipped_scenarios_load(self) -> None:
        """Every scenario in scenarios/ loads against the demo topology."""
        for path in sorted((ROOT / "scenarios").glob("*.toml")):
            assert load_scenario(path, DEMO, tick_s=1.0, rng=np.random.default_rng(0))

    def test_times_become_ticks(self, tmp_path: Path) -> None:
        """at_s and for_s are seconds, turned into ticks of the given length."""
        text = '[[fault]]\nkind = "nl_degraded"\ntarget = 5\nseverity = 0.5\nat_s = 30\nfor_s = 120\n'
        path = scenario(tmp_path, text)
        assert load_scenario(path, DEMO, tick_s=0.5, rng=np.random.default_rng(0)) == [
            Fault(FaultKind.NL_DEGRADED, 5, 0.5, 60, 300, scope="link"),
        ]

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ('[[fault]]\nkind = "meteor"\ntarget = 1\nat_s = 1\nfor_s = 1\n', "meteor"),
            ('[[fault]]\nkind = "nl_down"\ntarget = 99999\nat_s = 1\nfor_s = 1\n', "link 99999 is not in"),
            ('[[fault]]\nkind = "nl_down"\nat_s = 1\nfor_s = 1\n', "missing 'target'"),
            ('[[fault]]\nkind = "straggler"\nscope = "node"\ntarget = 1\nat_s = 1\nfor_s = 1\n', "targets chip"),
            ("[[fault]\n", "s.toml"),
        ],
    )
    def test_errors_name_the_fault(self, tmp_path: Path, text: str, message: str) -> None:
        """A bad scenario raises ConfigError naming the file, the fault and the problem."""
        with pytest.raises(ConfigError, match=message):
            load_scenario(scenario(tmp_path, text), DEMO, tick_s=1.0, rng=np.random.default_rng(0))

    def test_cli_exits_2_on_a_bad_scenario(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`rainierd simulate --scenario bad.toml` exits 2 with one line."""
        path = scenario(tmp_path, '[[fault]]\nkind = "meteor"\ntarget = 1\nat_s = 1\nfor_s = 1\n')
        assert main(["simulate", "--scenario", str(path), "--mqtt-url", "mqtt://127.0.0.1:1", "--log-level",
                     "error"]) == 2
        assert "meteor" in capsys.readouterr().err


class TestRandomFaults:
    def test_deterministic_for_a_seed(self) -> None:
        """The same seed draws the same faults."""
        topo = build_topology("rainier")
        a = random_faults(topo, np.random.default_rng(4), ticks=86_400, tick_s=1.0)
        b = random_faults(topo, np.random.default_rng(4), ticks=86_400, tick_s=1.0)
        assert [f.as_dict() for f in a] == [f.as_dict() for f in b]

    def test_rainier_sees_calibrated_daily_counts(self) -> None:
        """A day of Rainier (499,200 chips) draws about 4.7e-4 x 220/419 x 499,200 = 123 chip failures."""
        counts = [
            sum(f.kind is FaultKind.CHIP_FAILED
                for f in random_faults(build_topology("rainier"), np.random.default_rng(s), ticks=86_400, tick_s=1.0))
            for s in range(5)
        ]
        assert 90 < np.mean(counts) < 160

    def test_acceleration_multiplies_rates(self) -> None:
        """On the demo fleet, an acceleration of 1e5 turns years between faults into minutes."""
        calm = random_faults(DEMO, np.random.default_rng(1), ticks=3_600, tick_s=1.0)
        busy = random_faults(DEMO, np.random.default_rng(1), ticks=3_600, tick_s=1.0, acceleration=1e5)
        assert len(calm) == 0
        assert len(busy) > 10

    def test_flap_schedule_bounds(self) -> None:
        """Flaps are down 0.5-3 s and up 5-30 s."""
        flaps = np.array(flap_schedule(np.random.default_rng(0), 1_000, 1.0))
        assert flaps[:, 0].min() >= 0.5
        assert flaps[:, 0].max() <= 3.0
        assert flaps[:, 1].min() >= 5.0
        assert flaps[:, 1].max() <= 30.0


class TestEffects:
    def test_every_kind_has_an_effect(self) -> None:
        """Each kind at each severity changes something relative to no fault (diurnal at mid-day)."""
        neutral = effects(DEMO, [], 0, diurnal_phase=1.0)
        for kind, severities in SEVERITIES.items():
            for severity in severities:
                scope = "node" if kind in (FaultKind.COOLING_FAN, FaultKind.COOLING_INLET) else ""
                target = 0 if kind is FaultKind.DIURNAL else 3  # the demo fleet has one site
                fault = Fault(kind, target, severity, 0, 100, scope=scope)
                if kind is FaultKind.NL_FLAPPING:
                    fault = Fault(kind, 3, severity, 0, 100, flaps=((2.0, 5.0),))
                got = effects(DEMO, [fault], 0, diurnal_phase=1.0)
                changed = [name for name in vars(neutral) if not np.array_equal(vars(neutral)[name], vars(got)[name])]
                assert changed, (kind, severity)

    def test_inactive_faults_do_nothing(self) -> None:
        """Before its start and from its end a fault has no effect."""
        fault = Fault(FaultKind.NL_DOWN, 3, 0.0, 10, 20)
        for tick in (9, 20):
            assert effects(DEMO, [fault], tick, diurnal_phase=0.0).link_lanes[3] == 8
        assert effects(DEMO, [fault], 10, diurnal_phase=0.0).link_lanes[3] == 0


class TestTelemetryAndTruth:
    def frames_at(self, faults: list[Fault], tick: int) -> tuple[list[object], object]:
        model = FleetModel(DEMO, np.random.default_rng(0), tick_s=1.0, start_s=0.0, faults=faults)
        for k in range(tick + 1):
            sample = model.step(k)
        return [f for _t, f in tick_frames(DEMO, sample, publisher="p")], sample.truth

    def test_failed_chip_reports_once_then_falls_silent(self) -> None:
        """A failed chip's last frame carries one uncorrectable ECC error; later frames leave it out."""
        fault = Fault(FaultKind.CHIP_FAILED, 20, 0.0, 3, 50)
        frames, _ = self.frames_at([fault], 3)
        node1 = frames[1]
        assert node1.chips["ecc_uncorrected_total"][4] == 1  # type: ignore[attr-defined]
        frames, truth = self.frames_at([fault], 4)
        assert 20 not in frames[1].chips["chip"].tolist()  # type: ignore[attr-defined]
        assert truth.lost_flops["failed_chip"] > 0  # type: ignore[attr-defined]

    def test_lost_node_publishes_nothing(self) -> None:
        """A lost node has no frame at all; the other nodes and the site still publish."""
        frames, truth = self.frames_at([Fault(FaultKind.NODE_LOST, 2, 0.0, 1, 50)], 2)
        assert [getattr(f, "node", None) for f in frames] == [0, 1, 3, 4, 5, 6, 7, None]
        assert truth.lost_flops["stale_telemetry"] > 0  # type: ignore[attr-defined]

    def test_truth_names_each_active_fault_and_its_loss(self) -> None:
        """The tick's truth lists the active faults with their group's loss."""
        fault = Fault(FaultKind.NL_DEGRADED, 5, 0.5, 1, 50)
        _, truth = self.frames_at([fault], 2)
        assert truth.active_faults == (fault,)  # type: ignore[attr-defined]
        assert truth.fault_lost_flops[0] == pytest.approx(truth.lost_flops["degraded_neuronlink"])  # type: ignore[attr-defined]

    def test_same_seed_same_faulty_telemetry(self) -> None:
        """With faults too, one seed gives identical records."""
        faults = [Fault(FaultKind.NL_FLAPPING, 9, 3.0, 2, 40, flaps=((1.5, 6.0),) * 3),
                  Fault(FaultKind.EFA_LOSS, 7, 3e-4, 1, 40)]
        a = FleetModel(DEMO, np.random.default_rng(9), tick_s=1.0, start_s=0.0, faults=faults)
        b = FleetModel(DEMO, np.random.default_rng(9), tick_s=1.0, start_s=0.0, faults=faults)
        for k in range(20):
            sa, sb = a.step(k), b.step(k)
            assert sa.links.tobytes() == sb.links.tobytes()
            assert sa.efa.tobytes() == sb.efa.tobytes()


class TestEfaSlow:
    def test_latency_up_throughput_kept(self) -> None:
        """efa_slow multiplies the port's latency by its severity, keeps its throughput, retransmits 20x."""
        e = effects(DEMO, [Fault(FaultKind.EFA_SLOW, 7, 1.5, 0, 10)], 0, diurnal_phase=0.0)
        assert (e.efa_latency_mult[7], e.efa_frac[7], e.efa_retrans_mult[7]) == (1.5, 1.0, 20.0)
        assert e.efa_retrans_mult[np.arange(DEMO.n_efa) != 7].tolist() == [1.0] * (DEMO.n_efa - 1)

    def test_drawn_at_random_on_efa_ports(self) -> None:
        """Random faults include efa_slow on EFA ports at one of its graded severities."""
        faults = random_faults(build_topology("rainier"), np.random.default_rng(1), ticks=86_400, tick_s=1.0)
        slow = [f for f in faults if f.kind is FaultKind.EFA_SLOW]
        assert slow
        assert {f.target_kind for f in slow} == {"efa"}
        assert {f.severity for f in slow} <= set(SEVERITIES[FaultKind.EFA_SLOW])
