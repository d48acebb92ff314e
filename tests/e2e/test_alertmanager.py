"""Alerts reach a receiver: a real Mosquitto, ``rainierd simulate`` degrading
one NeuronLink, ``rainierd monitor``, a real Prometheus evaluating the shipped
rules (test-sized ``for:``) and a real Alertmanager (Debian's
``prometheus-alertmanager``) running deploy/alertmanager/alertmanager.yml
with its timings shortened and its webhook pointed at a receiver this test
runs, which records every notification it is sent."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.procs import Broker, free_port, start_prometheus
from harness.scrape import current_values
from harness.timing import TICK_S
from harness.waits import poll_until
from rainierd.promrules import RUNBOOK_BASE
from tests.helpers import rules_for_tests

pytestmark = [pytest.mark.e2e, pytest.mark.prometheus, pytest.mark.alertmanager]

ROOT = Path(__file__).parents[2]
FAULT_AT_S = 8.0


@dataclass
class Receiver:
    """A webhook receiver on a free loopback port: every notification's JSON body, in arrival order."""

    url: str
    notifications: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.notifications)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """Run a stdlib HTTP server that answers 200 to every POST and keeps its body."""
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with holder[0].lock:
                holder[0].notifications.append({"path": self.path, **body})
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass  # keep the test's output for failures

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Receiver(f"http://127.0.0.1:{server.server_address[1]}/rainierd"))
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()


def shipped_config_for_test(receiver_url: str) -> dict[str, Any]:
    """Return deploy/alertmanager/alertmanager.yml with every wait shortened to 1 s and every webhook at the receiver.

    The routes, matchers, grouping, inhibitions and receivers stay the shipped ones.
    """
    config: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "alertmanager" / "alertmanager.yml").read_text())
    routes = [config["route"]]
    while routes:
        route = routes.pop()
        for key in ("group_wait", "group_interval"):
            if key in route:
                route[key] = "1s"
        routes.extend(route.get("routes", []))
    for receiver in config["receivers"]:
        for webhook in receiver.get("webhook_configs", []):
            webhook["url"] = receiver_url
    return config


@pytest.fixture
def alertmanager(tmp_path: Path, receiver: Receiver) -> Iterator[int]:
    """Start a real Alertmanager on a free loopback port (no cluster listener); return its port once ready."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.fail("the alertmanager binary is missing: apt-get install prometheus-alertmanager (scripts/test does)")
    workdir = tmp_path / "alertmanager"
    workdir.mkdir()
    config = workdir / "alertmanager.yml"
    config.write_text(json.dumps(shipped_config_for_test(receiver.url)))
    port = free_port()
    with (workdir / "alertmanager.log").open("w") as output:  # the child keeps its own copy open
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.path={workdir}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
            stdout=output, stderr=subprocess.STDOUT,
        )

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2):
                return True
        except OSError:
            return proc.poll() is not None  # exited: fail below with its log, not after the timeout

    try:
        poll_until(ready, 20, "alertmanager to become ready")
        assert proc.poll() is None, (workdir / "alertmanager.log").read_text()
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def firing_alerts(receiver: Receiver) -> list[dict[str, Any]]:
    return [alert for n in receiver.received() for alert in n["alerts"] if alert["status"] == "firing"]


@pytest.mark.mosquitto
def test_neuronlink_fault_reaches_the_receiver_through_alertmanager(
    mosquitto: Broker, start_rainierd: Any, alertmanager: int, receiver: Receiver, tmp_path: Path,
) -> None:
    """A degraded NeuronLink arrives at the on-call webhook as one firing alert carrying the link's labels,
    its severity and the absolute runbook URL, and no other alert is sent."""
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(f'[[fault]]\nkind = "nl_degraded"\ntarget = 224\nseverity = 0.75\n'
                        f"at_s = {FAULT_AT_S}\nfor_s = 600\n")
    metrics_port = free_port()
    start_rainierd("monitor", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{metrics_port}",
                   "--tick", str(TICK_S), name="monitor")
    poll_until(lambda: current_values(metrics_port).get("rainier_mqtt_connected") == 1, 10, "monitor to connect")
    rules = rules_for_tests(tmp_path / "rules")
    prom, _ = start_prometheus(tmp_path, {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rules],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager}"]}]}]},
        "scrape_configs": [{"job_name": "rainierd", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}],
    })
    try:
        started = time.monotonic()
        start_rainierd("simulate", "--mqtt-url", mosquitto.url, "--tick", str(TICK_S), "--scenario", str(scenario),
                       name="simulate")
        poll_until(lambda: bool(firing_alerts(receiver)), FAULT_AT_S + 20, "a notification at the receiver")
        arrived_s = time.monotonic() - started
        time.sleep(2)  # anything else that fired alongside would arrive within a group_wait
    finally:
        prom.terminate()
        prom.wait(timeout=10)

    notifications = receiver.received()
    assert {n["path"] for n in notifications} == {"/rainierd"}
    assert {(n["receiver"], n["status"]) for n in notifications} == {("oncall", "firing")}
    alerts = firing_alerts(receiver)
    assert {a["labels"]["alertname"] for a in alerts} == {"RainierNeuronLinkDegraded"}
    alert = alerts[0]
    assert alert["labels"] == {
        "alertname": "RainierNeuronLinkDegraded", "instance": f"127.0.0.1:{metrics_port}", "job": "rainierd",
        "link": "224", "id": "s0/u1/n4/chip0/link2", "kind": "ring", "site": "s0", "ultraserver": "u1", "node": "n4",
        "state": "degraded",
        "severity": "warning",
    }
    assert alert["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}#neuronlink-degraded"
    assert alert["annotations"]["runbook_url"].startswith("https://")
    assert notifications[0]["groupLabels"] == {"alertname": "RainierNeuronLinkDegraded", "site": "s0",
                                               "ultraserver": "u1"}
    # Detection in about a tick, 1 s scrapes and evaluations, for: 2s, a 1 s group_wait.
    assert FAULT_AT_S < arrived_s < FAULT_AT_S + 12


def post_alerts(port: int, alerts: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v2/alerts", data=json.dumps(alerts).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=5):
        pass


def test_an_ultraserver_cooling_alert_silences_its_nodes_cooling_alerts(alertmanager: int, receiver: Receiver) -> None:
    """With the shipped inhibition, a node cooling alert in an UltraServer whose cooling is degraded as a whole is
    not sent, while one in another UltraServer is."""
    rack = {"site": "s0", "ultraserver": "u3", "severity": "critical", "state": "cooling_degraded"}
    post_alerts(alertmanager, [
        {"labels": {"alertname": "RainierUltraServerCoolingDegraded", **rack}},
        {"labels": {"alertname": "RainierNodeCoolingDegraded", **rack, "node": "n12", "severity": "warning"}},
        {"labels": {"alertname": "RainierNodeCoolingDegraded", **rack, "ultraserver": "u4", "node": "n17",
                    "severity": "warning"}},
    ])
    poll_until(lambda: len(firing_alerts(receiver)) >= 2, 15, "two notifications at the receiver")
    time.sleep(2)  # the inhibited alert's group would have flushed by now
    sent = sorted((a["labels"]["alertname"], a["labels"]["ultraserver"], a["labels"].get("node"))
                  for a in firing_alerts(receiver))
    assert sent == [("RainierNodeCoolingDegraded", "u4", "n17"), ("RainierUltraServerCoolingDegraded", "u3", None)]
