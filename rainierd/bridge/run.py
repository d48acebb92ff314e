"""The role, ``rainierd bridge neuron-monitor``: neuron-monitor's reports on
stdin, the EFA driver's counters in sysfs, the node's frames on MQTT, and
its own ``/metrics``, ``/healthz`` and ``/readyz``.

    neuron-monitor | rainierd bridge neuron-monitor --topology fleet.toml --node ip-10-0-17-8 \\
        --mqtt-url mqtts://broker:8883

One TaskGroup, named tasks (``lifecycle.run_until_stopped``):

- ``bridge-read-stdin``: cuts stdin into lines (``_lines``, any length),
  and hands each, with the wall time it was read at, to a worker thread
  that decodes it, reads the EFA counters when the frame is of now, and
  makes the frame (``NodeBridge``); frames go to a bounded outbox that
  drops its oldest when the broker is away.  A line that is not a report
  is counted and skipped, logged once per reason and then at most once a
  minute; nothing a line holds ends the bridge.  The end of stdin drains
  the outbox (for up to ``DRAIN_S``) and stops the bridge, exit 0;
- ``bridge-mqtt-publish``: the MQTT supervisor (reconnect with backoff and
  jitter, ``offline`` will) publishing the outbox;
- ``bridge-metrics``: renders ``/metrics`` once a second when something changed.

SIGINT and SIGTERM stop it at once (the outbox gets ``STOP_DRAIN_S``), exit 0.
``/healthz`` is 200 while the input is being read (503 when one line has
been in the works for ``STUCK_S``: a hung sysfs read); ``/readyz`` 200 while
MQTT is connected and a frame was published within the last few periods.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import aiomqtt
import structlog

from rainierd.bridge._efa import read_efa
from rainierd.bridge._lines import lines
from rainierd.bridge._metrics import BridgeCollector, BridgeStatus
from rainierd.bridge._node import NodeBridge, Outcome
from rainierd.bridge._ports import EfaSnapshot
from rainierd.bridge._role import BridgeRoleConfig
from rainierd.errors import ConfigError
from rainierd.exporter import build_registry, route_metrics_and_probes
from rainierd.http.server import HttpServer
from rainierd.http.status import ServerCollector, ServerCounters
from rainierd.mqtt import ConnectionState, supervise
from rainierd.runtime import DropOldestQueue, Verdict, run_until_stopped

log = structlog.get_logger("rainierd.bridge")

MAX_LINE_BYTES: Final = 16 * 2**20  # a report is ~100 KB; a line this long is not one
DRAIN_S: Final = 5.0  # after stdin ends, how long queued frames may wait for the broker
STOP_DRAIN_S: Final = 0.5  # after a signal: the process exits within 2 s
STUCK_S: Final = 30.0  # one line in the works this long: the input is no longer being read
_OUTBOX: Final = 64  # frames queued while the broker is away; the oldest go first
_READY_PERIODS: Final = 3  # ready while a frame was published within this many periods (and 2 s)
_DEFAULT_PERIOD_S: Final = 5.0  # neuron-monitor's default period, until a report says its own
_LOG_EVERY_S: Final = 60.0


class _Warnings:
    """Logs each reason's first occurrence, then at most once a minute with the count since."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int]] = {}

    def occurred(self, reason: str, event: str, **fields: object) -> None:
        now = time.monotonic()
        logged_at, unlogged = self._last.get(reason, (None, 0))
        if logged_at is None or now - logged_at >= _LOG_EVERY_S:
            log.warning(event, reason=reason, occurrences=unlogged + 1, **fields)
            self._last[reason] = (now, 0)
        else:
            self._last[reason] = (logged_at, unlogged + 1)


@dataclass(frozen=True, slots=True)
class _Handled:
    """One line, handled in a worker thread."""

    skipped: str | None = None
    outcome: Outcome | None = None
    payload: bytes | None = None
    error: str | None = None


class NeuronMonitorBridge:
    """One node's bridge on the event loop: lines in, frames out, and what /metrics and the probes read."""

    def __init__(self, node: NodeBridge, *, efa_root: Path | None, topic: str, qos: int) -> None:
        self.node, self.efa_root, self.topic, self.qos = node, efa_root, topic, qos
        self.outbox: DropOldestQueue[bytes] = DropOldestQueue(_OUTBOX)
        self.connection = ConnectionState()
        self.lines = 0
        self.reports = 0
        self.skipped: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.folded = 0
        self.published = 0
        self.dropped: Counter[str] = Counter()
        self.lag_s: float | None = None
        self.period_s: float | None = None
        self.last_published: float | None = None  # monotonic
        self.busy_since: float | None = None  # monotonic: when the line in the works was taken
        self.generation = 0
        self.status = BridgeStatus()
        self._warnings = _Warnings()

    # -- input ---------------------------------------------------------------------------------------------
    def _efa(self) -> EfaSnapshot:
        assert self.efa_root is not None
        return read_efa(self.efa_root, names=self.node.config.efa_devices)

    def handle(self, line: bytes, wall_s: float) -> _Handled:
        """Return what one line becomes (in a worker thread; the node's state is touched by one line at a time)."""
        if not line.strip():
            return _Handled(skipped="empty")
        try:
            document = json.loads(line)
        except (ValueError, RecursionError):
            return _Handled(skipped="not_json")
        if not isinstance(document, dict):
            return _Handled(skipped="not_object")
        try:
            outcome = self.node.process(document, wall_s=wall_s, efa=self._efa if self.efa_root else None)
            payload = None if outcome.frame is None else json.dumps(
                outcome.frame, separators=(",", ":"), allow_nan=False).encode()
        except Exception as exc:
            return _Handled(skipped="bridge_error", error=f"{type(exc).__name__}: {exc}"[:200])
        return _Handled(outcome=outcome, payload=payload)

    async def read_input(self, read: Callable[[int], Awaitable[bytes]], stop: asyncio.Event, *,
                         drain_s: float = DRAIN_S) -> None:
        """Bridge every line ``read`` delivers; at its end drain the outbox (up to ``drain_s``) and set ``stop``."""
        async for line in lines(read, max_bytes=MAX_LINE_BYTES):
            wall_s = time.time()
            self.lines += 1
            if line is None:
                self._skip("oversize")
            else:
                self.busy_since = time.monotonic()
                try:
                    handled = await asyncio.to_thread(self.handle, line, wall_s)
                finally:
                    self.busy_since = None
                self._take(handled)
            self._update()
        log.info("neuron-monitor input ended", lines=self.lines, frames=self.node.seq)
        try:
            async with asyncio.timeout(drain_s):
                await self.outbox.join()
        except TimeoutError:
            log.warning("bridge stopped with frames unpublished", pending=self.outbox.qsize())
        stop.set()

    def _skip(self, reason: str, **fields: object) -> None:
        self.skipped[reason] += 1
        self._warnings.occurred(reason, "neuron-monitor line skipped", skipped=self.skipped[reason], **fields)

    def _take(self, handled: _Handled) -> None:
        """Count one handled line and queue its frame."""
        if handled.skipped is not None:
            self._skip(handled.skipped, **({"error": handled.error} if handled.error else {}))
            return
        self.reports += 1
        outcome = handled.outcome
        assert outcome is not None
        if outcome.refused is not None:
            self.refused[outcome.refused] += 1
            self._warnings.occurred(outcome.refused, "neuron-monitor report refused",
                                    expected_instance_id=self.node.config.instance_id)
            return
        self.folded += outcome.folded
        if outcome.tick is not None:
            self.lag_s = outcome.tick.lag_s
            if outcome.tick.step is not None:
                self._warnings.occurred(f"clock-{outcome.tick.step}", "bridge sample clock stepped to the wall "
                                        "clock", step=outcome.tick.step, lag_s=round(outcome.tick.lag_s, 3))
        if outcome.period_s is not None:
            self.period_s = outcome.period_s
        if handled.payload is not None and self.outbox.offer(handled.payload) is not None:
            self.dropped["outbox_full"] += 1
            self._warnings.occurred("outbox_full", "bridge outbox full; dropped the oldest frame",
                                    dropped=self.dropped["outbox_full"])

    # -- output --------------------------------------------------------------------------------------------
    async def session(self, client: aiomqtt.Client) -> None:
        """Publish the outbox until cancelled (``mqtt.supervise``)."""
        while True:
            payload = await self.outbox.get()
            published = False
            try:
                await client.publish(self.topic, payload, qos=self.qos)
                published = True
            finally:
                if published:
                    self.published += 1
                    self.last_published = time.monotonic()
                else:
                    self.dropped["unpublished"] += 1
                self.outbox.task_done()

    async def drain(self) -> None:
        """Publish what is queued for at most ``STOP_DRAIN_S`` (on a signal, before the tasks are cancelled)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_DRAIN_S):
                await self.outbox.join()

    async def refresh_metrics(self, refresh: Callable[[], Awaitable[None]]) -> None:
        """Render ``/metrics`` once a second when anything changed (the server renders a generation once), until
        cancelled."""
        while True:
            if self.busy_since is None:  # between lines: no worker thread is changing the counts
                self._update()
            await refresh()
            await asyncio.sleep(1.0)

    # -- what it reports -----------------------------------------------------------------------------------
    def _update(self) -> None:
        """Freeze the counts into ``status`` (on the loop, between lines), a new generation if they changed."""
        status = self._freeze()
        if status != self.status:
            self.status = status
            self.generation += 1

    def _freeze(self) -> BridgeStatus:
        """Return the counts now."""
        node, ports = self.node, self.node.ports
        return BridgeStatus(
            lines=self.lines, reports=self.reports, skipped=dict(self.skipped), refused_reports=dict(self.refused),
            folded=self.folded, filled=node.hold.filled, refused_values=dict(node.refusals.counts),
            group_errors=dict(node.group_errors),
            runtime_errors=node.runtime_errors, resets=dict(node.resets), resyncs=dict(node.steps),
            published=self.published, dropped=dict(self.dropped), lag_s=self.lag_s, period_s=self.period_s,
            runtimes=node.runtimes, devices_absent=node.devices_absent,
            efa_mapped=len(ports.names or ()), efa_seen=ports.seen, efa_missing=ports.missing,
            efa_unmapped=ports.unmapped, exec_errors=dict(node.exec_errors),
            exec_unattributed=dict(node.exec_unattributed), exec_timeouts=node.exec_timeouts,
            outbox=self.outbox.qsize(), connection=self.connection.frozen(),
        )

    def healthy(self) -> Verdict:
        """Return healthy while the input is being read (unhealthy: one line in the works for ``STUCK_S``)."""
        if self.busy_since is not None and (stuck_s := time.monotonic() - self.busy_since) > STUCK_S:
            return Verdict(False, f"one line in the works for {stuck_s:.0f} s")
        return Verdict(True, "ok")

    def ready(self) -> Verdict:
        """Return ready while MQTT is connected and a frame was published within the last few periods."""
        if not self.connection.connected:
            return Verdict(False, "mqtt not connected")
        if self.last_published is None:
            return Verdict(False, "no frame published yet")
        allowed_s = _READY_PERIODS * (self.period_s or _DEFAULT_PERIOD_S) + 2.0
        if (quiet_s := time.monotonic() - self.last_published) > allowed_s:
            return Verdict(False, f"no frame published for {quiet_s:.0f} s")
        return Verdict(True, "ready")


async def _stdin() -> Callable[[int], Awaitable[bytes]]:
    """Return a reader of stdin: a pipe (neuron-monitor's) read on the loop, a regular file in a thread.

    Raises ConfigError when there is no stdin to read (closed).
    """
    try:
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):
        raise ConfigError("the bridge reads neuron-monitor's reports on stdin, and stdin is closed "
                          "(neuron-monitor | rainierd bridge neuron-monitor ...)") from None
    if stat.S_ISREG(mode):
        return lambda n: asyncio.to_thread(os.read, fd, n)
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader.read


async def run_bridge(config: BridgeRoleConfig, *, efa_root: Path | None) -> None:
    """Bridge stdin to MQTT until stdin ends or a signal (exit 0).

    Raises ConfigError when there is no stdin, OSError when the HTTP side cannot listen.
    """
    mqtt = config.mqtt
    bridge = NeuronMonitorBridge(NodeBridge(node=config.node, publisher=mqtt.client_id, config=config.bridge),
                                 efa_root=efa_root, topic=config.topic, qos=mqtt.qos)
    stop = asyncio.Event()
    counters = ServerCounters()
    exporter = build_registry({"bridge": BridgeCollector(lambda: bridge.status),
                               "http": ServerCollector(counters.status)})
    read = await _stdin()
    # The same TLS, basic auth and connection limits as every role's HTTP side (docs/exporter-security.md).
    server = HttpServer(config.http, counters=counters)
    metrics = route_metrics_and_probes(server, exporter.render, generation=lambda: bridge.generation,
                                       healthy=bridge.healthy, ready=bridge.ready)
    async with server:
        if efa_root is not None and not (efa_root / "class" / "infiniband").is_dir():
            log.warning("no EFA devices under the EFA sysfs root: the node's ports stay unknown",
                        efa_sysfs=str(efa_root))
        node = config.bridge
        log.info("bridging neuron-monitor", node=config.node_name, topic=bridge.topic,
                 efa_sysfs=str(efa_root) if efa_root else None, ecc_counts=node.ecc_counts,
                 efa_devices=list(node.efa_devices) if node.efa_devices else "natural order at start",
                 instance_id=node.instance_id)
        await run_until_stopped("bridge", stop, {
            "bridge-read-stdin": bridge.read_input(read, stop),
            "bridge-mqtt-publish": supervise(mqtt, bridge.session, state=bridge.connection),
            "bridge-metrics": bridge.refresh_metrics(metrics.refresh),
        }, drain=bridge.drain, node=config.node_name, broker=mqtt.url, metrics=f"{config.http.host}:{server.port}")
