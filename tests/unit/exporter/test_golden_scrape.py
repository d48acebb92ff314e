"""The exporter's output pinned by a golden scrape of a fixed-seed scenario,
node_exporter style: the golden file passes ``promtool check metrics``, and
today's scrape must equal it.  After a deliberate change to the metrics,
regenerate it with ``RAINIERD_UPDATE_GOLDEN=1 scripts/test tests/unit/exporter/test_golden_scrape.py``
and review the diff.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rainierd.actions.config import ActionConfig
from rainierd.actions.policy import ActionPolicy
from rainierd.core.analysis import MonitorCore
from rainierd.exporter import build_exporter
from rainierd.fleet.ids import parse
from rainierd.fleet.topology import build_topology
from rainierd.http.status import AUTH_RESULTS, ServerCounters
from rainierd.monitor.snapshot import Backlog, IngestCounts, MonitorSnapshot, MonitorStatus
from rainierd.mqtt.connection import Connection
from rainierd.runtime.histogram import LagHistogram
from rainierd.runtime.looplag import LoopLag
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames

GOLDEN = Path(__file__).parents[2] / "golden" / "scrape-demo.prom"


def scrape_of_fixed_scenario() -> str:
    """Render the registry after 60 ticks of the demo fleet with three faults, seed 7 (the faults start after
    the monitor's baselines have 30 s of history, as on a fleet it has been watching)."""
    topo = build_topology("demo")
    faults = [
        Fault(FaultKind.NL_DEGRADED, 5, 0.5, 35, 100),
        Fault(FaultKind.STRAGGLER, 100, 0.10, 35, 100),
        Fault(FaultKind.EFA_DOWN, 70, 0.0, 45, 100),
    ]
    model = FleetModel(topo, np.random.default_rng(7), tick_s=1.0, start_s=1.8e9, faults=faults)
    core = MonitorCore(topo)
    events: Counter[tuple[str, str]] = Counter()
    # Advisories held 10 s: the down EFA port's and the degraded link's nodes want action, the demo fleet's 8
    # nodes allow one (5 %, at least one): one proposal, and the brake holds the other back.
    policy = ActionPolicy(topo, ActionConfig(hold_s=10.0))
    for tick in range(60):
        analysis = core.step([f for _t, f in tick_frames(topo, model.step(tick), publisher="golden")])
        events.update((e.entity, e.after) for e in analysis.events)
        actions = policy.update(analysis.health, t_s=1.8e9 + tick, jobs=analysis.jobs, loss=analysis.job_loss,
                                phases=analysis.job_phases)
    lag = LagHistogram()
    lag.observe(np.array([0.25, 0.5, 0.75, 1.2, 3.5]))
    loop_lag = LoopLag()
    for lag_s in (0.0004, 0.0004, 0.0021, 0.009, 0.12):
        loop_lag.observe(lag_s)
    status = MonitorStatus(
        ingest=IngestCounts.of(core.stats), connection=Connection(connected=True, connects=1),
        backlog=Backlog(messages=3, bytes=12_000, oldest_s=0.4, dropped_messages=2, dropped_bytes=8_000),
        sample_lag=lag.frozen(), loop_lag_worst_s=0.001, loop_lag=loop_lag.histogram.frozen(),
    )
    snapshot = MonitorSnapshot.of(analysis, generation=60, chips_total=topo.n_present_chips, analysis_s=0.002,
                                  analysed_ticks=60, events=events, lag_s=0.25, status=status, actions=actions,
                                  action_totals=policy.totals)
    # The HTTP server's families too, as a monitor with basic auth serves them (all zero: no connection yet).
    server = ServerCounters(max_connections=256, auth=dict.fromkeys(AUTH_RESULTS, 0))
    exporter = build_exporter(topo, lambda: snapshot, process_metrics=False, server=server.status)
    text = exporter.render().decode()
    # Collector durations are wall-clock: the only values that differ run to run.
    return re.sub(r"^(rainier_exporter_collector_duration_seconds\{[^}]*\}) \S+$", r"\1 0.0", text, flags=re.M)


def test_scrape_matches_golden() -> None:
    """The exporter renders exactly the golden scrape (metric names, labels, values)."""
    text = scrape_of_fixed_scenario()
    if os.environ.get("RAINIERD_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


@pytest.mark.prometheus
def test_golden_passes_promtool_check_metrics() -> None:
    """promtool check metrics finds no problem in the golden scrape."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: apt-get install prometheus (scripts/test does)")
    result = subprocess.run([promtool, "check", "metrics"], input=GOLDEN.read_text(), capture_output=True,
                            text=True, check=False, timeout=60)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_golden_shows_the_faults() -> None:
    """The golden scrape is a meaningful one: it holds the three faulty components, each with its canonical id
    (docs/ids.md), and their losses."""
    text = GOLDEN.read_text()
    assert ('rainier_neuronlink_unhealthy{link="5",id="s0/u0/n0/chip5/link0",kind="torus",site="s0",ultraserver="u0",'
            'node="n0",') in text
    assert ('rainier_efa_port_unhealthy{port="70",id="s0/u1/n4/efa6",site="s0",ultraserver="u1",node="n4",'
            'state="down"} 1.0') in text
    assert ('rainier_chip_unhealthy{chip="100",id="s0/u1/n6/chip4",site="s0",ultraserver="u1",node="n6",'
            'state="straggler"} 1.0') in text
    worst_first = text.split("# TYPE rainier_neuronlink_worst_bandwidth_ratio gauge\n")[1].splitlines()[0]
    assert worst_first.startswith('rainier_neuronlink_worst_bandwidth_ratio{link="5",id="s0/u0/n0/chip5/link0",')
    assert re.search(r'rainier_fleet_fp8_lost_flops\{cause="straggler"\} [1-9]', text)


def test_every_per_entity_series_names_its_entity_by_its_canonical_id() -> None:
    """Each series of a chip, NeuronLink, EFA port, node or UltraServer carries ``id``, the entity's canonical id
    (docs/ids.md), beside the index label it always had; the id reads back to that index.  An additive label:
    one per series, never one more series."""
    topo = build_topology("demo")
    index_labels = {"link": "neuronlink", "port": "efa", "chip": "chip"}
    checked = 0
    for family in text_string_to_metric_families(GOLDEN.read_text()):
        for sample in family.samples:
            labels = sample.labels
            kind = next((k for label, k in index_labels.items() if label in labels), None)
            if kind is None and "node" in labels and family.name.startswith("rainier_node_"):
                kind = "node"
            if kind is None or family.name.startswith("rainier_job_"):
                continue
            index = int(labels[{"neuronlink": "link", "efa": "port"}.get(kind, kind)].lstrip("n"))
            assert parse(topo, labels["id"]) == (kind, index), sample
            checked += 1
    assert checked >= 20  # the unhealthy, reason and worst families of the three faults' kinds
