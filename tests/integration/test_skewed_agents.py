"""Independent node agents whose clocks are off by up to 1.5 s, sampling at
random phases with 25 ms of jitter at a 0.25 s tick (what an independent
publisher written from the docs did, issue 22): the monitor (real process,
real Mosquitto) must never call that overload, and must still call real
queueing overload.

Each agent is its own MQTT connection and publisher id, with a random first
sequence number, as docs/publishing.md describes a node agent.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import aiomqtt
import numpy as np
import pytest

from harness.procs import Broker, free_port
from harness.scrape import current_values
from harness.waits import wait_until
from rainierd.fleet.topology import Topology, build_topology
from rainierd.wire.topics import node_topic

TOPOLOGY = "sites=1,ultraservers=4"  # 16 nodes: 16 agents
TICK_S = 0.25  # the tick the publisher ran at (not the harness's: its subject is sub-second phases)
SKEW_S = 1.5  # each agent's clock is off by up to this, either way
JITTER_S = 0.025  # each sample's time scatters by this much (one sigma)
PUBLISH_S = 60.0  # the rate was 3 episodes a minute: it shows about three times over a minute
PEAK = 1.299e15
QUEUED_S = 3.0  # how long the queueing test's frames wait before the monitor (every stream's, for 10 s)


@dataclass(frozen=True)
class Agent:
    """One node's agent: its own clock skew, sample phase and first sequence number."""

    node: int
    topic: str
    skew_s: float
    phase_s: float
    seq0: int

    def frame(self, k: int, *, sampled_s: float, started_s: float) -> bytes:
        """Return its JSON frame for its ``k``-th sample, taken at ``sampled_s`` (true time); the sample
        time it states is its own clock's, counters are totals since ``started_s``."""
        elapsed = sampled_s - started_s
        chips = [{"chip": self.node * 16 + c, "util": 0.6, "clock_ratio": 1.0, "throttled": False, "temp_c": 61.5,
                  "power_w": 410.0, "hbm_used_bytes": 80 * 2**30, "fp8_flop_total": PEAK * 0.6 * elapsed,
                  "ecc_corrected_total": 0, "ecc_uncorrected_total": 0} for c in range(16)]
        links = [{"link": self.node * 48 + i, "tx_bytes_total": int(0.25 * bw * elapsed), "bw_bytes_s": 0.96 * bw,
                  "lanes_up": 8, "crc_errors_total": 0, "replay_total": 0, "latency_us": 1.5 if i < 32 else 2.5}
                 for i, bw in enumerate([256e9] * 32 + [128e9] * 16)]
        moved = int(5e9 * elapsed)
        efa = [{"port": self.node * 16 + p, "tx_bytes_total": moved, "rx_bytes_total": moved,
                "retrans_bytes_total": 0, "retrans_pkts_total": 0, "retrans_timeout_events_total": 0,
                "unresponsive_remote_events_total": 0, "impaired_remote_conn_events_total": 0, "latency_us": 12.0}
               for p in range(16)]
        return json.dumps({
            "v": 1, "kind": "node", "publisher": f"agent-{self.node}", "seq": self.seq0 + k, "tick": k,
            "t_s": sampled_s + self.skew_s, "node": self.node, "chips": chips, "links": links, "efa": efa,
            "cooling": {"inlet_c": 22.0, "outlet_c": 29.0, "fan_rpm": 6500.0, "power_w": 8600.0},
        }).encode()


def agents(topo: Topology, rng: np.random.Generator, *, skew_s: float) -> list[Agent]:
    """Return one agent per node, each with its own skew in [-skew_s, skew_s] and phase within the tick."""
    return [Agent(node, node_topic(*topo.node_path(node)), float(rng.uniform(-skew_s, skew_s)),
                  float(rng.uniform(0.0, TICK_S)), int(rng.integers(0, 2**31)))
            for node in range(topo.n_nodes)]


async def publish(broker: Broker, agent: Agent, rng: np.random.Generator, *, until_s: float,
                  stall: tuple[float, float] | None = None) -> None:
    """Run one agent until ``until_s`` (time.time()): a sample a tick at its phase, with jitter, published at
    once on its own connection.  ``stall`` (start, end), if given, delays every frame sampled in it by
    ``QUEUED_S``, as a broker or network that queues them would."""
    started = time.time()
    async with aiomqtt.Client("127.0.0.1", broker.port, identifier=f"agent-{agent.node}-{time.time_ns()}") as client:

        async def send(topic: str, payload: bytes, *, after_s: float) -> None:
            await asyncio.sleep(after_s)
            await client.publish(topic, payload, qos=1)

        async with asyncio.TaskGroup() as queued:
            k = 0
            while (due := started + agent.phase_s + k * TICK_S + float(rng.normal(0.0, JITTER_S))) < until_s:
                await asyncio.sleep(max(0.0, due - time.time()))
                sampled = time.time()
                payload = agent.frame(k, sampled_s=sampled, started_s=started)
                if stall is not None and stall[0] <= sampled < stall[1]:
                    queued.create_task(send(agent.topic, payload, after_s=QUEUED_S), name=f"queued-{agent.node}")
                else:
                    await client.publish(agent.topic, payload, qos=1)
                k += 1


def unready(port: int) -> str:
    """Return the monitor's /readyz body when it is not ready (the reasons), else ''."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            response.read()
            return ""
    except urllib.error.HTTPError as error:
        return str(error.read().decode())


async def watch_readiness(port: int, *, until_s: float) -> list[str]:
    """Poll /readyz every 0.1 s until ``until_s`` (time.time()); return every not-ready answer."""
    answers = []
    while time.time() < until_s:
        if body := await asyncio.to_thread(unready, port):
            answers.append(body)
        await asyncio.sleep(0.1)
    return answers


async def run_fleet(broker: Broker, start_rainierd: object, *, skew_s: float, seconds: float,
                    stall: tuple[float, float] | None = None, seed: int = 22,
                    ) -> tuple[dict[str, float], bool]:
    """Start a monitor and one agent per node; return the monitor's metrics once the agents have stopped, and
    whether it ever judged receive_lag (in a log line opening an overload episode, or in /readyz's reasons
    while one was open for another reason: a starved machine may rightly overrun an analysis)."""
    topo = build_topology(TOPOLOGY)
    port = free_port()
    monitor = start_rainierd(  # type: ignore[operator]
        "monitor", "--mqtt-url", broker.url, "--metrics-addr", f"127.0.0.1:{port}", "--tick", str(TICK_S),
        "--topology", TOPOLOGY, name="monitor",
    )
    await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 15, "the monitor to connect")
    rng = np.random.default_rng(seed)
    fleet = agents(topo, rng, skew_s=skew_s)
    now = time.time()
    window = None if stall is None else (now + stall[0], now + stall[1])
    watcher = asyncio.create_task(watch_readiness(port, until_s=now + seconds + 2.0), name="watch-readiness")
    await asyncio.gather(*(publish(broker, agent, np.random.default_rng([seed, agent.node]), until_s=now + seconds,
                                   stall=window) for agent in fleet))
    values = current_values(port)  # at once: the agents have all stopped, and a feed silent together is lost
    answers = await watcher
    lines = [json.loads(line) for line in monitor.log().splitlines() if line.startswith("{")]
    logged = [line["reasons"] for line in lines if str(line.get("event")).startswith("monitor falling behind")]
    judged = any("receive_lag" in reasons for reasons in logged) or any("receive_lag" in a for a in answers)
    return values, judged


@pytest.mark.long(63)
@pytest.mark.mosquitto
async def test_skewed_agents_out_of_phase_are_never_overload(mosquitto: Broker, start_rainierd: object) -> None:
    """Sixteen agents with clocks off by up to 1.5 s, random phases and jitter: no receive_lag overload (on a
    quiet machine no episode at all: a starved one may overrun an analysis, which is overload), no frame lost,
    no node lost or stale."""
    values, judged = await run_fleet(mosquitto, start_rainierd, skew_s=SKEW_S, seconds=PUBLISH_S)
    assert values["rainier_ingest_frames_applied_total"] >= 16 * 0.9 * PUBLISH_S / TICK_S
    assert not judged
    assert values["rainier_ingest_frames_lost_total"] == 0
    lost = {k: v for k, v in values.items() if k.startswith("rainier_health_events_total")
            and ('state="lost"' in k or 'state="stale"' in k) and v}
    assert lost == {}


@pytest.mark.long(38)
@pytest.mark.mosquitto
async def test_skewed_agents_whose_frames_all_queue_are_overload(mosquitto: Broker, start_rainierd: object) -> None:
    """The same agents, but every frame sampled in a 10 s stretch reaches the monitor 3 s late (queued before
    it, as a stalled broker or network queues them): that is receive_lag overload."""
    _, judged = await run_fleet(mosquitto, start_rainierd, skew_s=SKEW_S, seconds=35.0, stall=(15.0, 25.0))
    assert judged
