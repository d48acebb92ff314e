"""A job spanning shards is priced whole, end to end: ``rainierd simulate``
runs two jobs over four UltraServers, each over both shards' UltraServers
(one slowed by a throttled chip in shard 0's share and a degraded NeuronLink
in shard 1's, one stalled by a failed chip in shard 0's), on a real
Mosquitto; one unsharded monitor and two ``--shard i/2`` monitors listen at
once; one real Prometheus scrapes all three and evaluates the shipped rules.
The unsharded monitor's ``training_job`` is relabelled ``whole:<id>`` at the
scrape, so the rules combine the shards' shares under each job's own id and
the one monitor's figures beside them: the combined figures must be the one
monitor's, within 1e-9 where the combination is exact and within the
tolerances docs/jobs.md, "Combining shards", states where it is not.  A
second Prometheus scrapes the two shards alone, so that the fleet's lost FP8
headline the rules add up (the whole jobs' losses plus the capacity in no
job's) is the shards' only: it must be the one monitor's
``rainier_fleet_fp8_lost_flops`` by cause, within the same tolerances."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest

from harness.procs import Broker
from harness.scrape import current_values
from harness.timing import TICK_S
from harness.waits import wait_until
from rainierd.fleet.pace import CAUSES
from tests.conftest import StartPrometheus
from tests.helpers import rules_for_tests, start_whole_and_two_shards
from tests.unit.deploy.test_dashboards import prometheus_get

pytestmark = [pytest.mark.e2e, pytest.mark.prometheus]

TICKS = 40
TOPOLOGY = "sites=1,ultraservers=4"  # 256 chips; shard i/2 owns u0, u2 (i = 0) and u1, u3 (i = 1)
# lab/wide over u0 and u1: its slowest member, a chip at 70 % clock, in shard 0's u0 (chip 3) and its slowest
# NeuronLink, at half bandwidth, in shard 1's u1 (link 192): each shard's share runs at the pace both set.
# lab/stuck over u2 and u3: a failed chip of shard 0's u2 (chip 130) stalls it, shard 1's u3 included, once both
# shares have run healthy for 8 s (what a stall is priced against is learned while the job runs).
SCENARIO = """
[[job]]
id = "lab/wide"
ultraservers = [0, 1]

[[job]]
id = "lab/stuck"
ultraservers = [2, 3]

[[fault]]
kind = "chip_throttle"
target = 3
severity = 0.7
at_s = 4
for_s = 600

[[fault]]
kind = "nl_degraded"
target = 192
severity = 0.5
at_s = 4
for_s = 600

[[fault]]
kind = "chip_failed"
target = 130
at_s = 8
for_s = 600
"""
JOBS = ("lab/wide", "lab/stuck")
# Combined over shards exactly (sums, least, greatest; the step priced from the same gates), so within 1e-9.
EXACT = ("rainier:job_chips:sum", "rainier:job_fp8_peak_flops:sum", "rainier:job_fp8_effective_flops:sum",
         "rainier:job_slowest_speed:min", "rainier:job_slowest_is_straggler:max", "rainier:job_stalled:max",
         "rainier:job_member_failed:max")
# A path's fraction is each monitor's detector estimate in float32, and a shard's may differ from the whole-fleet
# monitor's in the last bits (1.2e-7 relative seen); min passes it on exactly, and a term priced from it moves by
# about twice as much.
FLOAT32_REL = 1e-6
# A stall is priced against each share's healthy FLOP/s learned while it ran; the shard that does not hold the
# failed chip learns for as long as its share still delivers something and it sees no failure (2.5e-5 seen; a
# tick's learning moves a share by 0.6 %, docs/jobs.md).
STALL_REL = 0.01


def query(port: int, expr: str) -> dict[tuple[str, ...], float]:
    """Return an instant query's result as {(training_job, other label values...): value} (training_job "" for a
    fleet figure)."""
    answer = prometheus_get(port, "/api/v1/query", {"query": expr})
    assert answer["status"] == "success", answer
    out: dict[tuple[str, ...], float] = {}
    for sample in answer["data"]["result"]:
        labels: dict[str, str] = sample["metric"]
        key = (labels.get("training_job", ""),
               *(v for k, v in sorted(labels.items()) if k not in ("training_job", "__name__")))
        out[key] = float(sample["value"][1])
    return out


def split(result: dict[tuple[str, ...], float]) -> tuple[dict[tuple[str, ...], float], dict[tuple[str, ...], float]]:
    """Return a rule's result as (the shards' combination, the one monitor's), both keyed by the job's own id."""
    whole = {(k[0].removeprefix("whole:"), *k[1:]): v for k, v in result.items() if k[0].startswith("whole:")}
    return {k: v for k, v in result.items() if not k[0].startswith("whole:")}, whole


def close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1.0)


@pytest.mark.long(35)
@pytest.mark.mosquitto
async def test_two_shards_give_one_monitor_s_job_figures(
        mosquitto: Broker, start_rainierd: object, prometheus: StartPrometheus, tmp_path: Path) -> None:
    """Through the shipped rules, two shards' shares of two jobs spanning both give the one monitor's job figures:
    chips, peak, effective, the gates, stalled, every cause of lost FP8 and the goodput within 1e-9, a stall's
    price within 1 %; through the rules the one monitor's figures are its own rainier_job_* series; and the
    fleet's lost FP8 headline from the two shards alone is the one monitor's by cause, within the same
    tolerances, where the shards' own fleet figures summed fall short."""
    scenario = tmp_path / "jobs.toml"
    scenario.write_text(SCENARIO)
    ports = start_whole_and_two_shards(start_rainierd, mosquitto.url, tick_s=TICK_S, topology=TOPOLOGY)
    jobs_rules = [str(p) for p in rules_for_tests(tmp_path / "rules") if p.name == "rainierd-jobs.yml"]
    shards = {"job_name": "rainierd", "static_configs": [{"targets": [f"127.0.0.1:{ports['s0']}",
                                                                      f"127.0.0.1:{ports['s1']}"]}]}
    global_ = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    prom = prometheus({
        "global": global_,
        "rule_files": jobs_rules,
        "scrape_configs": [
            shards,
            {"job_name": "rainierd-whole", "static_configs": [{"targets": [f"127.0.0.1:{ports['whole']}"]}],
             "metric_relabel_configs": [{"source_labels": ["training_job"], "regex": "(.+)",
                                         "target_label": "training_job", "replacement": "whole:$1"}]},
        ],
    })
    for port in ports.values():
        await wait_until(lambda p=port: current_values(p).get("rainier_mqtt_connected") == 1, 10,  # type: ignore[misc]
                         "the monitors to connect")
    # Killed, not stopped: a simulator that exits removes its jobs' retained documents, as a scheduler would.
    sim = start_rainierd(  # type: ignore[operator]
        "simulate", "--mqtt-url", mosquitto.url, "--tick", str(TICK_S), "--seed", "5", "--topology", TOPOLOGY,
        "--scenario", str(scenario), name="simulate")
    await wait_until(lambda: current_values(ports["whole"]).get("rainier_monitor_last_tick", -1) >= TICKS,
                     TICKS * TICK_S + 15, f"the monitor to analyse tick {TICKS}")
    sim.proc.kill()
    sim.proc.wait()
    applied: list[tuple[float, tuple[float, ...]]] = []

    def every_frame_applied() -> bool:
        # The same frames reached every monitor: the shards together have applied the one monitor's, and no more
        # have arrived for 2 s.
        now = tuple(current_values(port).get("rainier_ingest_frames_applied_total", 0) for port in ports.values())
        applied.append((time.monotonic(), now))
        since = [counts for at, counts in applied if at >= applied[-1][0] - 2.0]
        return applied[-1][0] - applied[0][0] >= 2.0 and set(since) == {now} and now[0] == now[1] + now[2]

    await wait_until(every_frame_applied, 15, "every monitor to apply the same frames, and no more")
    # The fleet headline sums every job and every monitor's capacity in no job: the one monitor's, relabelled
    # beside the shards' in the first Prometheus, would be counted with theirs. Started on the quiet monitors, so
    # that it takes no CPU from them while they learn.
    prom_shards = prometheus({"global": global_, "rule_files": jobs_rules, "scrape_configs": [shards]})
    # Quiet now: each monitor's figures stay as they are. Wait until Prometheus has scraped them and the rules
    # have read them (the effective sums are the monitors' own).
    mine = {name: current_values(port, only=("rainier_job_", "rainier_fleet_")) for name, port in ports.items()}

    def exported(name: str, family: str, job: str) -> float:
        return mine[name].get(f'{family}{{training_job="{job}"}}', 0.0)

    seen: list[object] = []

    def caught_up() -> bool:
        combined, whole = split(query(prom, "rainier:job_fp8_effective_flops:sum"))
        want = {(j,): exported("s0", "rainier_job_fp8_effective_flops", j)
                + exported("s1", "rainier_job_fp8_effective_flops", j) for j in JOBS}
        want_whole = {(j,): exported("whole", "rainier_job_fp8_effective_flops", j) for j in JOBS}
        seen[:] = [combined, want, whole, want_whole]
        return (combined.keys() == want.keys() and whole.keys() == want_whole.keys()
                and all(close(combined[k], want[k], 1e-12) and close(whole[k], want_whole[k], 1e-12) for k in want))

    def shards_caught_up() -> bool:
        combined = query(prom_shards, "rainier:job_fp8_effective_flops:sum")
        want = {(j,): exported("s0", "rainier_job_fp8_effective_flops", j)
                + exported("s1", "rainier_job_fp8_effective_flops", j) for j in JOBS}
        seen[:] = [combined, want]
        return combined.keys() == want.keys() and all(close(combined[k], want[k], 1e-12) for k in want)

    try:
        await wait_until(caught_up, 15, "Prometheus to evaluate the rules on the quiet monitors' figures")
        await wait_until(shards_caught_up, 15, "the shards' Prometheus to evaluate the rules on their figures")
    except AssertionError as error:
        raise AssertionError(f"{error}: (combined, wanted[, whole, wanted]) {seen}") from None
    await asyncio.sleep(2.5)  # two more evaluations: every rule of the group on those same samples

    results: dict[str, Any] = {rule: split(query(prom, rule)) for rule in (
        *EXACT, "rainier:job_path_fraction:min", "rainier:job_fp8_lost_flops:sum_by_cause",
        "rainier:job_fp8_learned_healthy_flops:sum", "rainier:job_goodput:ratio", "rainier:job_fp8_lost:ratio")}

    # What the faults must have done: both gates of lab/wide set, in different shards; lab/stuck stalled by shard 0.
    combined, whole = results["rainier:job_fp8_lost_flops:sum_by_cause"]
    assert {(j, c) for (j, c), v in whole.items() if v > 0} == {
        ("lab/wide", "thermal_throttle"), ("lab/wide", "degraded_neuronlink"), ("lab/stuck", "failed_chip")}
    assert exported("s0", "rainier_job_stalled", "lab/stuck") == 1
    assert exported("s1", "rainier_job_stalled", "lab/stuck") == 0
    assert exported("s0", "rainier_job_slowest_speed", "lab/wide") < 1
    assert exported("s1", "rainier_job_slowest_speed", "lab/wide") == 1

    # The shards combined are the one monitor: exact where the combination is exact.
    for rule, rel in (*((r, 1e-9) for r in EXACT), ("rainier:job_path_fraction:min", FLOAT32_REL)):
        combined, whole = results[rule]
        assert set(combined) == set(whole), rule
        assert len(whole) >= len(JOBS), rule
        assert all(close(combined[k], whole[k], rel) for k in whole), f"{rule} {combined} {whole}"
    combined, lost = results["rainier:job_fp8_lost_flops:sum_by_cause"]
    assert set(combined) == set(lost) == {(j, c) for j in JOBS for c in CAUSES}
    tolerance = {"thermal_throttle": 1e-9, "straggler": 1e-9, "degraded_neuronlink": FLOAT32_REL,
                 "degraded_efa": FLOAT32_REL, "failed_chip": STALL_REL, "stale_telemetry": STALL_REL}
    assert all(close(combined[j, c], lost[j, c], tolerance[c]) for j, c in lost), f"{combined} {lost}"
    for rule in ("rainier:job_goodput:ratio", "rainier:job_fp8_lost:ratio"):
        combined, whole = results[rule]
        assert close(combined[("lab/wide",)], whole[("lab/wide",)], FLOAT32_REL), rule
        assert close(combined[("lab/stuck",)], whole[("lab/stuck",)], STALL_REL), rule

    # The shards' own losses summed, what the rules used to read, miss what each share's gate costs the other's.
    own = sum(mine[s].get(f'rainier_job_fp8_lost_flops{{training_job="lab/wide",cause="{c}"}}', 0.0)
              for s in ("s0", "s1") for c in CAUSES)
    assert own < 0.75 * sum(v for (j, _c), v in lost.items() if j == "lab/wide")

    # Culprits are not combined: each shard names its share's, priced on its share's effective, so the same entities
    # as the one monitor, each at its share's part of the whole job's figure (each is its term's only entity here).
    culprits = [{(m["entity"], m["id"]): (v, m["training_job"]) for k, v in mine[name].items()
                 if (m := dict(re.findall(r'(\w+)="([^"]*)"', k))) and k.startswith("rainier_job_culprit_flops{")
                 and m["training_job"] == "lab/wide"} for name in ("whole", "s0", "s1")]
    assert set(culprits[0]) == set(culprits[1]) | set(culprits[2]) == {
        ("chip", "s0/u0/n0/chip3"), ("neuronlink", "s0/u1/n4/chip0/link0")}
    share = {name: exported(name, "rainier_job_fp8_effective_flops", "lab/wide") for name in ("whole", "s0", "s1")}
    for name, named in zip(("s0", "s1"), culprits[1:], strict=True):
        assert all(close(v * share["whole"] / share[name], culprits[0][e][0], FLOAT32_REL)
                   for e, (v, _j) in named.items())

    # Through the rules, one monitor's figures are its own series.
    for cause in CAUSES:
        for job in JOBS:
            own_lost = mine["whole"][f'rainier_job_fp8_lost_flops{{training_job="{job}",cause="{cause}"}}']
            assert close(lost[(job, cause)], own_lost, 1e-9), (job, cause)
    goodput = results["rainier:job_goodput:ratio"][1]
    assert all(close(goodput[(j,)], exported("whole", "rainier_job_goodput_ratio", j), 1e-9) for j in JOBS)

    # The fleet's headline from the shards alone is the one monitor's: each cause within its jobs' tolerance.
    headline = {c: v for (_j, c), v in query(prom_shards, "rainier:fleet_fp8_lost_flops:sum_by_cause").items()}
    own_fleet = {c: mine["whole"][f'rainier_fleet_fp8_lost_flops{{cause="{c}"}}'] for c in CAUSES}
    assert set(headline) == set(CAUSES)
    assert all(close(headline[c], own_fleet[c], tolerance[c]) for c in CAUSES), f"{headline} {own_fleet}"
    fleet_goodput = query(prom_shards, "rainier:fleet_goodput:ratio")[("",)]
    assert close(fleet_goodput, mine["whole"]["rainier_fleet_goodput_ratio"], STALL_REL)
    # The capacity in no job is none here (every UltraServer in a job), and the shards' own fleet figures summed,
    # what the rules used to read, miss what each share's gate costs the other's.
    assert all(mine[s][f'rainier_fleet_fp8_unallocated_lost_flops{{cause="{c}"}}'] == 0
               for s in ports for c in CAUSES)
    shards_own = sum(mine[s][f'rainier_fleet_fp8_lost_flops{{cause="{c}"}}'] for s in ("s0", "s1") for c in CAUSES)
    assert shards_own < 0.9 * sum(own_fleet.values())
