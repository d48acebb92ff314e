"""Specification of the drill-down probe (rainierd/api/drilldown.py): one UltraServer's
chips, NeuronLinks, EFA ports and nodes with their health states on demand,
clear errors for bad and unknown targets, and the service discovery of the
UltraServers worth probing, served over HTTP as Prometheus asks for them."""

from __future__ import annotations

import asyncio
import http.client
import json
from collections import Counter

import numpy as np
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from rainierd.api.drilldown import UltraServerProbe
from rainierd.core.analysis import MonitorCore
from rainierd.exporter import build_exporter
from rainierd.fleet.topology import build_topology
from rainierd.monitor.snapshot import MonitorSnapshot, MonitorStatus
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from tests.serving import OK, role_server

# Link 224 is a ring link of node n4, in UltraServer u1.
FAULTY_LINK = 224


@pytest.fixture(scope="module")
def probed() -> tuple[MonitorCore, MonitorSnapshot]:
    """The demo fleet after 45 ticks, NeuronLink 224 degraded from tick 35."""
    topo = build_topology("demo")
    model = FleetModel(topo, np.random.default_rng(3), tick_s=1.0, start_s=1.8e9,
                       faults=[Fault(FaultKind.NL_DEGRADED, FAULTY_LINK, 0.5, 35, 100)])
    core = MonitorCore(topo)
    for tick in range(45):
        analysis = core.step([f for _t, f in tick_frames(topo, model.step(tick), publisher="probe")])
    snap = MonitorSnapshot.of(analysis, generation=45, chips_total=topo.n_present_chips, analysis_s=0.0,
                              analysed_ticks=45, events=Counter(), lag_s=0.0, status=MonitorStatus())
    return core, snap


def prober(probed: tuple[MonitorCore, MonitorSnapshot]) -> UltraServerProbe:
    core, snap = probed
    return UltraServerProbe(core.topology, core, lambda: snap, lock=asyncio.Lock())


class TestProbe:
    async def test_one_ultraserver_every_entity_with_its_state(self, probed: tuple[MonitorCore, MonitorSnapshot],
                                                               ) -> None:
        """u1's probe has a series per chip (64), NeuronLink (192), EFA port (64) and node (4) for each figure and
        state, all labelled u1, and the degraded link's state is 1 (degraded)."""
        status, body = await prober(probed).probe("target=u1")
        assert status == "200 OK"
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        sizes = {name: len(f.samples) for name, f in families.items()}
        assert {k: sizes[k] for k in ("rainier_chip_temperature_celsius", "rainier_chip_utilization_ratio",
                                      "rainier_chip_health_state", "rainier_neuronlink_bandwidth_bytes_per_second",
                                      "rainier_neuronlink_health_state", "rainier_efa_port_health_state",
                                      "rainier_efa_port_transmit_bytes", "rainier_node_inlet_temperature_celsius",
                                      "rainier_node_health_state", "rainier_ultraserver_health_state")} == {
            "rainier_chip_temperature_celsius": 64, "rainier_chip_utilization_ratio": 64,
            "rainier_chip_health_state": 64, "rainier_neuronlink_bandwidth_bytes_per_second": 192,
            "rainier_neuronlink_health_state": 192, "rainier_efa_port_health_state": 64,
            "rainier_efa_port_transmit_bytes": 64, "rainier_node_inlet_temperature_celsius": 4,
            "rainier_node_health_state": 4, "rainier_ultraserver_health_state": 1}
        assert {s.labels["ultraserver"] for f in families.values() for s in f.samples if "ultraserver" in s.labels} \
            == {"u1"}
        states = {s.labels["link"]: s.value for s in families["rainier_neuronlink_health_state"].samples}
        assert states.pop(str(FAULTY_LINK)) == 1.0
        assert set(states.values()) == {0.0}
        link = next(s for s in families["rainier_neuronlink_lanes_up"].samples if s.labels["link"] == "224")
        assert link.labels == {"link": "224", "id": "s0/u1/n4/chip0/link2", "kind": "ring", "chip_a": "64",
                               "chip_b": "80", "node": "n4", "site": "s0", "ultraserver": "u1"}

    @pytest.mark.parametrize(("query", "status"), [
        ("target=u0", "200 OK"), ("target=0", "200 OK"), ("target=s0/u1", "200 OK"), ("", "400 Bad Request"),
        ("target=", "400 Bad Request"), ("target=s0/u1/n4", "400 Bad Request"), ("target=s1/u0", "404 Not Found"),
        ("target=x7", "400 Bad Request"), ("target=u0&target=u1", "400 Bad Request"),
        ("target=u2", "404 Not Found"), ("target=u999999999", "404 Not Found"),
    ])
    async def test_bad_targets_400_unknown_404(self, probed: tuple[MonitorCore, MonitorSnapshot], query: str,
                                               status: str) -> None:
        """A target that is not one UltraServer id, ``u<index>`` or index is 400 with what to send; one the fleet
        lacks is 404."""
        got, body = await prober(probed).probe(query)
        assert got == status
        if status.startswith("400"):
            assert body == b"want exactly one target: an UltraServer id (s0/u1), u<index> (0 .. 1), an index, or an " \
                           b"inventory name; " \
                           b"e.g. /probe?target=u0\n"
        if status.startswith("404"):
            assert body.startswith(b"no UltraServer ")
            assert body.endswith(b"in this fleet (2 UltraServers)\n")

    def test_targets_are_the_ultraservers_in_trouble(self, probed: tuple[MonitorCore, MonitorSnapshot]) -> None:
        """/probe/targets lists, as Prometheus HTTP service discovery, the UltraServers with an unhealthy entity."""
        assert json.loads(prober(probed).targets()) == [
            {"targets": ["u1"], "labels": {"site": "s0", "ultraserver": "u1"}}]

    async def test_waits_for_an_analysis_in_progress(self, probed: tuple[MonitorCore, MonitorSnapshot]) -> None:
        """A probe made while the monitor holds its state lock is served only once the lock is released."""
        core, snap = probed
        lock = asyncio.Lock()
        probe = UltraServerProbe(core.topology, core, lambda: snap, lock=lock)
        await lock.acquire()
        pending = asyncio.create_task(probe.probe("target=u0"))
        await asyncio.sleep(0.05)
        assert not pending.done()
        lock.release()
        assert (await pending)[0] == "200 OK"

    async def test_over_http(self, probed: tuple[MonitorCore, MonitorSnapshot]) -> None:
        """The server routes /probe and /probe/targets: 200 exposition text, 400 and 404 as plain text."""
        core, snap = probed
        exporter = build_exporter(core.topology, lambda: snap)
        server = role_server(exporter.render, ready=lambda: OK)
        probe = prober(probed)
        server.route("/probe", probe.serve_probe)
        server.route("/probe/targets", probe.serve_targets)
        await server.start()

        def get_all() -> list[tuple[int, str, bytes]]:
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            out = []
            for path in ("/probe?target=u1", "/probe?target=bad", "/probe?target=u9", "/probe/targets"):
                connection.request("GET", path)
                response = connection.getresponse()
                out.append((response.status, response.getheader("Content-Type", ""), response.read()))
            connection.close()
            return out

        ok, bad, unknown, targets = await asyncio.to_thread(get_all)
        await server.close()
        assert (ok[0], ok[1]) == (200, CONTENT_TYPE_LATEST)
        assert b'rainier_neuronlink_health_state{link="224"' in ok[2]
        assert (bad[0], unknown[0], targets[0]) == (400, 404, 200)
        assert json.loads(targets[2])[0]["targets"] == ["u1"]
