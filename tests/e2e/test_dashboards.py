"""Every dashboard against real data: ``rainierd run`` (embedded broker, demo
fleet, 0.5 s ticks) with faults on a NeuronLink, an EFA port and a chip of
UltraServer u1, and a real Prometheus (1 s scrapes, the project's rules with
test-sized ``for:``) scraping /metrics and the drill-down probe, its targets
found through /probe/targets as docs/metrics.md configures it.  Every
variable must resolve and every panel and annotation query, substituted as
Grafana would, must return data."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from harness.procs import free_port
from harness.scrape import current_values
from harness.timing import TICK_S
from harness.waits import poll_until, wait_until
from rainierd.wire.topics import node_topic
from tests.conftest import MosquittoProcess, StartPrometheus
from tests.helpers import rainierd_prometheus_config
from tests.unit.deploy.test_dashboards import (
    UIDS,
    load,
    prometheus_get,
    queries,
    substitute,
    variable_selector,
    variables,
)

pytestmark = [pytest.mark.e2e, pytest.mark.prometheus]

AGGREGATE = "rainierd-aggregate.json"  # the aggregation tier's: its own test, below
# The training jobs' dashboard: its own test, below, with a scenario that runs jobs.
JOBS = "rainierd-jobs.json"

SCRAPE_S = 1.0
SCENARIO = """
[[fault]]
kind = "nl_degraded"
target = 224          # a ring link of node n4, UltraServer u1
severity = 0.5
at_s = 6
for_s = 600

[[fault]]
kind = "efa_degraded"
target = 70           # node n4, UltraServer u1
severity = 0.25
at_s = 6
for_s = 600

[[fault]]
kind = "chip_failed"
target = 100          # node n6, UltraServer u1
at_s = 6
for_s = 600
"""


def probe_job(metrics_port: int) -> dict[str, Any]:
    """The drill-down scrape job, as docs/metrics.md gives it (addresses and intervals test-sized)."""
    return {
        "job_name": "rainierd-ultraserver", "metrics_path": "/probe", "scrape_interval": f"{SCRAPE_S:g}s",
        "http_sd_configs": [{"url": f"http://127.0.0.1:{metrics_port}/probe/targets", "refresh_interval": "1s"}],
        "relabel_configs": [
            {"source_labels": ["__address__"], "target_label": "__param_target"},
            {"source_labels": ["__param_target"], "target_label": "instance"},
            {"target_label": "__address__", "replacement": f"127.0.0.1:{metrics_port}"},
        ],
    }


def row(dashboard: dict[str, Any], title: str) -> dict[str, Any]:
    """Return ``dashboard`` with only the panels of the row whose title starts with ``title`` (those below it, up to
    the next row) and no annotations."""
    kept, inside = [], False
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            inside = panel["title"].startswith(title)
        elif inside:
            kept.append(panel)
    assert kept, title
    return {"panels": kept, "annotations": {"list": []}}


def resolve(port: int, variable: dict[str, Any], chosen: dict[str, list[str]]) -> list[str]:
    """Return the values a ``label_values`` variable offers, as Grafana asks Prometheus for them."""
    selector, label = variable_selector(variable)
    params = [("match[]", substitute(selector, chosen))] if selector else []
    result = prometheus_get(port, f"/api/v1/label/{label}/values", [*params, ("start", str(time.time() - 300))])
    return sorted(result["data"])


def empty_queries(port: int, dashboard: dict[str, Any], chosen: dict[str, list[str]], since: float,
                  ) -> dict[str, str]:
    """Return {where: expr} of the dashboard's queries with no data: tables as instant queries now, the rest
    as range queries since ``since`` (as Grafana asks)."""
    instant = {f"panel {p['title']!r} {t['refId']}" for p in dashboard["panels"] for t in p.get("targets", [])
               if t.get("instant")}
    empty = {}
    for where, expr in queries(dashboard):
        text = substitute(expr, chosen, SCRAPE_S)
        if where in instant:
            result = prometheus_get(port, "/api/v1/query", {"query": text})
        else:
            now = time.time()
            result = prometheus_get(port, "/api/v1/query_range",
                                    {"query": text, "start": str(since), "end": str(now), "step": "2"})
        assert result["status"] == "success", (where, text, result.get("error"))
        if not result["data"]["result"]:
            empty[where] = text
    return empty


def test_every_panel_has_data_and_every_variable_resolves(start_rainierd: Any, prometheus: StartPrometheus,
                                                          tmp_path: Path) -> None:
    """With faults on a NeuronLink, an EFA port and a chip of u1 detected, each variable of each dashboard
    offers values (u1 among the UltraServers, both scrape jobs among the jobs) and every panel and annotation
    query returns data, the drill-down's from the probe job its service discovery found."""
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(SCENARIO)
    metrics_port = free_port()
    start_rainierd("run", "--tick", str(TICK_S), "--scenario", str(scenario),
                   "--metrics-addr", f"127.0.0.1:{metrics_port}", name="run")
    poll_until(lambda: "rainier_monitor_last_tick" in current_values(metrics_port), 20, "rainierd to analyse")
    prom_port = prometheus(rainierd_prometheus_config(metrics_port, tmp_path / "rules", probe_job(metrics_port),
                                                      scrape_s=SCRAPE_S))
    since = time.time()
    chosen = {"site": ["s0"], "ultraserver": ["u1"], "job": ["rainierd", "rainierd-ultraserver"]}
    dashboards = {name: load(name) for name in UIDS if name not in (AGGREGATE, JOBS)}
    remaining: dict[str, dict[str, str]] = {}

    def all_have_data() -> bool:
        remaining.clear()
        for name, dashboard in dashboards.items():
            empty = empty_queries(prom_port, dashboard, chosen, since)
            if empty:
                remaining[name] = empty
        return not remaining

    try:
        poll_until(all_have_data, 75, "every dashboard query to return data")
    except AssertionError:
        pytest.fail(f"queries without data: {remaining}")
    offered = {(name, v["name"]): resolve(prom_port, v, chosen)
               for name, dashboard in dashboards.items() for v in variables(dashboard) if v["type"] == "query"}
    assert offered == {
        ("rainierd-fleet.json", "site"): ["s0"],
        ("rainierd-ultraserver.json", "site"): ["s0"],
        ("rainierd-ultraserver.json", "ultraserver"): ["u0", "u1"],
        ("rainierd-self.json", "job"): ["rainierd", "rainierd-ultraserver"],
    }


@pytest.mark.mosquitto
async def test_the_aggregation_dashboard_has_data_for_every_panel(
    mosquitto_process: MosquittoProcess, start_rainierd: Any, prometheus: StartPrometheus, tmp_path: Path,
) -> None:
    """The simulator publishing one frame per node through two aggregators (shares 0/2 and 1/2) and a monitor
    on batches, a real Prometheus scraping the aggregators as job ``rainierd-aggregate``, and one malformed
    frame on a node topic each tick (an agent on another format): the aggregator variable offers both, and every
    panel and the alert annotation of the aggregation dashboard return data."""
    url, tick = mosquitto_process.url, str(TICK_S)
    monitor_port, agg_ports = free_port(), [free_port(), free_port()]
    start_rainierd("monitor", "--mqtt-url", url, "--tick", tick, "--metrics-addr", f"127.0.0.1:{monitor_port}",
                   "--telemetry-input", "batches", name="monitor")
    for i, port in enumerate(agg_ports):
        start_rainierd("aggregate", "--mqtt-url", url, "--tick", tick, "--metrics-addr", f"127.0.0.1:{port}",
                       "--shard", f"{i}/2", "--mqtt-client-id", f"agg-{i}", name=f"aggregate-{i}")
    start_rainierd("simulate", "--mqtt-url", url, "--tick", tick, "--batch-nodes", "0", name="simulate")
    job = {"job_name": "rainierd-aggregate", "scrape_interval": f"{SCRAPE_S:g}s",
           "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in agg_ports]}]}
    await wait_until(lambda: all(current_values(p).get("rainier_aggregator_frames_published_total", 0) > 0
                                 for p in agg_ports), 30, "both aggregators to publish")
    prom_port = prometheus(rainierd_prometheus_config(monitor_port, tmp_path / "rules", job, scrape_s=SCRAPE_S))
    since = time.time()
    targets = sorted(f"127.0.0.1:{p}" for p in agg_ports)
    chosen = {"job": ["rainierd-aggregate"], "instance": targets}
    dashboard = load(AGGREGATE)
    empty: dict[str, str] = {}

    def all_have_data() -> bool:
        empty.clear()
        empty.update(empty_queries(prom_port, dashboard, chosen, since))
        return not empty

    async def broken_agent() -> None:  # what RainierNodeFramesMalformed is for: it fires, an annotation shows it
        async with aiomqtt.Client("127.0.0.1", mosquitto_process.port, identifier="bad-agent") as client:
            while True:
                await client.publish(node_topic(0, 0, 0), b"not a frame", qos=1)
                await asyncio.sleep(TICK_S)

    agent = asyncio.create_task(broken_agent(), name="broken-agent")
    try:
        await wait_until(all_have_data, 60, "every aggregation panel to return data")
    except AssertionError:
        pytest.fail(f"queries without data: {empty}")
    finally:
        agent.cancel()
    offered = {v["name"]: resolve(prom_port, v, chosen) for v in variables(dashboard) if v["type"] == "query"}
    assert offered == {"job": ["rainierd-aggregate"], "instance": targets}


JOBS_SCENARIO = """
[[job]]
id = "lab/pretrain"
ultraservers = [0]

[[job]]
id = "lab/finetune"
ultraservers = [1]

[[fault]]
kind = "efa_degraded"
target = 10           # node n0, UltraServer u0: lab/pretrain's
severity = 0.25
at_s = 4
for_s = 600

[[fault]]
kind = "chip_failed"
target = 100          # node n6, UltraServer u1: lab/finetune stalls
at_s = 4
for_s = 600
"""


def test_the_jobs_dashboard_has_data_for_every_panel(start_rainierd: Any, prometheus: StartPrometheus,
                                                     tmp_path: Path) -> None:
    """``rainierd run`` with two jobs, a degraded EFA port in one and a failed chip in the other (which stalls
    it), and a real Prometheus with the shipped rules (test-sized ``for:``): the training-job variable offers
    both jobs, and every panel and the alert annotation of the jobs dashboard have data, and so does every panel
    of the fleet dashboard's lost FP8 (its part in jobs and its culprits then the jobs')."""
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(JOBS_SCENARIO)
    metrics_port = free_port()
    start_rainierd("run", "--tick", str(TICK_S), "--scenario", str(scenario),
                   "--metrics-addr", f"127.0.0.1:{metrics_port}", name="run")
    poll_until(lambda: "rainier_jobs" in current_values(metrics_port), 20, "rainierd to analyse its jobs")
    prom_port = prometheus(rainierd_prometheus_config(metrics_port, tmp_path / "rules", scrape_s=SCRAPE_S))
    since = time.time()
    chosen = {"training_job": ["lab/finetune", "lab/pretrain"], "site": ["s0"]}
    dashboard = load(JOBS)
    fleet_loss = row(load("rainierd-fleet.json"), "Lost FP8")
    empty: dict[str, str] = {}

    def all_have_data() -> bool:
        empty.clear()
        empty.update(empty_queries(prom_port, dashboard, chosen, since))
        empty.update(empty_queries(prom_port, fleet_loss, chosen, since))
        return not empty

    try:
        poll_until(all_have_data, 75, "every jobs panel to return data")
    except AssertionError:
        pytest.fail(f"queries without data: {empty}")
    offered = {v["name"]: resolve(prom_port, v, chosen) for v in variables(dashboard) if v["type"] == "query"}
    assert offered == {"training_job": ["lab/finetune", "lab/pretrain"]}
    in_jobs = prometheus_get(prom_port, "/api/v1/query", {"query": "sum(rainier:job_fp8_lost_flops:sum)"})
    assert float(in_jobs["data"]["result"][0]["value"][1]) > 0
    culprits = prometheus_get(prom_port, "/api/v1/query", {"query": "rainier_fleet_culprit_flops"})
    assert "lab/pretrain" in {c["metric"]["training_job"] for c in culprits["data"]["result"]}  # its EFA port
