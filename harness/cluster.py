"""A three-node clustered MQTT broker on loopback ports, from an engine
already installed from Debian's packages (scripts/install-tools): NATS (``nats-server``: its MQTT
gateway needs JetStream, and JetStream in a cluster needs a server name per
node) or RabbitMQ (``rabbitmq-server`` with ``rabbitmq_mqtt``: three Erlang
nodes on one host need distinct node names, ports, data and log directories,
a shared cookie, and here an epmd of their own on a free port).

Used by ``python -m benchmarks cluster`` (the measurements that chose the engine,
docs/scaling.md), by ``scripts/cluster`` (a cluster to try rainierd against)
and by the cluster tests.  Each node may be killed (SIGKILL, as when its host
dies) and started again; nothing binds beyond 127.0.0.1 and nothing of the
system's own NATS or RabbitMQ is used.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from harness.nats_accounts import Identities
from harness.procs import free_port, require_binary

__all__ = ["ENGINES", "Cluster", "Engine", "Node", "cluster", "server_binary"]

Engine = Literal["nats", "rabbitmq"]
ENGINES: tuple[Engine, ...] = ("nats", "rabbitmq")
_RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")

_NATS_CONF = """\
# Node {name} of a throwaway three-node NATS cluster: loopback only.
server_name: {name}
listen: 127.0.0.1:{client}
http: 127.0.0.1:{http}
# A Rainier batch frame is ~0.5 MB; NATS refuses payloads over max_payload.
max_payload: 8MB
max_pending: 64MB
jetstream {{
  store_dir: "{store}"
  max_memory_store: 256MB
  max_file_store: 2GB
}}
cluster {{
  name: rainierd
  listen: 127.0.0.1:{route}
  routes: [{routes}]
}}
mqtt {{
  listen: 127.0.0.1:{mqtt}
  # Retained messages and sessions are JetStream streams, replicated on every node.
  stream_replicas: 3
}}
{accounts}"""

_RABBIT_CONF = """\
# Node {name} of a throwaway three-node RabbitMQ cluster: loopback only.
listeners.tcp.default = 127.0.0.1:{amqp}
distribution.listener.interface = 127.0.0.1
distribution.listener.port_range.min = {dist}
distribution.listener.port_range.max = {dist}
mqtt.listeners.tcp.default = 127.0.0.1:{mqtt}
mqtt.allow_anonymous = true
# A Rainier batch frame is ~0.5 MB; the default bound is far above it.
log.file.level = warning
"""


def server_binary(engine: Engine) -> str:
    """Return the engine's server binary.

    Raises MissingBinaryError (naming the Debian package) when it is not installed:
    nothing here installs anything.
    """
    if engine == "nats":
        return require_binary("nats-server", package="nats-server", also=["/usr/sbin/nats-server"])
    return require_binary(str(_RABBIT_BIN / "rabbitmq-server"), package="rabbitmq-server")


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _mqtt_connects(port: int, timeout_s: float = 3.0) -> bool:
    """Return whether an MQTT 3.1.1 CONNECT (clean session, anonymous) on ``port`` gets an accepting CONNACK
    within ``timeout_s``.

    NATS creates the JetStream streams that hold MQTT sessions when the first MQTT client connects, and while
    their leaders are elected a CONNECT stalls (seen: a monitor's first connect to node 2 timing out after 10 s,
    so it served from node 3 and the node kill missed it).  ``/healthz`` does not wait for that; this does.
    """
    client_id = f"harness-probe-{secrets.token_hex(4)}".encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(client_id).to_bytes(2, "big") + client_id
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(b"\x10" + bytes([len(body)]) + body)
        try:
            connack = s.recv(4)
        except TimeoutError:
            return False
        s.sendall(b"\xe0\x00")  # DISCONNECT: no will, nothing left behind
    return connack[:2] == b"\x20\x02" and connack[3:4] == b"\x00"


def _wait(what: str, ready: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if ready():  # type: ignore[operator]
                return
        time.sleep(0.1)
    message = f"timed out after {timeout_s} s waiting for {what}"
    raise TimeoutError(message)


@dataclass
class Node:
    """One broker node: its MQTT port, and how to start and kill it."""

    name: str
    mqtt_port: int
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    ready_port: int  # accepting here means the node is up (NATS: its monitoring port; RabbitMQ: MQTT)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Return the node's MQTT URL."""
        return f"mqtt://127.0.0.1:{self.mqtt_port}"

    def start(self) -> None:
        """Start the node's process (it joins the cluster by itself once running)."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the node and its children (RabbitMQ's Erlang VM): no goodbye, as when its host dies."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=10)
            self.proc = None

    @property
    def running(self) -> bool:
        """Return whether the node's process is alive."""
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Cluster:
    """Three nodes of one engine; ``urls`` is what ``--mqtt-url`` takes to fail over between them."""

    engine: Engine
    nodes: list[Node]
    workdir: Path
    extra: list[subprocess.Popen[bytes]] = field(default_factory=list)  # RabbitMQ's own epmd
    identities: Identities | None = None  # NATS with accounts and users; None: anyone may connect as anyone

    def urls(self, *indices: int) -> str:
        """Return the MQTT URLs of the nodes ``indices`` (default: all), comma-separated, in that order."""
        return ",".join(self.nodes[i].url for i in (indices or range(len(self.nodes))))

    def wait_ready(self, index: int, timeout_s: float = 90.0) -> None:
        """Block until node ``index`` serves MQTT as a member of the cluster.

        Raises TimeoutError.
        """
        node = self.nodes[index]
        if self.engine == "nats":
            # /healthz answers ok once JetStream (which MQTT needs) has a meta leader and is current; then an MQTT
            # session must be served too (anonymous: with accounts, /healthz is all this checks).
            def healthy() -> bool:
                url = f"http://127.0.0.1:{node.ready_port}/healthz"
                with urllib.request.urlopen(url, timeout=2) as response:
                    up = response.status == 200 and _port_open(node.mqtt_port)
                return up and (self.identities is not None or _mqtt_connects(node.mqtt_port))
            _wait(f"NATS node {node.name}", healthy, timeout_s)
        else:
            _wait(f"RabbitMQ node {node.name}", lambda: _port_open(node.mqtt_port), timeout_s)

    def subscriptions(self, index: int) -> int:
        """Return how many subscriptions NATS node ``index`` knows, its clients' and its routes' (NATS only):
        a subscription made on another node counts here once it has propagated."""
        url = f"http://127.0.0.1:{self.nodes[index].ready_port}/subsz"
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(json.loads(response.read())["num_subscriptions"])

    def restart(self, index: int) -> None:
        """Start node ``index`` again after a kill and wait until it is back in the cluster."""
        self.nodes[index].start()
        self.wait_ready(index)

    def stop(self) -> None:
        """Kill every node and helper process."""
        for node in self.nodes:
            node.kill()
        for proc in self.extra:
            proc.kill()
            proc.wait(timeout=10)


def _nats_nodes(workdir: Path, binary: str, identities: Identities | None) -> list[Node]:
    ports = [{"client": free_port(), "http": free_port(), "route": free_port(), "mqtt": free_port()}
             for _ in range(3)]
    routes = ", ".join(f"nats-route://127.0.0.1:{p['route']}" for p in ports)
    nodes = []
    for i, p in enumerate(ports):
        name = f"n{i + 1}"
        conf = workdir / f"{name}.conf"
        accounts = identities.config() if identities is not None else ""
        conf.write_text(_NATS_CONF.format(name=name, store=workdir / name, routes=routes, accounts=accounts, **p))
        nodes.append(Node(name, p["mqtt"], [binary, "-c", str(conf)], dict(os.environ), workdir / f"{name}.log",
                          ready_port=p["http"]))
    return nodes


def _rabbit_nodes(workdir: Path, epmd_port: int, cookie: str) -> list[Node]:
    nodes = []
    for i in range(3):
        name = f"rainierd-r{i + 1}"
        base = workdir / name
        base.mkdir(parents=True, exist_ok=True)
        mqtt, amqp, dist = free_port(), free_port(), free_port()
        (base / "rabbitmq.conf").write_text(_RABBIT_CONF.format(name=name, amqp=amqp, dist=dist, mqtt=mqtt))
        (base / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
        cookie_file = base / ".erlang.cookie"
        cookie_file.write_text(cookie)
        cookie_file.chmod(0o400)
        env = {
            **os.environ, "HOME": str(base), "ERL_EPMD_PORT": str(epmd_port),
            "RABBITMQ_NODENAME": f"{name}@localhost", "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(amqp), "RABBITMQ_DIST_PORT": str(dist),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"), "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_PID_FILE": str(base / "pid"), "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
        }
        nodes.append(Node(name, mqtt, [str(_RABBIT_BIN / "rabbitmq-server")], env, workdir / f"{name}.log",
                          ready_port=mqtt))
    return nodes


def _rabbitmqctl(node: Node, *args: str, timeout_s: float = 120.0) -> None:
    subprocess.run([str(_RABBIT_BIN / "rabbitmqctl"), "-n", node.env["RABBITMQ_NODENAME"], *args], env=node.env,
                   check=True, capture_output=True, timeout=timeout_s)


@contextlib.contextmanager
def cluster(engine: Engine, workdir: Path, *, identities: Identities | None = None) -> Iterator[Cluster]:
    """Start a three-node cluster of ``engine`` under ``workdir``; kill it on exit.

    ``identities`` (NATS only) puts monitors and publishers in accounts of
    their own with per-user permissions (harness/nats_accounts.py); without,
    anyone connects without a password, as any client id.

    Raises MissingBinaryError when the engine is not installed, TimeoutError when
    the cluster does not form, ValueError for identities on RabbitMQ.
    """
    binary = server_binary(engine)
    if identities is not None and engine != "nats":
        raise ValueError("identities are written for NATS only")
    workdir.mkdir(parents=True, exist_ok=True)
    extra: list[subprocess.Popen[bytes]] = []
    if engine == "nats":
        nodes = _nats_nodes(workdir, binary, identities)
    else:
        epmd_port = free_port()
        epmd = shutil.which("epmd") or "/usr/bin/epmd"
        extra.append(subprocess.Popen([epmd, "-address", "127.0.0.1", "-port", str(epmd_port)],
                                      env={**os.environ, "ERL_EPMD_PORT": str(epmd_port)}))
        nodes = _rabbit_nodes(workdir, epmd_port, secrets.token_hex(16))
    running = Cluster(engine, nodes, workdir, extra, identities)
    try:
        for node in nodes:
            node.start()
        for i in range(len(nodes)):
            running.wait_ready(i)
        if engine == "rabbitmq":
            for node in nodes[1:]:
                _rabbitmqctl(node, "stop_app")
                _rabbitmqctl(node, "join_cluster", nodes[0].env["RABBITMQ_NODENAME"])
                _rabbitmqctl(node, "start_app")
            for i in range(len(nodes)):
                running.wait_ready(i)
        yield running
    finally:
        running.stop()
