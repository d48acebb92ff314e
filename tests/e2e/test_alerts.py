"""Alerts end to end: a real Mosquitto, ``rainierd simulate`` with a scenario
that degrades one NeuronLink, ``rainierd monitor``, and a real Prometheus
(1 s scrapes, the project's rules with test-sized ``for:``), asked through its
HTTP API which alerts fire."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from harness.procs import Broker, free_port
from harness.scrape import current_values
from harness.timing import TICK_S, within
from tests.conftest import StartPrometheus
from tests.helpers import rainierd_prometheus_config

pytestmark = [pytest.mark.e2e, pytest.mark.prometheus]

ROOT = Path(__file__).parents[2]
FAULT_AT_S = 8.0
FAULT_FOR_S = 15.0


def alerts(port: int) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5) as response:
        return list(json.load(response)["data"]["alerts"])


def query(port: int, expr: str) -> dict[str, object]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        return dict(json.load(response))


def firing(port: int) -> dict[str, dict[str, str]]:
    return {str(a["labels"]["alertname"]): a["labels"] for a in alerts(port)  # type: ignore[index]
            if a["state"] == "firing"}


@pytest.mark.long(36)
@pytest.mark.mosquitto
def test_neuronlink_alert_fires_alone_and_resolves(
    mosquitto: Broker, start_rainierd: object, prometheus: StartPrometheus, tmp_path: Path,
) -> None:
    """The NeuronLink alert fires with the link's labels within bounded time, no other alert fires, and it resolves
    (the dashboards' queries are checked against a running rainierd in test_dashboards_e2e.py)."""
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(f'[[fault]]\nkind = "nl_degraded"\ntarget = 224\nseverity = 0.75\n'
                        f"at_s = {FAULT_AT_S}\nfor_s = {FAULT_FOR_S}\n")
    metrics_port = free_port()
    start_rainierd(  # type: ignore[operator]
        "monitor", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{metrics_port}",
        "--tick", str(TICK_S), name="monitor",
    )
    deadline = time.monotonic() + within(10)
    while current_values(metrics_port).get("rainier_mqtt_connected") != 1:
        assert time.monotonic() < deadline, "monitor did not connect"
        time.sleep(0.1)
    prom_port = prometheus(rainierd_prometheus_config(metrics_port, tmp_path / "rules"))
    # Until Prometheus's first scrape there is no `up` series and RainierdTargetMissing (absent, its `for:`
    # test-sized here) may fire: it is right to, and it resolves at the next evaluation once the target is up.
    # Watch alerts from then on.
    deadline = time.monotonic() + within(15)
    while query(prom_port, 'up{job="rainierd"} == 1')["data"]["result"] == []:  # type: ignore[index]
        assert time.monotonic() < deadline, "Prometheus never scraped the monitor"
        time.sleep(0.2)
    while "RainierdTargetMissing" in firing(prom_port):
        assert time.monotonic() < deadline, "RainierdTargetMissing stayed firing with the target up"
        time.sleep(0.2)
    started = time.monotonic()
    start_rainierd(  # type: ignore[operator]
        "simulate", "--mqtt-url", mosquitto.url, "--tick", str(TICK_S), "--scenario", str(scenario), name="simulate",
    )

    seen: dict[str, dict[str, str]] = {}
    fired_at = resolved_at = None
    while time.monotonic() - started < FAULT_AT_S + FAULT_FOR_S + 45:
        now = firing(prom_port)
        seen.update(now)
        if fired_at is None and "RainierNeuronLinkDegraded" in now:
            fired_at = time.monotonic() - started
        if fired_at is not None and not now:
            resolved_at = time.monotonic() - started
            break
        time.sleep(0.5)
    assert set(seen) == {"RainierNeuronLinkDegraded"}
    assert seen["RainierNeuronLinkDegraded"] == {
        "alertname": "RainierNeuronLinkDegraded", "instance": f"127.0.0.1:{metrics_port}", "job": "rainierd",
        "link": "224", "id": "s0/u1/n4/chip0/link2", "kind": "ring", "site": "s0", "ultraserver": "u1", "node": "n4",
        "state": "degraded",
        "severity": "warning",
    }
    # Detection in ~1 tick, 1 s scrapes, 1 s evaluation, for: 2s: well within 10 s of onset.
    assert fired_at is not None
    assert fired_at < FAULT_AT_S + 10
    assert resolved_at is not None
    assert resolved_at > FAULT_AT_S + FAULT_FOR_S
