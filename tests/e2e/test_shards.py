"""Monitor shards end to end over a real Mosquitto: ``rainierd simulate``
publishes a fleet with faults, two ``rainierd monitor --shard i/2`` and one
unsharded monitor listen at once, and the shards' /metrics add up to the
unsharded monitor's: the same fleet totals, the same frames, the same
unhealthy components, and the same lost FP8 by cause (without jobs, every
UltraServer is capacity in no job, priced whole inside its one shard)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

import pytest

from harness.procs import Broker
from harness.scrape import current_values, sample_values, scrape
from harness.timing import TICK_S, within
from harness.waits import wait_until
from rainierd.fleet.pace import CAUSES
from tests.helpers import start_whole_and_two_shards
from tests.integration.test_accounting import sim_totals

pytestmark = pytest.mark.e2e

TICKS = 24
TOPOLOGY = "sites=2,ultraservers=8"  # 16 UltraServers, 1,024 chips: 8 a shard
# A failed chip of u3 (shard 1), a NeuronLink of u2 down (shard 0), a lost node of u5 (shard 1).
SCENARIO = """
[[fault]]
kind = "chip_failed"
target = 200
at_s = 2
for_s = 600

[[fault]]
kind = "nl_down"
target = 390
at_s = 2
for_s = 600

[[fault]]
kind = "node_lost"
target = 21
at_s = 2
for_s = 600
"""
# Not rainier_fleet_fp8_flop_total: a counter's value is what a monitor has seen grow since it first saw each
# node (a node whose first two samples land in one analysis window starts one interval later), so it depends on
# each monitor's windows; its rate is what adds up, and Prometheus reads nothing else of a counter.
# Lost FP8 by cause: priced from the same detector state, so within 1e-9, but for a stall's price, which is what
# its UltraServer learned healthy while it ran, from each monitor's own analysis windows (measured 5e-6 to 1.1e-5
# apart; docs/jobs.md, "Combining shards", allows a stall 1 %).
STALLS = ("failed_chip", "stale_telemetry")
STALL_REL = 0.01
TOTALS = ("rainier_fleet_fp8_peak_flops", "rainier_fleet_fp8_delivered_flops", "rainier_fleet_fp8_effective_flops",
          "rainier_fleet_chips", "rainier_fleet_chips_reporting", "rainier_ingest_frames_applied_total")


def unhealthy(values: dict[str, float]) -> set[str]:
    """Return the unhealthy entity series (``rainier_<entity>_unhealthy{…}``) of a scrape."""
    return {k for k, v in values.items() if re.match(r"rainier_\w+_unhealthy\{", k) and v == 1}


@pytest.mark.mosquitto
async def test_two_shards_add_up_to_one_monitor(mosquitto: Broker, start_rainierd: object, tmp_path: Path) -> None:
    """Fed by one simulator, two shards' fleet totals sum to one monitor's within 1e-9 relative, and their
    unhealthy components together are its, each exported by one shard only; their capacity in no job's lost FP8,
    what the fleet headline's rule adds to the jobs' (none here), is its lost FP8 by cause."""
    scenario = tmp_path / "faults.toml"
    scenario.write_text(SCENARIO)
    ports = start_whole_and_two_shards(start_rainierd, mosquitto.url, tick_s=TICK_S, topology=TOPOLOGY)
    for port in ports.values():
        await wait_until(lambda p=port: current_values(p).get("rainier_mqtt_connected") == 1, 10,  # type: ignore[misc]
                         "the monitors to connect")
    sim = start_rainierd(  # type: ignore[operator]
        "simulate", "--mqtt-url", mosquitto.url, "--tick", str(TICK_S), "--ticks", str(TICKS), "--seed", "5",
        "--topology", TOPOLOGY, "--scenario", str(scenario), name="simulate",
    )
    assert await asyncio.to_thread(sim.proc.wait, within(TICKS * TICK_S + 15)) == 0, sim.log()
    last = TICKS - 1
    for port in ports.values():
        await wait_until(lambda p=port: current_values(p).get("rainier_monitor_last_tick") == last,  # type: ignore[misc]
                         10, f"every monitor to analyse tick {last}")
    # The last tick shows in the first window holding any of its frames; the rest may land a window later. Once the
    # monitor, and the shards together, have applied every frame, each has analysed its last window.
    published = sim_totals(sim)["frames_published"]

    def every_frame_applied() -> bool:
        applied = {name: current_values(port).get("rainier_ingest_frames_applied_total", 0)
                   for name, port in ports.items()}
        return applied["whole"] == applied["s0"] + applied["s1"] == published

    with contextlib.suppress(AssertionError):
        await wait_until(every_frame_applied, 10, "every frame to be applied")
    values = {name: sample_values(scrape(port)) for name, port in ports.items()}

    whole, parts = values["whole"], [values["s0"], values["s1"]]
    assert {k: sum(p[k] for p in parts) for k in TOTALS} == pytest.approx({k: whole[k] for k in TOTALS}, rel=1e-9)
    assert all(0 < p["rainier_fleet_chips"] < whole["rainier_fleet_chips"] for p in parts)
    assert [p[f'rainier_shards{{shard="{i}"}}'] for i, p in enumerate(parts)] == [2, 2]
    assert {p["rainier_fleet_chips_inventory"] for p in [whole, *parts]} == {1024}
    found = [unhealthy(p) for p in parts]
    assert found[0] | found[1] == unhealthy(whole)
    assert not found[0] & found[1]
    assert all(found), found  # each shard detected its own faults
    assert whole["rainier_ingest_frames_lost_total"] == sum(p["rainier_ingest_frames_lost_total"] for p in parts) == 0
    rejected = [k for p in parts for k, v in p.items() if k.startswith("rainier_ingest_decode_errors_total") and v]
    assert rejected == []  # a shard never hears another's frames
    # Without jobs the fleet headline's rule adds the shards' capacity in no job up (and no job's loss).
    lost = {c: sum(p[f'rainier_fleet_fp8_unallocated_lost_flops{{cause="{c}"}}'] for p in parts) for c in CAUSES}
    own = {c: whole[f'rainier_fleet_fp8_lost_flops{{cause="{c}"}}'] for c in CAUSES}
    assert lost["failed_chip"] > 0
    assert lost["degraded_neuronlink"] > 0
    assert {c: v for c, v in lost.items() if c not in STALLS} == pytest.approx(
        {c: v for c, v in own.items() if c not in STALLS}, rel=1e-9)
    assert {c: lost[c] for c in STALLS} == pytest.approx({c: own[c] for c in STALLS}, rel=STALL_REL)
