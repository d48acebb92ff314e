"""Wiring of the roles into one process: one TaskGroup, named tasks, and a
clean stop on SIGINT/SIGTERM (or when a bounded simulation ends) with exit 0.

``run`` = embedded broker (unless --mqtt-url) + simulator + monitor;
``simulate`` = simulator only (and its own /healthz and /readyz when
``metrics_addr`` is set: see ``rainierd.healthcheck`` for why);
``monitor`` = monitor and exporter only.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import secrets
import sys
import time
from typing import Final, Literal

import numpy as np
import structlog
from prometheus_client import CollectorRegistry

from rainierd._malloc import keep_freed_memory
from rainierd.broker import EmbeddedBroker
from rainierd.exporter import Health, MetricsServer, UltraServerProbe
from rainierd.exporter.webconfig import load_web_config
from rainierd.exporter.wiring import build_exporter
from rainierd.inventory import load_topology
from rainierd.lifecycle import run_until_stopped, stop_on_signals
from rainierd.looplag import LoopLag
from rainierd.monitor import Monitor
from rainierd.mqtt import MAX_PACKET_OVERHEAD, mqtt_config, supervise
from rainierd.settings import Settings
from rainierd.sim import FleetParams, Simulator
from rainierd.sim.profile import PROFILES
from rainierd.sim.scenarios import load_scenario
from rainierd.status import ConnectionState

__all__ = ["Role", "run_role"]

log = structlog.get_logger("rainierd")

Role = Literal["run", "simulate", "monitor"]
# Worker threads (analysis, scrape rendering) hold the GIL for up to this long
# before the event loop gets it back: 1 ms instead of Python's 5 ms keeps the
# loop's lag under 10 ms at Rainier scale (rainierd bench scrape).
SWITCH_INTERVAL_S: Final = 0.001


class _SimulatorProbes:
    """A simulator's probe verdicts: alive while its ticks advance, ready while its broker is connected.

    Progress is observed when probed, so a stall is reported at most one
    probe interval late; the allowance matches the monitor's (ten ticks + 5 s).
    """

    def __init__(self, sim: Simulator, connection: ConnectionState) -> None:
        self._sim, self._connection = sim, connection
        self._seen = (-1, time.monotonic())  # (ticks produced, when that count was first seen)

    def healthy(self) -> Health:
        """Return healthy unless the tick count has not moved for ten ticks and 5 s."""
        ticks, now = self._sim.ticks_produced, time.monotonic()
        if ticks != self._seen[0]:
            self._seen = (ticks, now)
        elif now - self._seen[1] > 10 * self._sim.tick_s + 5:
            return Health(False, f"simulator stalled after {ticks} ticks")
        return Health(True, "ok")

    def ready(self) -> Health:
        """Return ready while the publishing session is connected."""
        return Health(True, "ready") if self._connection.connected else Health(False, "mqtt not connected")


async def run_role(role: Role, settings: Settings) -> None:
    """Run ``role`` until a signal (or the end of a bounded simulation).

    Raises OSError if a listening socket cannot be bound, BrokerError if the
    embedded broker cannot start; task failures propagate as an ExceptionGroup.
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    keep_freed_memory()  # fleet-sized temporaries are reused, not faulted in anew each tick
    stop = asyncio.Event()
    with stop_on_signals(stop):
        await _run_role(role, settings, stop)


async def _run_role(role: Role, settings: Settings, stop: asyncio.Event) -> None:
    topology = load_topology(settings.topology, efa_ports_per_node=settings.efa_ports_per_node)
    nonce = secrets.token_hex(4)
    async with contextlib.AsyncExitStack() as stack:
        url = settings.mqtt_url
        protocol: Literal["3.1.1", "5"] | None = None
        if role == "run" and url is None:
            # It speaks 3.1.1 only, and refuses an oversize packet itself.
            broker = await stack.enter_async_context(
                EmbeddedBroker(max_packet_bytes=settings.max_frame_bytes + MAX_PACKET_OVERHEAD))
            url, protocol = f"mqtt://127.0.0.1:{broker.port}", "3.1.1"
        coroutines = {}
        if role in ("run", "simulate"):
            sim_mqtt = mqtt_config(settings, client_id=f"rainierd-sim-{nonce}", url=url,
                                   suffix="sim" if role == "run" else None, protocol=protocol)
            faults = []
            if settings.scenario is not None:
                faults = load_scenario(settings.scenario, topology, tick_s=settings.tick_s,
                                       rng=np.random.default_rng(settings.seed))
            sim = Simulator(
                topology, publisher_id=sim_mqtt.client_id, seed=settings.seed, tick_s=settings.tick_s,
                ticks=settings.ticks, encoding=settings.encoding, qos=settings.mqtt_qos, faults=faults,
                batch_nodes=settings.batch_nodes,
                fault_acceleration=settings.fault_acceleration, truth_file=settings.truth_file,
                params=FleetParams(noise=settings.noise, time_scale=settings.time_scale),
                profile=PROFILES[settings.profile],
            )
            sim_connection = ConnectionState()
            coroutines["sim-ticks"] = sim.produce(stop)
            coroutines["sim-mqtt-publish"] = supervise(sim_mqtt, sim.publish, state=sim_connection)
            if role == "simulate" and "metrics_addr" in settings.model_fields_set:
                probes = _SimulatorProbes(sim, sim_connection)
                host, port = settings.metrics_host_port
                sim_server = MetricsServer(
                    CollectorRegistry(), host=host, port=port, generation=lambda: 0,
                    healthy=probes.healthy, ready=probes.ready,
                    web=None if settings.web_config_file is None else load_web_config(settings.web_config_file),
                )
                await sim_server.start()
                coroutines["sim-probes-http"] = sim_server.serve_forever()
        if role in ("run", "monitor"):
            mon_mqtt = mqtt_config(settings, client_id=f"rainierd-monitor-{nonce}", url=url,
                                   suffix="monitor" if role == "run" else None, protocol=protocol,
                                   max_packet_bytes=settings.max_frame_bytes + MAX_PACKET_OVERHEAD)
            monitor = Monitor(
                topology, settings.monitor_config(), max_backlog_bytes=settings.max_backlog_bytes,
                checkpoint_file=settings.state_file, reconnect_grace_s=settings.reconnect_grace_s,
                qos=settings.mqtt_qos, shard=settings.monitor_shard,
            )
            monitor.restore()
            loop_lag = LoopLag()
            exporter = build_exporter(
                topology, lambda: monitor.snapshot, stats=monitor.stats, connection=monitor.connection,
                backlog=monitor.backlog, lag=monitor.lag,
                loop_lag=lambda: loop_lag.worst_s, loop_lag_histogram=loop_lag.histogram,
                checkpoint=monitor.checkpoint if settings.state_file is not None else None,
                max_entity_series=settings.max_entity_series, shard=settings.monitor_shard,
            )
            host, port = settings.metrics_host_port
            server = MetricsServer(
                exporter.registry, host=host, port=port, generation=lambda: monitor.generation,
                healthy=monitor.healthy, ready=monitor.ready, extra=exporter.extra,
                web=None if settings.web_config_file is None else load_web_config(settings.web_config_file),
                prober=UltraServerProbe(monitor.topology, monitor.core, lambda: monitor.snapshot,
                                        lock=monitor.state_lock),
            )
            await server.start()
            coroutines["monitor-mqtt-subscribe"] = supervise(
                mon_mqtt, monitor.consume, state=monitor.connection,
            )
            coroutines["monitor-analyse"] = monitor.analyse(after=server.refresh)
            coroutines["monitor-listening-clock"] = monitor.clock.keep()
            coroutines["exporter-http"] = server.serve_forever()
            coroutines["loop-lag"] = loop_lag.run()
        # What is built so far (topology, names, label blocks, the core: ~50,000
        # objects at rainier) lives as long as the process.  A full collection
        # walked it all with the GIL held, 35-85 ms at rainier, and stalled the
        # event loop whichever thread ran it; frozen, it takes under 1 ms.
        gc.collect()
        gc.freeze()
        shard = {"shard": settings.shard} if role != "simulate" and settings.shard != "0/1" else {}
        await run_until_stopped(role, stop, coroutines, topology=topology.name, chips=topology.n_chips, broker=url,
                                **shard)
