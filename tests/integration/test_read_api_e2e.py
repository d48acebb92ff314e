"""The read API end to end (docs/api.md): ``rainierd run`` on the demo fleet against a real Mosquitto, its
simulator degrading one NeuronLink; a client that knows nothing but the API finds the faulty UltraServer at
the top of ``/api/v1/ultraservers`` sorted worst first, and reaches the faulty link through
``/api/v1/ultraservers/<id>``; the event feed and the fleet summary say the same; and the link has one name
on every surface (docs/ids.md): its MQTT event, its log line, ``/metrics``, the read API, its node's
advisory and ``rainierd node-check``."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from harness.procs import Broker, free_port
from harness.waits import poll_until
from tests.conftest import Daemon
from tests.integration.test_jobs_monitor import retained_event

FAULTY_LINK = 224  # a ring link of node n4, in UltraServer u1
# Its one name on every surface, its node's and its UltraServer's (docs/ids.md).
LINK_ID, NODE_ID, US_ID = "s0/u1/n4/chip0/link2", "s0/u1/n4", "s0/u1"


def get(port: int, target: str) -> Any:
    """Return the JSON document at ``target`` (raising on any status but 200)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{target}", timeout=10) as response:
        return json.loads(response.read())


def test_worst_first_leads_to_the_faulty_link(mosquitto: Broker, start_rainierd: object, tmp_path: Path) -> None:
    """With link 224 of u1 at half its lanes, u1 tops the UltraServers by lost FLOP/s, and its detail shows
    link 224 degraded, the only unhealthy entity; the events and the fleet summary agree."""
    scenario = tmp_path / "link.toml"
    scenario.write_text('[[job]]\nid = "lab/pretrain"\nultraservers = [1]\n\n'
                        '[[job]]\nid = "lab/finetune"\nultraservers = [0]\n\n'
                        f'[[fault]]\nkind = "nl_degraded"\ntarget = {FAULTY_LINK}\nseverity = 0.5\nat_s = 2\n'
                        'for_s = 3600\n')
    port = free_port()
    daemon: Daemon = start_rainierd(  # type: ignore[operator]
        "run", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{port}", "--scenario", str(scenario),
        "--tick", "0.5")
    worst: dict[str, Any] = {}

    def detected() -> bool:
        nonlocal worst
        try:
            page = get(port, "/api/v1/ultraservers?sort=lost&limit=1")
        except OSError:  # not listening yet, or 503 before the first analysis
            return False
        worst = page["ultraservers"][0] if page["ultraservers"] else {}
        return worst.get("lost_flops", 0) > 0 and worst["unhealthy"]["neuronlink"] >= 1

    poll_until(detected, 40.0, f"an UltraServer losing FLOP/s to a link ({daemon.log()[-2000:]})")
    assert (worst["id"], worst["index"]) == (US_ID, 1)
    assert worst["lost_by_cause"]["degraded_neuronlink"] > 0

    detail = get(port, f"/api/v1/ultraservers/{worst['id']}")
    unhealthy = [(kind, e["id"], e["state"]) for kind in ("nodes", "chips", "links", "ports") for e in detail[kind]
                 if e["state"] != "healthy"]
    assert unhealthy == [("links", LINK_ID, "degraded")]
    [link] = [e for e in detail["links"] if e["id"] == LINK_ID]
    assert (link["index"], link["node"], link["lanes_up"]) == (FAULTY_LINK, NODE_ID, 4.0)

    events = get(port, "/api/v1/events?entity=neuronlink")["events"]
    named = {"entity": "neuronlink", "id": LINK_ID, "index": FAULTY_LINK, "ultraserver": US_ID, "node": NODE_ID}
    assert {k: events[0][k] for k in named} | {"after": events[0]["after"]} == named | {"after": "degraded"}
    fleet = get(port, "/api/v1/fleet")
    assert fleet["unhealthy"]["neuronlink"]["degraded"] == 1
    assert fleet["chips"]["reporting"] == fleet["chips"]["total"] == 128
    job = get(port, "/api/v1/jobs/lab/pretrain")
    assert [(c["id"], c["index"]) for c in job["culprits"]] == [(LINK_ID, FAULTY_LINK)]
    one_name_everywhere(mosquitto, daemon, port, named)
    assert daemon.interrupt()[0] == 0, daemon.log()


def one_name_everywhere(broker: Broker, daemon: Daemon, port: int, named: dict[str, Any]) -> None:
    """Assert the degraded link has the same name in its MQTT event, its log line, /metrics, its node's advisory
    and node-check's line as in the read API (``named``: its entity, id, index, UltraServer and node)."""
    mqtt = retained_event(broker, "neuronlink", FAULTY_LINK, timeout_s=5.0)  # the topic keeps the index
    assert mqtt is not None
    assert {k: mqtt[k] for k in named} == named
    records = [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]
    [logged] = [r for r in records if r.get("event") == "health degraded" and r.get("entity") == "neuronlink"]
    assert {k: logged[k] for k in named} == named
    [injected] = [r for r in records if r.get("event") == "fault injected"]  # the simulator's line meets it
    assert (injected["target"], injected["id"]) == (FAULTY_LINK, named["id"])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        scrape = response.read().decode()
    assert f'rainier_neuronlink_unhealthy{{link="{FAULTY_LINK}",id="{LINK_ID}",' in scrape
    advice = get(port, f"/api/v1/actions?node={NODE_ID}")  # pending: it has not stood the hold yet
    [advisory] = advice["actions"]
    assert (advisory["node"], advisory["index"], advisory["ultraserver"]) == (NODE_ID, 4, US_ID)
    assert [(c["id"], c["index"]) for c in advisory["causes"]] == [(LINK_ID, FAULTY_LINK)]
    assert LINK_ID in advisory["reason"]
    for node, code in ((NODE_ID, 0), ("n4", 0), ("ip-10-9-9-9", 2)):
        check = subprocess.run([sys.executable, "-m", "rainierd", "node-check", "--node", node, "--url",
                                f"http://127.0.0.1:{port}"], capture_output=True, text=True, timeout=10, check=False)
        assert check.returncode == code, check.stdout
        assert check.stdout.count("\n") == 1, check.stdout
        assert (LINK_ID in check.stdout) == (code == 0), check.stdout
