"""Wiring of the roles into one process: one TaskGroup, named tasks, and a
clean stop on SIGINT/SIGTERM (or when a bounded simulation ends) with exit 0.

``run`` = embedded broker (unless --mqtt-url) + simulator + monitor; it
prints, on stdout, the broker's and the monitor's URLs other tools take
(``rainierd jobs --mqtt-url``, ``rainierd top``), once everything listens;
``simulate`` = simulator only (and its own /healthz and /readyz when
``metrics_addr`` is set: see ``rainierd.healthcheck`` for why);
``monitor`` = monitor and exporter only;
``aggregate`` = an aggregator (node frames in, batch frames out) and its own
/metrics and probes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import secrets
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
import structlog
from prometheus_client.registry import Collector

from rainierd._listen import local_url
from rainierd.aggregate import Aggregator, AggregatorCollector, batch_name
from rainierd.api import ActionsApi, ReadApi, UltraServerProbe
from rainierd.errors import RainierdError
from rainierd.exporter import MetricsRoute, build_exporter, build_registry, route_metrics_and_probes
from rainierd.fleet import Topology, load_topology
from rainierd.http.config import HttpConfig
from rainierd.http.routes import verdict_route
from rainierd.http.server import HttpServer
from rainierd.http.status import ServerCollector, ServerCounters
from rainierd.monitor import Monitor, SharePolicy
from rainierd.mqtt import MAX_PACKET_OVERHEAD, ConnectionState, EmbeddedBroker, supervise
from rainierd.runtime import LoopLag, Verdict, keep_freed_memory, run_until_stopped
from rainierd.settings import Settings
from rainierd.sim import PROFILES, Fault, FleetParams, JobSpec, Simulator, load_jobs, load_scenario
from rainierd.sinks.webhook import WebhookCollector, WebhookSink

log = structlog.get_logger("rainierd")

Role = Literal["run", "simulate", "monitor", "aggregate"]
# Worker threads (analysis, scrape rendering) hold the GIL for up to this long
# before the event loop gets it back: 1 ms instead of Python's 5 ms keeps the
# loop's lag under 10 ms at Rainier scale (python -m benchmarks scrape).
SWITCH_INTERVAL_S: Final = 0.001


class _SimulatorProbes:
    """A simulator's probe verdicts: alive while its ticks advance, ready while its broker is connected.

    Progress is observed when probed, so a stall is reported at most one
    probe interval late; the allowance matches the monitor's (ten ticks + 5 s).
    """

    def __init__(self, sim: Simulator, connection: ConnectionState) -> None:
        self._sim, self._connection = sim, connection
        self._seen = (-1, time.monotonic())  # (ticks produced, when that count was first seen)

    def healthy(self) -> Verdict:
        """Return healthy unless the tick count has not moved for ten ticks and 5 s."""
        ticks, now = self._sim.ticks_produced, time.monotonic()
        if ticks != self._seen[0]:
            self._seen = (ticks, now)
        elif now - self._seen[1] > 10 * self._sim.tick_s + 5:
            return Verdict(False, f"simulator stalled after {ticks} ticks")
        return Verdict(True, "ok")

    def ready(self) -> Verdict:
        """Return ready while the publishing session is connected."""
        return Verdict(True, "ready") if self._connection.connected else Verdict(False, "mqtt not connected")


async def run_role(role: Role, settings: Settings) -> None:
    """Run ``role`` until a signal (or the end of a bounded simulation).

    Raises OSError if a listening socket cannot be bound, BrokerError if the
    embedded broker cannot start; task failures propagate as an ExceptionGroup.
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    keep_freed_memory()  # fleet-sized temporaries are reused, not faulted in anew each tick
    await _run_role(role, settings, asyncio.Event())


def _webhook(settings: Settings, client_id: str) -> WebhookSink | None:
    """Return the webhook sink the settings ask for (None: no webhook_url); raise ConfigError if it is unusable."""
    config = settings.webhook_config(source=f"/rainierd/{client_id}")
    return None if config is None else WebhookSink(config)


def _collectors(webhook: WebhookSink | None) -> dict[str, Collector]:
    """Return the exporter's collectors of the monitor's sinks."""
    return {} if webhook is None else {"webhook": WebhookCollector(webhook.status)}


def _analysis_tasks(monitor: Monitor, metrics: MetricsRoute,
                    webhook: WebhookSink | None) -> dict[str, Callable[[], Coroutine[Any, Any, None]]]:
    """Return the analysis task, which after each analysis queues the webhook's events (the sink delivers them
    from its own task: the analysis never waits on a receiver) and renders the scrape, and the webhook's task."""
    if webhook is None:
        return {"monitor-analyse": lambda: monitor.analyse(after=metrics.refresh)}

    async def after() -> None:
        webhook.offer(monitor.snapshot.actions if monitor.snapshot is not None else None)
        await metrics.refresh()

    return {"monitor-analyse": lambda: monitor.analyse(after=after), "monitor-webhook": webhook.run}


def _scenario(settings: Settings, topology: Topology) -> tuple[list[Fault], list[JobSpec] | None]:
    """Return the scenario file's faults and its fixed jobs (None: it lists none); raise ConfigError if it is bad."""
    if settings.scenario is None:
        return [], None
    rng = np.random.default_rng(settings.seed)
    faults = load_scenario(settings.scenario, topology, tick_s=settings.tick_s, rng=rng)
    return faults, load_jobs(settings.scenario, topology, tick_s=settings.tick_s) or None


@dataclass(frozen=True)
class MonitorRole:
    """The monitor role's parts, its HTTP server listening: the tasks to run, named, and the monitor and server
    they drive (what a benchmark watches from inside: benchmarks/_apitick.py)."""

    monitor: Monitor
    server: HttpServer
    loop_lag: LoopLag
    coroutines: dict[str, Callable[[], Coroutine[Any, Any, None]]]


async def monitor_role(
    settings: Settings, topology: Topology, stack: contextlib.AsyncExitStack, *, url: str | None,
    protocol: Literal["3.1.1", "5"] | None, client_id: str, suffix: str | None = None,
    http: HttpConfig | None = None,
) -> MonitorRole:
    """Build the monitor, its exporter and API, bind its HTTP server (``http``, default the settings'; closed
    when ``stack`` is) serving /metrics, the probes, /probe and /api/v1/, and return them with the role's
    tasks (not started).

    Raises OSError if the listening socket cannot be bound, ConfigError for an unusable webhook.
    """
    mon_mqtt = settings.mqtt_config(client_id=client_id, url=url, suffix=suffix, protocol=protocol,
                                    max_packet_bytes=settings.max_frame_bytes + MAX_PACKET_OVERHEAD)
    loop_lag = LoopLag()
    monitor = Monitor(
        topology, settings.monitor_config(topology), max_backlog_bytes=settings.max_backlog_bytes,
        checkpoint_file=settings.state_file, reconnect_grace_s=settings.reconnect_grace_s,
        qos=settings.mqtt_qos, shard=settings.monitor_shard, loop_lag=loop_lag,
        share=SharePolicy(frames_per_tick=settings.share_frames_per_tick,
                          bytes_per_tick=settings.share_bytes_per_tick,
                          max_topics=settings.max_share_topics),
        batches_only=settings.telemetry_input == "batches", actions=settings.action_config(),
    )
    monitor.restore()
    counters = ServerCounters()
    exporter = build_exporter(topology, lambda: monitor.snapshot,
                              max_entity_series=settings.max_entity_series, max_jobs=settings.max_jobs,
                              shard=settings.monitor_shard,
                              server=counters.status,
                              extra=_collectors(webhook := _webhook(settings, mon_mqtt.client_id)))
    server = HttpServer(http or settings.http_config(), counters=counters)
    metrics = route_metrics_and_probes(server, exporter.render, generation=lambda: monitor.generation,
                                       healthy=monitor.healthy, ready=monitor.ready)
    probe = UltraServerProbe(monitor.topology, monitor.core, lambda: monitor.snapshot, lock=monitor.state_lock)
    server.route("/probe", probe.serve_probe, shown="/probe?target=u<id>")
    server.route("/probe/targets", probe.serve_targets)
    server.route("/api/v1/actions", ActionsApi(monitor.topology, lambda: monitor.snapshot).serve)
    server.route("/api/v1/", ReadApi(monitor.topology, lambda: monitor.snapshot, core=monitor.core,
                                     lock=monitor.state_lock, events=lambda: monitor.events.recent).serve)
    await stack.enter_async_context(server)
    coroutines: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {
        "monitor-mqtt-subscribe": lambda: supervise(mon_mqtt, monitor.session.consume, state=monitor.connection),
        **_analysis_tasks(monitor, metrics, webhook),
        "monitor-listening-clock": monitor.clock.keep,
        "loop-lag": loop_lag.run,
    }
    return MonitorRole(monitor, server, loop_lag, coroutines)


async def _run_role(role: Role, settings: Settings, stop: asyncio.Event) -> None:
    topology = load_topology(settings.topology, efa_ports_per_node=settings.efa_ports_per_node)
    nonce = secrets.token_hex(4)
    http = settings.http_config()
    # The scenario file first: a bad one fails the start before the embedded broker or anything else is up.
    faults, jobs = _scenario(settings, topology) if role in ("run", "simulate") else ([], None)
    async with contextlib.AsyncExitStack() as stack:
        url = settings.mqtt_url
        if role == "run" and url is None:
            # It speaks 3.1.1 and 5, as the settings' clients may, and refuses an oversize packet itself.
            broker = await stack.enter_async_context(
                EmbeddedBroker(max_packet_bytes=settings.max_frame_bytes + MAX_PACKET_OVERHEAD))
            url = broker.url
        # First every part and every listening socket; the tasks only once all are bound, so a port in use
        # fails the start before any coroutine exists.
        coroutines: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {}
        drain: Callable[[], Awaitable[None]] | None = None
        ticks: _Ticks | None = None
        if role in ("run", "simulate"):
            sim_mqtt = settings.mqtt_config(client_id=f"rainierd-sim-{nonce}", url=url,
                                            suffix="sim" if role == "run" else None)
            sim = Simulator(
                topology, publisher_id=sim_mqtt.client_id, seed=settings.seed, tick_s=settings.tick_s,
                ticks=settings.ticks, encoding=settings.encoding, qos=settings.mqtt_qos, faults=faults,
                batch_nodes=settings.batch_nodes,
                fault_acceleration=settings.fault_acceleration, truth_file=settings.truth_file,
                params=FleetParams(noise=settings.noise, time_scale=settings.time_scale, jobs=settings.sim_jobs),
                profile=PROFILES[settings.profile], jobs=jobs,
            )
            sim_connection = ConnectionState()
            if role == "simulate" and "metrics_addr" in settings.model_fields_set:
                # It serves its probes alone: it has no metrics of its own.
                probes = _SimulatorProbes(sim, sim_connection)
                sim_server = HttpServer(http)
                sim_server.route("/healthz", verdict_route(probes.healthy))
                sim_server.route("/readyz", verdict_route(probes.ready))
                await stack.enter_async_context(sim_server)
            ticks = _Ticks(sim)
            coroutines["sim-ticks"] = lambda: ticks.run(stop)
            coroutines["sim-mqtt-publish"] = lambda: supervise(sim_mqtt, sim.session, state=sim_connection)
            drain = sim.drain  # its simulated jobs' retained documents go with it
        if role in ("run", "monitor"):
            parts = await monitor_role(settings, topology, stack, url=url, protocol=None,
                                       client_id=f"rainierd-monitor-{nonce}",
                                       suffix="monitor" if role == "run" else None, http=http)
            coroutines.update(parts.coroutines)
            if role == "run":
                _announce(url, local_url(http, parts.server.port))
        if role == "aggregate":
            agg_mqtt = settings.mqtt_config(client_id=f"rainierd-aggregate-{nonce}", url=url,
                                            max_packet_bytes=settings.max_frame_bytes + MAX_PACKET_OVERHEAD)
            aggregator = Aggregator(
                topology, shard=settings.monitor_shard, name=batch_name(agg_mqtt.client_id), tick_s=settings.tick_s,
                batch_nodes=settings.batch_nodes, max_frame_bytes=settings.max_frame_bytes, qos=settings.mqtt_qos,
                share=SharePolicy(frames_per_tick=settings.share_frames_per_tick,
                                  bytes_per_tick=settings.share_bytes_per_tick, max_topics=settings.max_share_topics),
            )
            agg_counters = ServerCounters()
            agg_exporter = build_registry({"aggregator": AggregatorCollector(lambda: aggregator.status),
                                           "http": ServerCollector(agg_counters.status)})
            agg_server = HttpServer(http, counters=agg_counters)
            agg_metrics = route_metrics_and_probes(agg_server, agg_exporter.render,
                                                   generation=lambda: aggregator.batcher.ticks,
                                                   healthy=aggregator.healthy, ready=aggregator.ready)
            await stack.enter_async_context(agg_server)
            coroutines["aggregate-mqtt"] = lambda: supervise(agg_mqtt, aggregator.session,
                                                             state=aggregator.connection)
            coroutines["aggregate-ticks"] = lambda: aggregator.run_ticks(after=agg_metrics.refresh)
            drain = aggregator.drain
        # What is built so far (topology, names, label blocks, the core: ~50,000
        # objects at rainier) lives as long as the process.  A full collection
        # walked it all with the GIL held, 35-85 ms at rainier, and stalled the
        # event loop whichever thread ran it; frozen, it takes under 1 ms.
        gc.collect()
        gc.freeze()
        shard = {"shard": settings.shard} if role != "simulate" and settings.shard != "0/1" else {}
        await run_until_stopped(role, stop, {name: make() for name, make in coroutines.items()}, drain=drain,
                                topology=topology.name, **topology.sizes(), broker=url, **shard)
        if role == "simulate" and ticks is not None and ticks.finished and ticks.sim.frames_published == 0:
            raise RainierdError(f"simulate published nothing in its {ticks.sim.ticks_produced} ticks: no broker at "
                                f"{url} took a frame")


@dataclass(eq=False)
class _Ticks:
    """The simulator's ticks, and whether it produced them all (``--ticks``) and drained on its own, rather than
    being stopped by a signal: a bounded simulation that published nothing then fails its run."""

    sim: Simulator
    finished: bool = False

    async def run(self, stop: asyncio.Event) -> None:
        await self.sim.produce(stop)
        self.finished = True


def _announce(broker_url: str | None, monitor_url: str) -> None:
    """Print, for the operator, where ``rainierd run``'s broker and monitor are: what other tools are given."""
    print(f"rainierd run: broker {broker_url} (other tools: --mqtt-url {broker_url})\n"
          f"rainierd run: monitor {monitor_url} (/metrics, /api/v1/fleet; rainierd top --url {monitor_url})",
          flush=True)
