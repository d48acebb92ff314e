"""A new publisher's first hour, through the real command line (issue 22 item 7):
every inventory mistake stops ``rainierd`` with exit code 2 and one line on
stderr, never a traceback; an inventory's own settings are honoured without a
flag repeating them; the start log counts the fleet the inventory lists; and
``examples/publisher.py`` publishes on the topics a monitor shard receives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.procs import Broker, free_port
from harness.scrape import current_values
from harness.timing import TICK_S, within
from harness.waits import poll_until

ROOT = Path(__file__).parents[2]
PUBLISHER = ROOT / "examples" / "publisher.py"

# Two UltraServers of one site, the second with three of its four nodes; 8 EFA ports a node.
INVENTORY = """\
name = "first-hour"
efa_ports_per_node = 8

[[site]]
name = "use2-dc1"

  [[site.ultraserver]]
  name = "u0001"
    [[site.ultraserver.node]]
    index = 0
    hostname = "ip-10-0-1-1"

  [[site.ultraserver]]
  name = "u0002"
    [[site.ultraserver.node]]
    index = 0
    hostname = "ip-10-0-2-1"
    [[site.ultraserver.node]]
    index = 1
    hostname = "ip-10-0-2-2"
    detail = true
    [[site.ultraserver.node]]
    index = 3
    hostname = "ip-10-0-2-4"
"""

_NODE = '[[site.ultraserver.node]]\nindex = 0\n'
_ONE = f'[[site]]\nname = "a"\n[[site.ultraserver]]\nname = "u"\n{_NODE}'

# Every kind of inventory mistake: (the file's bytes, or None for no file; what the line must name).
MISTAKES: dict[str, tuple[bytes | None, str]] = {
    "malformed_toml": (b'[[site]\nname = "a"\n', "Expected"),
    "unknown_top_key": (b'colour = "red"\n' + _ONE.encode(), "colour"),
    "unknown_node_key": (_ONE.encode() + b'rack = "r7"\n', "rack"),
    "name_with_a_space": (b'name = "us-east-2 training"\n' + _ONE.encode(), "name"),
    "site_name_with_a_slash": (_ONE.replace('"a"', '"dc/1"').encode(), "site.0.name"),
    "duplicate_site_names": ((_ONE + _ONE).encode(), "site name 'a' appears twice"),
    "duplicate_ultraserver_names": ((_ONE + f'[[site.ultraserver]]\nname = "u"\n{_NODE}').encode(),
                                    "UltraServer name 'u' appears twice"),
    "duplicate_hostnames": (_ONE.replace(_NODE, f'{_NODE}hostname = "h"\n[[site.ultraserver.node]]\nindex = 1\n'
                                               'hostname = "h"\n').encode(), "hostname 'h' appears twice"),
    "node_index_twice": ((_ONE + _NODE).encode(), "lists a node index twice"),
    "node_index_out_of_range": (_ONE.replace("index = 0", "index = 4").encode(), "index"),
    "five_nodes": ((_ONE + "".join(_NODE.replace("0", str(i)) for i in range(1, 5))).encode(), "node"),
    "no_sites": (b'name = "empty"\n', "site"),
    "ultraserver_without_nodes": (b'[[site]]\nname = "a"\n[[site.ultraserver]]\nname = "u"\n', "node"),
    "zero_efa_ports": (b"efa_ports_per_node = 0\n" + _ONE.encode(), "efa_ports_per_node"),
    "efa_ports_as_text": (b'efa_ports_per_node = "8"\n' + _ONE.encode(), "efa_ports_per_node"),
    "detail_not_a_bool": (_ONE.encode() + b'detail = "yes"\n', "detail"),
    "not_utf8": (b"\xff\xfe", "not UTF-8"),
    "missing_file": (None, "No such file"),
}


def _rainierd(*args: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rainierd", *args], capture_output=True, text=True,
                          timeout=within(timeout_s), check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})


class TestEveryInventoryMistakeExitsTwo:
    @pytest.mark.parametrize("mistake", sorted(MISTAKES))
    @pytest.mark.parametrize("role", ["monitor", "aggregate"])
    def test_exit_2_and_one_line(self, mistake: str, role: str, tmp_path: Path) -> None:
        """The role refuses the file before it starts: exit code 2, one line on stderr naming the file and what
        is wrong, nothing on stdout."""
        content, names = MISTAKES[mistake]
        path = tmp_path / "fleet.toml"
        if content is not None:
            path.write_bytes(content)
        result = _rainierd(role, "--topology", str(path), "--mqtt-url", f"mqtt://127.0.0.1:{free_port()}",
                           "--metrics-addr", f"127.0.0.1:{free_port()}")
        lines = result.stderr.splitlines()
        assert (result.returncode, len(lines), result.stdout) == (2, 1, ""), result.stderr
        assert str(path) in lines[0]
        assert names in lines[0]

    def test_an_unreadable_path_exits_2(self, tmp_path: Path) -> None:
        """A directory where the file should be (what root meets for a file it cannot read) is refused the
        same way."""
        path = tmp_path / "fleet.toml"
        path.mkdir()
        result = _rainierd("monitor", "--topology", str(path), "--mqtt-url", f"mqtt://127.0.0.1:{free_port()}")
        assert (result.returncode, len(result.stderr.splitlines())) == (2, 1), result.stderr
        assert "not a regular file" in result.stderr

    def test_a_bridge_for_a_node_the_inventory_lacks_exits_2(self, tmp_path: Path) -> None:
        """A bridge told to publish for a hostname the inventory does not list: settings that disagree with the
        file stop it with one line."""
        path = tmp_path / "fleet.toml"
        path.write_text(INVENTORY)
        result = _rainierd("bridge", "neuron-monitor", "--node", "ip-10-9-9-9", "--topology", str(path),
                           "--mqtt-url", f"mqtt://127.0.0.1:{free_port()}")
        assert (result.returncode, len(result.stderr.splitlines())) == (2, 1), result.stderr
        assert "ip-10-9-9-9" in result.stderr


def _start_log(daemon: object) -> dict[str, object]:
    log = daemon.log  # type: ignore[attr-defined]
    poll_until(lambda: '"rainierd started"' in log() or daemon.proc.poll() is not None,  # type: ignore[attr-defined]
               within(30.0), "the start log")
    assert daemon.proc.poll() is None, log()  # type: ignore[attr-defined]
    line = next(line for line in log().splitlines() if '"rainierd started"' in line)
    fields: dict[str, object] = json.loads(line)
    return fields


class TestTheInventoryIsTheFleet:
    def test_the_start_log_counts_the_inventory_and_its_settings_hold_without_flags(
        self, tmp_path: Path, start_rainierd: object,
    ) -> None:
        """A monitor on an inventory of 4 nodes (two partial UltraServers, 8 EFA ports a node), with no flag
        repeating any of it: it starts (it exited 1 with a traceback over the port count), and its start log
        says the inventory's name, 4 nodes, 64 chips and 32 ports (it said 128 chips: every id of 2 UltraServers).
        """
        path = tmp_path / "fleet.toml"
        path.write_text(INVENTORY)
        daemon = start_rainierd(  # type: ignore[operator]
            "monitor", "--topology", str(path), "--mqtt-url", f"mqtt://127.0.0.1:{free_port()}",
            "--metrics-addr", f"127.0.0.1:{free_port()}", "--tick", str(TICK_S), name="monitor")
        fields = _start_log(daemon)
        assert {k: fields[k] for k in ("topology", "nodes", "chips", "efa_ports")} == {
            "topology": "first-hour", "nodes": 4, "chips": 64, "efa_ports": 32}
        assert daemon.interrupt()[0] == 0


class TestTheExamplePublisher:
    @pytest.mark.mosquitto
    def test_a_monitor_shard_accepts_every_frame(self, mosquitto: Broker, tmp_path: Path,
                                                 start_rainierd: object) -> None:
        """examples/publisher.py for a node of UltraServer 1, against a real Mosquitto and monitor shard 1/2
        (which subscribes to bucket-level topics only): its 16 chips report, its frames are applied, and
        nothing is rejected (on the bucket-less topics, no shard received a frame)."""
        path = tmp_path / "fleet.toml"
        path.write_text(INVENTORY)
        port = free_port()
        start_rainierd(  # type: ignore[operator]
            "monitor", "--topology", str(path), "--mqtt-url", mosquitto.url, "--metrics-addr", f"127.0.0.1:{port}",
            "--tick", str(TICK_S), "--shard", "1/2", name="monitor")
        poll_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, within(30.0),
                   "the monitor to connect")
        ticks = 60
        with (tmp_path / "publisher.log").open("w") as log:
            agent = subprocess.Popen(
                [sys.executable, str(PUBLISHER), "--url", mosquitto.url, "--inventory", str(path),
                 "--hostname", "ip-10-0-2-2", "--tick", str(TICK_S), "--ticks", str(ticks)],
                stdout=log, stderr=subprocess.STDOUT)
        try:
            def reporting() -> bool:
                values = current_values(port)
                return (values.get("rainier_fleet_chips_reporting") == 16
                        and values.get("rainier_ingest_frames_applied_total", 0) >= 8)

            poll_until(reporting, within(30.0), "the agent's 16 chips reporting")
            values = current_values(port)
        finally:
            agent.kill()
            agent.wait()
        rejected = {k: v for k, v in values.items() if k.startswith("rainier_ingest_decode_errors_total") and v}
        assert rejected == {}
        assert values["rainier_ingest_frames_lost_total"] + values["rainier_ingest_frames_missing"] == 0
        # detail = true on the agent's node (n5): its chips are exported one by one, without a flag.
        assert sum(1 for key in values if key.startswith("rainier_chip_utilization_ratio{")
                   and 'node="n5"' in key) == 16
