"""Who may write what, enforced by a real Mosquitto running the shipped
config (deploy/mosquitto/): no anonymous client, a node agent writes only its
own node's telemetry, only the monitor writes events, nobody else writes the
monitor's status, only the scheduler user writes jobs.  Each refusal is checked next to an allowed control, so the
test fails if the path itself were broken."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiomqtt
import numpy as np
import pytest

from harness.procs import free_port, wait_for_port
from harness.scrape import current_values
from harness.timing import within
from harness.waits import poll_until
from rainierd.fleet.topology import build_topology
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_batches, tick_frames
from rainierd.wire import NodeBatch, encode_binary
from rainierd.wire.topics import status_topic
from tests.conftest import Daemon

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy" / "mosquitto"
TOPO = build_topology("demo")
CHANGES = "rainier_ingest_publisher_changes_total"


@dataclass(frozen=True)
class ShippedBroker:
    """Mosquitto with deploy/mosquitto/mosquitto.conf and acl, and the users make-credentials made."""

    port: int
    credentials: dict[str, dict[str, str]]  # user -> RAINIERD_MQTT_* variables
    log: Path
    secrets: Path  # make-credentials' output: <user>.env and <user>.toml

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def password(self, user: str) -> str:
        return self.credentials[user]["RAINIERD_MQTT_PASSWORD"]


@pytest.fixture
def shipped_broker(tmp_path: Path) -> Iterator[ShippedBroker]:
    if shutil.which("mosquitto_passwd") is None:
        pytest.fail("mosquitto_passwd is missing: apt-get install mosquitto (.ci/run does)")
    # Mosquitto started as root drops to its own user before reading the
    # password file and writing its store; pytest's tmp_path is 0700.
    d = Path(tempfile.mkdtemp(prefix="rainierd-acl-"))
    d.chmod(0o755)
    secrets, passwd = tmp_path / "secrets", d / "passwd"
    # The checkout itself may sit under a 0700 directory too (a CI clone in mktemp -d): copy the shipped ACL.
    acl = d / "acl"
    shutil.copyfile(DEPLOY / "acl", acl)
    acl.chmod(0o644)
    subprocess.run([DEPLOY / "make-credentials", "n3"], check=True, capture_output=True,
                   env={**os.environ, "SECRETS_DIR": str(secrets), "PASSWD_FILE": str(passwd)})
    credentials = {}
    for env_file in secrets.glob("*.env"):  # every user make-credentials made, n3 and the shipped ones
        lines = env_file.read_text().splitlines()
        credentials[env_file.stem] = dict(line.split("=", 1) for line in lines)
    port = free_port()
    config = (DEPLOY / "mosquitto.conf").read_text()
    for shipped, here in (("listener 1883", f"listener {port} 127.0.0.1"),
                          ("/mosquitto/config/passwd", str(passwd)),
                          ("/mosquitto/config/acl", str(acl)),
                          ("/mosquitto/data/", f"{d}/data/")):
        assert shipped in config, f"the shipped config no longer says {shipped!r}"
        config = config.replace(shipped, here)
    (d / "data").mkdir(mode=0o777)
    (d / "data").chmod(0o777)
    (d / "mosquitto.conf").write_text(config)
    log = tmp_path / "mosquitto.log"
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    with log.open("w") as output:
        proc = subprocess.Popen([binary, "-c", str(d / "mosquitto.conf")], stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port)
        yield ShippedBroker(port, credentials, log, secrets)
    finally:
        proc.terminate()
        proc.wait(timeout=5)
        shutil.rmtree(d, ignore_errors=True)


def rogue_frames(node: int, tick: int = 0) -> tuple[str, bytes]:
    """A valid, current frame for ``node`` (its ``tick``-th) from a publisher id the monitor has never seen."""
    model = FleetModel(TOPO, np.random.default_rng(7), tick_s=0.3, start_s=time.time())
    for step in range(tick + 1):
        sample = model.step(step)
    for topic, frame in tick_frames(TOPO, sample, publisher="rogue", nodes=range(node, node + 1)):
        return topic, encode_binary(frame)
    raise AssertionError(f"node {node} has no frame")


def ingest_values(port: int) -> str:
    """The monitor's non-zero ingest figures, for a failure's message."""
    return "; ".join(f"{k}={v}" for k, v in current_values(port).items() if "ingest" in k and v)


def rogue_batch() -> bytes:
    """A valid, current batch frame of every node of bucket 0 of site 0 (node 3's UltraServer), from a publisher
    id the monitor has never seen."""
    model = FleetModel(TOPO, np.random.default_rng(8), tick_s=1.0, start_s=time.time())
    frames = tick_batches(TOPO, model.step(0), publisher="rogue-batch", nodes_per_batch=TOPO.n_nodes)
    topic, batch = next((t, f) for t, f in frames if isinstance(f, NodeBatch))
    assert topic.startswith("rainier/v1/telemetry/s0/b0/batch/")
    return encode_binary(batch)


async def connect_fails(broker: ShippedBroker, username: str | None, password: str | None) -> str:
    try:
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier="intruder", username=username,
                                  password=password, timeout=5):
            return "connected"
    except aiomqtt.MqttError as exc:
        return str(exc)


async def retained(broker: ShippedBroker, topic_filter: str) -> dict[str, bytes]:
    """Return the retained messages under ``topic_filter``, read as the node agent n3."""
    got: dict[str, bytes] = {}
    async with aiomqtt.Client("127.0.0.1", broker.port, identifier="n3-reader", username="n3",
                              password=broker.password("n3")) as reader:
        await reader.subscribe(topic_filter, qos=1)
        with contextlib.suppress(TimeoutError):  # retained messages come at once; then, quiet
            async with asyncio.timeout(1.0):
                async for message in reader.messages:
                    got[message.topic.value] = bytes(message.payload)  # type: ignore[arg-type]
    return got


def start_role(start_rainierd: object, broker: ShippedBroker, role: str, user: str, *args: str) -> Daemon:
    env = broker.credentials[user]
    return start_rainierd(role, "--mqtt-url", broker.url, "--tick", "0.3", *args,  # type: ignore[operator,no-any-return]
                          env=env, name=role)


def test_the_shipped_broker_refuses_what_a_client_may_not_write(
    shipped_broker: ShippedBroker, start_rainierd: object,
) -> None:
    """Anonymous and wrong-password clients are turned away; an authenticated node agent's
    telemetry for another node, its forged event, advisory and monitor status are dropped,
    while its own node's telemetry is applied."""
    broker = shipped_broker
    port = free_port()
    # No reconnect grace: the listening clock runs from the connect, so node 3's new publisher id can take the
    # node over within this test (while the clock stands, a takeover waits: docs/wire-format.md).
    monitor = start_role(start_rainierd, broker, "monitor", "rainierd-monitor", "--metrics-addr", f"127.0.0.1:{port}",
                         "--reconnect-grace", "0")
    sim = start_role(start_rainierd, broker, "simulate", "rainierd-sim", "--seed", "3", "--ticks", "4")
    assert sim.proc.wait(timeout=within(30)) == 0, sim.log()
    poll_until(lambda: current_values(port).get("rainier_monitor_last_tick", -1) == 3, timeout_s=30,
               what=f"the monitor applies the simulator's frames\n{monitor.log()[-2000:]}")
    assert current_values(port)[CHANGES] == 0

    assert "Not authorized" in asyncio.run(connect_fails(broker, None, None))
    assert "Not authorized" in asyncio.run(connect_fails(broker, "rainierd-sim", "not-the-password"))

    monitor_status = status_topic("rainierd-monitor")
    forged_event = "rainier/v1/events/chip/5"
    forged_advisory = "rainier/v1/actions/n4"  # an agent must not cordon another node, nor clear its own advisory

    async def intrude() -> None:
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier="n3", username="n3",
                                  password=broker.password("n3")) as n3:
            await n3.publish(*rogue_frames(4), qos=1)  # another node's telemetry: refused
            await n3.publish("rainier/v1/telemetry/s0/batch/n3", rogue_batch(), qos=1)  # many nodes at once: refused
            await n3.publish("rainier/v1/telemetry/s0/b0/batch/n3", rogue_batch(), qos=1)  # in either layout
            await n3.publish(forged_event, b'{"entity": "chip", "id": 5, "after": "failed"}', qos=1, retain=True)
            await n3.publish(monitor_status, b"offline", qos=1, retain=True)
            await n3.publish(forged_advisory, b'{"advisory": {"action": "cordon"}}', qos=1, retain=True)
            # Its own node's telemetry, the allowed control: a new publisher id takes a node only with three
            # frames in a row over at least a tick (docs/wire-format.md), so it sends three, a tick apart.
            for tick in range(3):
                await n3.publish(*rogue_frames(3, tick), qos=1)
                await asyncio.sleep(0.4)

    asyncio.run(intrude())
    # The control lands (a new publisher id on node 3 is a publisher change); node 4's frame never did.
    poll_until(lambda: current_values(port).get(CHANGES) == 1, timeout_s=10,
               what=f"node 3's own frames are applied; {ingest_values(port)}")
    time.sleep(1.0)
    values = current_values(port)
    assert values[CHANGES] == 1, ingest_values(port)
    assert values["rainier_mqtt_status_overwritten_total"] == 0  # the forgery never reached the monitor

    assert forged_event not in asyncio.run(retained(broker, "rainier/v1/events/#"))
    assert forged_advisory not in asyncio.run(retained(broker, "rainier/v1/actions/#"))
    assert asyncio.run(retained(broker, monitor_status)) == {monitor_status: b"online"}
    assert monitor.proc.poll() is None


def test_the_monitor_says_online_again_when_its_status_is_overwritten(
    mosquitto: object, start_rainierd: object,
) -> None:
    """On a broker without an ACL, a client that sets the monitor's retained status to offline is
    answered at once: the monitor says online again and counts it."""
    port = free_port()
    url = mosquitto.url  # type: ignore[attr-defined]
    monitor: Daemon = start_rainierd("monitor", "--mqtt-url", url, "--mqtt-client-id", "mon-1",  # type: ignore[operator]
                                     "--metrics-addr", f"127.0.0.1:{port}", name="monitor")
    poll_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, timeout_s=20, what="connected")
    host, broker_port = "127.0.0.1", int(url.rsplit(":", 1)[1])

    async def overwrite_then_read() -> bytes:
        async with aiomqtt.Client(host, broker_port, identifier="vandal") as vandal:
            await vandal.publish(status_topic("mon-1"), b"offline", qos=1, retain=True)
        await asyncio.sleep(1.0)
        async with aiomqtt.Client(host, broker_port, identifier="reader") as reader:
            await reader.subscribe(status_topic("mon-1"), qos=1)
            async with asyncio.timeout(5):
                async for message in reader.messages:
                    return bytes(message.payload)  # type: ignore[arg-type]
        raise AssertionError("no retained status")

    assert asyncio.run(overwrite_then_read()) == b"online"
    assert current_values(port)["rainier_mqtt_status_overwritten_total"] == 1
    assert "this monitor's status was overwritten while it serves; saying online again" in monitor.events()


async def retained_as(broker: ShippedBroker, user: str, topic_filter: str) -> dict[str, bytes]:
    """Return the retained messages under ``topic_filter`` that ``user`` is sent."""
    got: dict[str, bytes] = {}
    async with aiomqtt.Client("127.0.0.1", broker.port, identifier=user, username=user,
                              password=broker.password(user)) as reader:
        await reader.subscribe(topic_filter, qos=1)
        with contextlib.suppress(TimeoutError):  # retained messages come at once; then, quiet
            async with asyncio.timeout(1.0):
                async for message in reader.messages:
                    if message.retain:
                        got[message.topic.value] = bytes(message.payload)  # type: ignore[arg-type]
    return got


def test_only_the_scheduler_user_writes_jobs_and_the_monitors_read_them(shipped_broker: ShippedBroker) -> None:
    """`rainierd jobs static` as rainierd-scheduler retains its jobs, which the monitor users read; a node
    agent's forged job and its removal of a real one are dropped, and it is sent no job document."""
    broker = shipped_broker
    inventory = ROOT / "tests" / "data" / "inventory-two-sites.toml"
    done = subprocess.run(
        [sys.executable, "-m", "rainierd", "jobs", "static", str(ROOT / "tests" / "data" / "jobs-static.toml"),
         "--topology", str(inventory), "--mqtt-url", broker.url, "--log-format", "json"],
        env={**os.environ, **broker.credentials["rainierd-scheduler"]}, capture_output=True,
        timeout=within(60), check=False,
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    jobs = ["rainier/v1/jobs/eval/nightly", "rainier/v1/jobs/reserved-u0017"]
    # The scheduler's own retained status came back to it: its read of the broker's jobs did not wait it out.
    assert b"no retained status came back" not in done.stdout + done.stderr

    async def forge() -> None:
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier="n3", username="n3",
                                  password=broker.password("n3")) as n3:
            await n3.publish("rainier/v1/jobs/eval/nightly", b"", qos=1, retain=True)  # end a real job: dropped
            forged = {"v": 1, "id": "mine", "name": "mine", "owner": "n3", "scheduler": "other", "source": "n3",
                      "nodes": ["n3"], "start_s": 1.0}
            await n3.publish("rainier/v1/jobs/mine", json.dumps(forged).encode(), qos=1, retain=True)

    asyncio.run(forge())
    for monitor in ("rainierd-monitor", "rainierd-monitor-0", "rainierd-monitor-1"):
        assert sorted(asyncio.run(retained_as(broker, monitor, "rainier/v1/jobs/#"))) == jobs, monitor
    assert asyncio.run(retained_as(broker, "n3", "rainier/v1/jobs/#")) == {}
    assert asyncio.run(retained_as(broker, "rainierd-aggregate-0", "rainier/v1/jobs/#")) == {}
