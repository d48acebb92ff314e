"""The monitor hears jobs end to end: ``rainierd run`` against a real
Mosquitto, its simulator publishing a scenario's jobs as retained documents
(docs/scenarios.md, "Jobs") and its monitor subscribing to
``rainier/v1/jobs/#``: /metrics shows each job's info and figures, the jobs'
peaks and the unallocated capacity add up to the fleet's peak, a degraded
link's event on the broker names the job it slows and what it costs, and a
job's removal (the empty retained message a scheduler sends) removes its series.
Then two monitor shards and a simulator: each shard exports its share of the
jobs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from harness.procs import Broker, free_port
from harness.scrape import current_values
from harness.timing import within
from harness.waits import poll_until
from rainierd.wire.jobs import job_topic
from rainierd.wire.topics import EVENTS_ROOT
from tests.conftest import Daemon

# Two jobs from the first tick, one an UltraServer each of the demo fleet (scenarios/demo-jobs.toml's, without
# its phases and its late start), and a NeuronLink of lab/pretrain's (link 5, on node 0) at half its lanes.
SLOW_LINK = 5
SLOW_LINK_ID = "s0/u0/n0/chip5/link0"  # its canonical id (docs/ids.md)
CULPRIT = ('rainier_job_culprit_flops{training_job="lab/pretrain",rank="1",entity="neuronlink",'
           f'id="{SLOW_LINK_ID}"}}')
SCENARIO = f"""
[[job]]
id = "lab/pretrain"
ultraservers = [0]

[[job]]
id = "lab/finetune"
ultraservers = [1]

[[fault]]
kind = "nl_degraded"
target = {SLOW_LINK}
severity = 0.5
at_s = 2
for_s = 600
"""
JOBS = ("lab/finetune", "lab/pretrain")


def publish_retained(broker: Broker, job_id: str, payload: bytes) -> None:
    """Publish ``payload`` retained on the job's topic, as a scheduler does (empty: the job ended)."""
    async def publish() -> None:
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier="test-scheduler") as client:
            await client.publish(job_topic(job_id), payload, qos=1, retain=True)

    asyncio.run(publish())


def retained_event(broker: Broker, entity: str, id_: int, *, timeout_s: float) -> dict[str, Any] | None:
    """Return the event retained on the broker for one entity (its last change), or None within ``timeout_s``."""
    async def read() -> dict[str, Any] | None:
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier="test-events") as client:
            await client.subscribe(f"{EVENTS_ROOT}/{entity}/{id_}", qos=1)
            async with asyncio.timeout(timeout_s):
                async for message in client.messages:
                    return json.loads(bytes(message.payload))  # type: ignore[arg-type,no-any-return]
        return None

    try:
        return asyncio.run(read())
    except TimeoutError:
        return None


def job_series(values: dict[str, float], name: str) -> dict[str, float]:
    """Return the values of ``name`` by the job label (families with one series a job)."""
    prefix = f'{name}{{training_job="'
    return {key[len(prefix):].split('"', 1)[0]: v for key, v in values.items() if key.startswith(prefix)}


def test_the_monitor_exports_the_scenario_s_jobs_and_forgets_a_removed_one(
        mosquitto: Broker, start_rainierd: object, tmp_path: Path) -> None:
    """Each scenario job gets rainier_job_info and figures whose peaks plus unallocated are the fleet's peak
    (within 1e-9); the degraded link's retained event names lab/pretrain alone, at about what its culprit series
    says the link costs; once one job's retained document is removed, its series go and its peak is
    unallocated; a broken document is counted refused and makes no job."""
    scenario = tmp_path / "jobs.toml"
    scenario.write_text(SCENARIO)
    port = free_port()
    daemon: Daemon = start_rainierd(  # type: ignore[operator]
        "run", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{port}", "--scenario", str(scenario),
        "--tick", "0.5")
    only = ("rainier_job", "rainier_fleet_")
    values: dict[str, float] = {}

    def both_jobs_priced() -> bool:
        nonlocal values
        values = current_values(port, only=only)
        return (set(job_series(values, "rainier_job_chips")) == set(JOBS)
                and values.get("rainier_fleet_fp8_peak_flops", 0) > 0
                and all(v > 0 for v in job_series(values, "rainier_job_fp8_effective_flops").values()))

    poll_until(both_jobs_priced, within(20.0), f"both jobs priced on /metrics ({daemon.log()[-2000:]})")
    assert {k for k in values if k.startswith("rainier_job_info")} == {
        f'rainier_job_info{{training_job="{j}",name="{j.split("/")[1]}",owner="sim",scheduler="other"}}' for j in JOBS}
    assert values["rainier_jobs"] == 2
    assert job_series(values, "rainier_job_chips") == dict.fromkeys(JOBS, 64.0)
    fleet_peak = values["rainier_fleet_fp8_peak_flops"]
    peaks = job_series(values, "rainier_job_fp8_peak_flops")
    assert abs(sum(peaks.values()) + values["rainier_fleet_fp8_unallocated_flops"] - fleet_peak) <= 1e-9 * fleet_peak
    assert len([k for k in values if k.startswith('rainier_job_fp8_lost_flops{training_job="lab/pretrain"')]) == 6

    event: dict[str, Any] | None = None

    def link_event_raised() -> bool:
        nonlocal event, values
        event = retained_event(mosquitto, "neuronlink", SLOW_LINK, timeout_s=1.0)
        values = current_values(port, only=only)
        # The event is retained as its analysis ends; the scrape shows that analysis's culprits once the
        # exporter takes its snapshot: wait for both, not whichever comes first.
        return event is not None and event["after"] != "healthy" and CULPRIT in values

    poll_until(link_event_raised, within(15.0), f"the degraded link's event retained ({daemon.log()[-2000:]})")
    assert event is not None
    [slowed] = event["jobs"]
    assert slowed["job"] == "lab/pretrain"
    culprit = values[CULPRIT]
    assert slowed["flops"] == pytest.approx(culprit, rel=0.25)  # priced on the tick that raised it; noise since
    records = [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]
    assert [r["jobs"] for r in records if r.get("event") == "health degraded"  # the log line says the same
            and (r["entity"], r["index"], r["tick"]) == ("neuronlink", SLOW_LINK, event["tick"])] == [event["jobs"]]

    publish_retained(mosquitto, "lab/broken", b'{"v": 1}')  # refused (schema), counted, and no job
    publish_retained(mosquitto, "lab/finetune", b"")

    def finetune_gone() -> bool:
        nonlocal values
        values = current_values(port, only=only)
        return (values.get("rainier_jobs") == 1
                and values.get('rainier_job_documents_refused_total{reason="schema"}') == 1)

    poll_until(finetune_gone, within(10.0), "the removed job's series gone")
    assert not [k for k in values if 'training_job="lab/finetune"' in k or 'training_job="lab/broken"' in k]
    assert values['rainier_job_documents_refused_total{reason="schema"}'] == 1
    assert set(job_series(values, "rainier_job_chips")) == {"lab/pretrain"}
    assert values["rainier_fleet_fp8_unallocated_flops"] == fleet_peak / 2
    peaks = job_series(values, "rainier_job_fp8_peak_flops")
    assert abs(sum(peaks.values()) + values["rainier_fleet_fp8_unallocated_flops"] - fleet_peak) <= 1e-9 * fleet_peak
    assert daemon.interrupt()[0] == 0, daemon.log()


# Four UltraServers, two shards (shard i/2 owns the UltraServers whose topic bucket is i modulo 2: here u % 2 == i):
# a job over u0 and u1 (both shards), one on u3 (shard 1), u2 in no job (shard 0).
SHARD_SCENARIO = """
[[job]]
id = "lab/wide"
ultraservers = [0, 1]

[[job]]
id = "lab/solo"
ultraservers = [3]
"""


def test_each_shard_exports_its_share_of_the_jobs(
        mosquitto: Broker, start_rainierd: object, tmp_path: Path) -> None:
    """Two shards hear the same documents: each exports the jobs holding nodes in its share with that share's
    chips and peak, both know both jobs, and their jobs' peaks plus unallocated add up to their fleet peaks."""
    scenario = tmp_path / "jobs.toml"
    scenario.write_text(SHARD_SCENARIO)
    topology = "sites=1,ultraservers=4"
    ports = [free_port(), free_port()]
    for index, port in enumerate(ports):
        start_rainierd(  # type: ignore[operator]
            "monitor", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{port}", "--tick", "0.5",
            "--topology", topology, "--shard", f"{index}/2", name=f"monitor-{index}")
    start_rainierd(  # type: ignore[operator]
        "simulate", "--mqtt-url", mosquitto.url, "--tick", "0.5", "--topology", topology, "--scenario",
        str(scenario), name="simulate")
    expected = [{"lab/wide": 64.0}, {"lab/solo": 64.0, "lab/wide": 64.0}]
    values: list[dict[str, float]] = [{}, {}]

    def both_shards_priced() -> bool:
        for index, port in enumerate(ports):
            values[index] = current_values(port, only=("rainier_job", "rainier_fleet_"))
        # Both documents heard too: a shard exports the job in its share as soon as that one document is applied,
        # and on a slow machine the other shard's document came a scrape later (fresh-clone rehearsal, stop 45).
        return ([job_series(v, "rainier_job_chips") for v in values] == expected
                and [v.get("rainier_jobs") for v in values] == [2, 2])

    poll_until(both_shards_priced, within(20.0), "each shard's share of the jobs on /metrics")
    assert [v["rainier_jobs"] for v in values] == [2, 2]
    for share in values:
        peak = share["rainier_fleet_fp8_peak_flops"]
        jobs_peak = sum(job_series(share, "rainier_job_fp8_peak_flops").values())
        assert abs(jobs_peak + share["rainier_fleet_fp8_unallocated_flops"] - peak) <= 1e-9 * peak
    wide = sum(job_series(v, "rainier_job_fp8_peak_flops")["lab/wide"] for v in values)
    assert wide == 128 * 1.299e15
