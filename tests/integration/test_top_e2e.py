"""``rainierd top`` end to end (docs/top.md): over a live ``rainierd run`` whose simulator degrades NeuronLink
224 of UltraServer u1 (a ring link of node n4) two seconds in, through a real Mosquitto:

- driven by Textual's pilot, the faulty UltraServer shows on the heat map and at the top of the worst list,
  the generation moves on, and the keyboard reaches the faulty link;
- in a real terminal (tmux), ``rainierd run --top`` shows the same fleet and event, the keys reach the link,
  and ``q`` stops the UI and the monitor under it, which leaves its log in a file."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from harness.procs import Broker, free_port
from harness.waits import poll_until
from rainierd.top.app import FleetScreen
from rainierd.top.heatmap import HeatMap
from rainierd.top.model import COLOURS
from rainierd.top.screens import EntityScreen, UltraServerScreen
from tests.conftest import Daemon, StartTerminal
from tests.top_driver import rows, settle, text_of, top_app

FAULTY_LINK = 224
LINK_ID, US_ID = "s0/u1/n4/chip0/link2", "s0/u1"  # as the read API (and so top) names them: docs/ids.md
SCENARIO = ('[[job]]\nid = "lab/pretrain"\nultraservers = [1]\n\n[[job]]\nid = "lab/finetune"\nultraservers = [0]\n\n'
            f'[[fault]]\nkind = "nl_degraded"\ntarget = {FAULTY_LINK}\nseverity = 0.5\nat_s = 2\nfor_s = 3600\n')


def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "link.toml"
    path.write_text(SCENARIO)
    return path


async def test_pilot_follows_a_live_monitor_down_to_the_faulty_link(
        mosquitto: Broker, start_rainierd: object, tmp_path: Path) -> None:
    port = free_port()
    daemon: Daemon = start_rainierd(  # type: ignore[operator]
        "run", "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{port}", "--scenario",
        str(scenario(tmp_path)), "--tick", "0.5")
    app = top_app(f"http://127.0.0.1:{port}", interval_s=0.5)
    async with app.run_test(size=(160, 48)) as pilot:
        def faulty_shown() -> bool:
            """u1 marked on the heat map and not green, first of the worst list by a NeuronLink.  Asked until
            true, not at one instant: on a loaded machine a late sample can make u0 lose to stale telemetry for
            a moment, which the screen then rightly shows."""
            if not isinstance(app.screen, FleetScreen) or app.health.link != "live":
                return False
            heat = app.screen.query_one(HeatMap)
            cells = {c["id"]: c for c in heat.layout_.cells}
            worst = rows(app, "#worst")
            return (bool(cells.get(US_ID, {}).get("unhealthy_total")) and bool(worst) and worst[0][0] == US_ID
                    and worst[0][4].startswith("NeuronLink")
                    and heat.cells_by_colour().get(COLOURS[-1]) == ["s0/u0"]
                    and "NeuronLink degraded 1" in text_of(app, "#header"))

        await settle(pilot, faulty_shown, f"u1 shown hurt by its NeuronLink ({daemon.log()[-1500:]})", timeout_s=40)
        first = app.view.generation
        await settle(pilot, lambda: (app.view.generation or 0) > (first or 0), "a new generation")

        await pilot.press("right", "enter")
        await settle(pilot, lambda: isinstance(app.screen, UltraServerScreen) and app.screen.loads > 0, "u1")
        unhealthy = [r[:4] for r in rows(app, "#unhealthy")]
        assert ["neuronlink", LINK_ID, "s0/u1/n4", "degraded"] in unhealthy
        for _ in range(unhealthy.index(["neuronlink", LINK_ID, "s0/u1/n4", "degraded"])):
            await pilot.press("down")
        await pilot.press("enter")
        await settle(pilot, lambda: isinstance(app.screen, EntityScreen) and app.screen.loads > 0, "link 224")
        fields = dict(rows(app, "#fields"))
        assert (fields["id"], fields["index"], fields["state"], fields["lanes_up"]) == (
            LINK_ID, str(FAULTY_LINK), "degraded", "4")


def test_run_top_in_a_real_terminal(terminal: StartTerminal, tmp_path: Path) -> None:
    port = free_port()
    term = terminal([sys.executable, "-m", "rainierd", "run", "--top", "--metrics-addr", f"127.0.0.1:{port}",
                     "--scenario", str(scenario(tmp_path)), "--tick", "0.5"], width=160, height=48)
    screen = term.wait_for(" LIVE ", f"127.0.0.1:{port}", f"neuronlink {LINK_ID} ({US_ID})  healthy -> degraded",
                           timeout_s=60)
    assert re.search(r"chips\s+128/128\s+reporting", screen)  # the header may wrap between them
    assert "lost" in screen
    assert "NeuronLink" in screen
    term.press("Right", "Enter")
    screen = term.wait_for(f"UltraServer {US_ID} (site s0)", "Unhealthy here", f"neuronlink  {LINK_ID}")
    term.press("Enter")
    term.wait_for(f"neuronlink {LINK_ID} is degraded", "lanes_up")
    # One key at a time: an Escape followed at once by a key reads as Alt+key in any terminal.
    term.press("Escape")
    term.wait_for("Unhealthy here")
    term.press("Escape")
    term.wait_for("events (newest last)")
    term.press("q")
    screen = term.wait_for("[exited 0]", timeout_s=20)
    match = re.search(r"rainierd run stopped \(0\); its log: (\S+)", screen)
    assert match, screen
    log = Path(match.group(1))
    assert '"event": "rainierd stopped"' in log.read_text()
    log.unlink()
    poll_until(lambda: not _listening(port), 10, "the monitor under the UI to stop")


def _listening(port: int) -> bool:
    import socket  # noqa: PLC0415

    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0
