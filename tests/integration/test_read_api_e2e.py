"""The read API end to end (docs/api.md): ``rainierd run`` on the demo fleet against a real Mosquitto, its
simulator degrading one NeuronLink; a client that knows nothing but the API finds the faulty UltraServer at
the top of ``/api/v1/ultraservers`` sorted worst first, and reaches the faulty link through
``/api/v1/ultraservers/<id>``; the event feed and the fleet summary say the same."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from harness.procs import Broker, free_port
from harness.waits import poll_until
from tests.conftest import Daemon

FAULTY_LINK = 224  # a ring link of node n4, in UltraServer u1


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
    assert worst["id"] == "u1"
    assert worst["lost_by_cause"]["degraded_neuronlink"] > 0

    detail = get(port, f"/api/v1/ultraservers/{worst['id']}")
    unhealthy = [(kind, e["id"], e["state"]) for kind in ("nodes", "chips", "links", "ports") for e in detail[kind]
                 if e["state"] != "healthy"]
    assert unhealthy == [("links", FAULTY_LINK, "degraded")]
    [link] = [e for e in detail["links"] if e["id"] == FAULTY_LINK]
    assert (link["node"], link["lanes_up"]) == ("n4", 4.0)

    events = get(port, "/api/v1/events?entity=neuronlink")["events"]
    assert (events[0]["id"], events[0]["after"], events[0]["ultraserver"]) == (FAULTY_LINK, "degraded", "u1")
    fleet = get(port, "/api/v1/fleet")
    assert fleet["unhealthy"]["neuronlink"]["degraded"] == 1
    assert fleet["chips"]["reporting"] == fleet["chips"]["total"] == 128
    job = get(port, "/api/v1/jobs/lab/pretrain")
    assert [c["id"] for c in job["culprits"]] == [str(FAULTY_LINK)]
    assert daemon.interrupt()[0] == 0, daemon.log()
