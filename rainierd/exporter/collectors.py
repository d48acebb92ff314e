"""Prometheus collectors of the monitor: each takes its data source as a
callable, so a test hands it a fixture and reads it back from a registry.

Collectors are registered in one place (``build_registry``).  Every collector
is timed, node_exporter style: ``rainier_exporter_collector_duration_seconds``
and ``rainier_exporter_collector_success`` per collector, so one failing
source drops only its own metric group and says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import structlog
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from rainierd import __version__
from rainierd.core.ingest import IngestStats
from rainierd.exporter.fast import AGGREGATE_FAMILIES, family_values
from rainierd.exporter.snapshot import MonitorSnapshot
from rainierd.status import BacklogState, CheckpointState, ConnectionState, LagHistogram
from rainierd.topology import Topology
from rainierd.wire.records import WIRE_VERSION
from rainierd.wire.topics import Shard

__all__ = ["DECODE_REASONS", "build_registry"]

log = structlog.get_logger("rainierd.exporter")

# Every reason a frame can be rejected for, so each series exists from start.
DECODE_REASONS = (
    "oversize", "empty", "unknown_encoding", "truncated", "bad_magic", "bad_version",
    "bad_kind", "bad_header", "trailing_bytes", "non_finite", "bad_json", "schema",
    "unknown_node", "unknown_id", "duplicate_id", "topic_mismatch", "stale_seq", "seq_jump", "bad_topic",
    "clock_skew",
)
ENCODINGS = ("binary", "json")


class FleetCollector(Collector):
    """FP8 throughput of the fleet and its sites, and the sites' raw telemetry aggregates and facility
    (UltraServers: exporter/fast.py)."""

    def __init__(
        self, topology: Topology, snapshot: Callable[[], MonitorSnapshot | None], *,
        facility_sites: Sequence[bool] | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._sites = [f"s{s}" for s in range(topology.n_sites)]
        self._site_names = list(topology.names.sites)
        # The sites whose facility frames this monitor takes (a shard: site % N); None: every site.
        self._facility_sites = facility_sites

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        if snap is None:
            return
        tp = snap.throughput
        for level in ("peak", "delivered", "effective"):
            yield GaugeMetricFamily(
                f"rainier_fleet_fp8_{level}_flops",
                f"Fleet FP8 {level} throughput, dense FLOP/s.",
                value=getattr(tp, f"fleet_{level}"),
            )
            site = GaugeMetricFamily(
                f"rainier_site_fp8_{level}_flops", f"Site FP8 {level} throughput, dense FLOP/s.",
                labels=["site", "site_name"] if self._site_names else ["site"],
            )
            for s, value in enumerate(getattr(tp, f"site_{level}").tolist()):
                site.add_metric([self._sites[s], *self._site_names[s:s + 1]], value)
            yield site
        yield GaugeMetricFamily("rainier_fleet_chips", "Chips this monitor watches: the fleet's (its inventory's "
                                "nodes x 16), or its shard's share of them.",
                                value=snap.chips_total)
        yield GaugeMetricFamily(
            "rainier_fleet_chips_reporting",
            "Chips whose telemetry is fresh (within stale_after_ticks of the latest tick).",
            value=tp.chips_fresh,
        )
        yield from self._site_aggregates(snap)

    def _site_family(self, name: str, text: str, kind: str, values: list[float], *, facility: bool = False) -> Metric:
        labels = ["site", "site_name"] if self._site_names else ["site"]
        family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, text, labels=labels)
        owned = self._facility_sites if facility else None
        for s, value in enumerate(values):
            # Unknown: no series; another shard's site facility: that shard's series.
            if not math.isnan(value) and (owned is None or owned[s]):
                family.add_metric([self._sites[s], *self._site_names[s:s + 1]], value)
        return family

    def _site_aggregates(self, snap: MonitorSnapshot) -> Iterator[Metric]:
        aggregates = snap.aggregates
        if aggregates is None:
            return
        for family in AGGREGATE_FAMILIES:
            values = family_values(family, snap, "site")
            assert values is not None
            yield self._site_family(f"rainier_site_{family.name.removesuffix('_total')}", f"{family.help}, per site.",
                                    family.kind, values.tolist())
        yield CounterMetricFamily(
            "rainier_fleet_fp8_flop", "FP8 FLOP executed by the fleet's chips (monotonic: increases summed).",
            value=float(aggregates.site_counters["fp8_flop_total"].sum()),
        )
        yield self._site_family("rainier_site_outside_temperature_celsius", "Outside air at the site.", "gauge",
                                np.round(aggregates.site_outside_c, 2).tolist(), facility=True)
        yield self._site_family("rainier_site_cooling_water_assist", "1 while the site's cooling uses water "
                                "(evaporative assist), 0 on outside air alone.", "gauge",
                                aggregates.site_water_assist.tolist(), facility=True)
        yield self._site_family("rainier_site_water_cubic_meters", "Water the site's cooling used "
                                "(monotonic: increases summed).", "counter",
                                (aggregates.site_counters["water_l_total"] / 1e3).tolist(), facility=True)
        yield self._site_family("rainier_site_it_energy_joules", "Energy the site's IT equipment used "
                                "(monotonic: increases summed).", "counter",
                                aggregates.site_counters["it_energy_j_total"].tolist(), facility=True)


class ShardCollector(Collector):
    """Which share of the fleet this monitor watches, from its start (before any telemetry).

    The recording rules count the shards that report against the shards
    expected, and the chips of the whole fleet against the chips the
    reporting shards watch: a shard that is down is a share reported
    missing, never a share of healthy chips delivering nothing.
    """

    def __init__(self, shard: Shard, *, fleet_chips: int) -> None:
        self._shard, self._fleet_chips = shard, fleet_chips

    def collect(self) -> Iterator[Metric]:
        shards = GaugeMetricFamily(
            "rainier_shards", "Shards the fleet is split into, labelled with this monitor's shard (0 of 1: one "
            "monitor watches the whole fleet).", labels=["shard"],
        )
        shards.add_metric([str(self._shard.index)], self._shard.count)
        yield shards
        yield GaugeMetricFamily(
            "rainier_fleet_chips_inventory",
            "Chips in the whole fleet's inventory, every shard's share together (the same on every shard).",
            value=self._fleet_chips,
        )


class MonitorCollector(Collector):
    """The monitor's own progress: last tick, analysis time, ingest counters."""

    def __init__(
        self,
        stats: IngestStats,
        snapshot: Callable[[], MonitorSnapshot | None],
        connection: ConnectionState,
        loop_lag: Callable[[], float] | None = None,
        *,
        backlog: BacklogState | None = None,
        lag: LagHistogram | None = None,
        loop_lag_histogram: LagHistogram | None = None,
        checkpoint: CheckpointState | None = None,
    ) -> None:
        self._stats, self._snapshot, self._connection = stats, snapshot, connection
        self._loop_lag, self._loop_lag_histogram = loop_lag, loop_lag_histogram
        self._backlog, self._lag = backlog, lag
        self._checkpoint = checkpoint

    def collect(self) -> Iterator[Metric]:
        stats = self._stats
        messages = CounterMetricFamily(
            "rainier_ingest_messages", "MQTT telemetry messages received, by encoding (a batch frame is one).",
            labels=["encoding"],
        )
        frames = CounterMetricFamily(
            "rainier_ingest_frames", "Telemetry frames decoded, by encoding (a batch frame carries many).",
            labels=["encoding"],
        )
        received = CounterMetricFamily(
            "rainier_ingest_bytes", "Telemetry payload bytes received, by encoding.", labels=["encoding"],
        )
        for encoding in ENCODINGS:
            messages.add_metric([encoding], stats.messages[encoding])
            frames.add_metric([encoding], stats.frames[encoding])
            received.add_metric([encoding], stats.bytes[encoding])
        yield messages
        yield frames
        yield received
        yield from self._backlog_metrics()
        yield from self._checkpoint_metrics()
        errors = CounterMetricFamily(
            "rainier_ingest_decode_errors",
            "Frames rejected, by reason (decode, identity, sequence).", labels=["reason"],
        )
        for reason in sorted(set(DECODE_REASONS) | set(stats.rejected)):
            errors.add_metric([reason], stats.rejected[reason])
        yield errors
        yield CounterMetricFamily(
            "rainier_ingest_frames_lost", "Frames missing from sequence gaps for longer than the late window.",
            value=stats.frames_lost,
        )
        yield GaugeMetricFamily(
            "rainier_ingest_frames_missing", "Frames missing from sequence gaps now, that may still arrive late.",
            value=stats.frames_missing,
        )
        yield CounterMetricFamily(
            "rainier_ingest_frames_late", "Frames that were missing and arrived late (never counted lost).",
            value=stats.frames_late,
        )
        yield CounterMetricFamily(
            "rainier_ingest_frames_applied", "Frames applied to the fleet state.", value=stats.frames_applied,
        )
        samples = CounterMetricFamily(
            "rainier_ingest_samples_applied",
            "Entity samples applied to the fleet state, by kind (a node frame carries 16 chips, 48 links, ...).",
            labels=["kind"],
        )
        for kind in ("chips", "links", "efa", "cooling", "facility"):
            samples.add_metric([kind], stats.samples_applied[kind])
        yield samples
        yield CounterMetricFamily(
            "rainier_ingest_publisher_changes",
            "Times a node's frames came from a new publisher id (fail-over, or a restart under a new id).",
            value=stats.publisher_changes,
        )
        yield CounterMetricFamily(
            "rainier_ingest_publisher_restarts",
            "Times a publisher restarted under the same id (its numbering began again with newer samples).",
            value=stats.publisher_restarts,
        )
        yield GaugeMetricFamily(
            "rainier_mqtt_connected", "1 while the monitor's MQTT session is up.",
            value=float(self._connection.connected),
        )
        yield CounterMetricFamily(
            "rainier_mqtt_connection_failures", "Failed or lost MQTT connections.",
            value=self._connection.failures,
        )
        yield CounterMetricFamily(
            "rainier_mqtt_status_overwritten",
            "Times another client overwrote the monitor's retained status while it served (it was restored).",
            value=self._connection.status_overwritten,
        )
        if self._loop_lag is not None:
            yield GaugeMetricFamily(
                "rainier_event_loop_lag_seconds", "Worst event-loop lag over the last 10 s.", value=self._loop_lag(),
            )
        if self._loop_lag_histogram is not None:
            yield _histogram(
                "rainier_event_loop_probe_lag_seconds",
                "Event-loop lag of each probe (how late a 0.1 s sleep woke up).", self._loop_lag_histogram,
            )
        snap = self._snapshot()
        if snap is not None:
            if snap.throughput.tick >= 0:  # absent until telemetry is applied
                yield GaugeMetricFamily(
                    "rainier_monitor_last_tick", "Latest telemetry tick applied.", value=snap.throughput.tick,
                )
            if snap.lag_s == snap.lag_s:  # not NaN: some telemetry has been applied
                yield GaugeMetricFamily(
                    "rainier_monitor_lag_seconds",
                    "Wall time at the last analysis minus the sample time of the newest telemetry applied.",
                    value=snap.lag_s,
                )
            yield GaugeMetricFamily(
                "rainier_monitor_analysis_duration_seconds",
                "Time the last analysis tick took (ingest scatter and throughput model).",
                value=snap.analysis_s,
            )
            yield CounterMetricFamily(
                "rainier_monitor_analyses", "Analysis ticks run.", value=snap.analysed_ticks,
            )


    def _checkpoint_metrics(self) -> Iterator[Metric]:
        checkpoint = self._checkpoint
        if checkpoint is None:
            return
        yield CounterMetricFamily(
            "rainier_monitor_checkpoint_failures",
            "Stream checkpoints (--state-file) that could not be written; the stale one is removed.",
            value=checkpoint.failures,
        )
        if checkpoint.saves:
            yield GaugeMetricFamily(
                "rainier_monitor_checkpoint_last_success_timestamp_seconds",
                "Wall time the stream checkpoint was last written.", value=checkpoint.last_save_wall_s,
            )

    def _backlog_metrics(self) -> Iterator[Metric]:
        backlog, lag = self._backlog, self._lag
        if backlog is not None:
            yield GaugeMetricFamily("rainier_monitor_backlog_messages", "Messages waiting for analysis.",
                                    value=backlog.messages)
            yield GaugeMetricFamily("rainier_monitor_backlog_bytes", "Payload bytes waiting for analysis.",
                                    value=backlog.bytes)
            yield GaugeMetricFamily(
                "rainier_monitor_backlog_seconds",
                "How long the oldest message of the last analysed window had waited.", value=backlog.oldest_s,
            )
            yield CounterMetricFamily(
                "rainier_monitor_backlog_dropped_messages",
                "Messages dropped, oldest first, because the backlog was full (their frames count as lost).",
                value=backlog.dropped_messages,
            )
            yield CounterMetricFamily(
                "rainier_monitor_backlog_dropped_bytes", "Payload bytes dropped because the backlog was full.",
                value=backlog.dropped_bytes,
            )
            yield GaugeMetricFamily(
                "rainier_monitor_overloaded",
                "1 while the monitor is behind its input (silence is then not judged).",
                value=float(backlog.overloaded),
            )
            yield CounterMetricFamily(
                "rainier_monitor_overload_episodes", "Times the monitor fell behind its input.",
                value=backlog.overload_episodes,
            )
            median, largest = backlog.receive_offset_s
            if not math.isnan(median):  # frames have been applied
                offset = GaugeMetricFamily(
                    "rainier_ingest_receive_offset_seconds",
                    "Wall time at receipt minus sample time over the last window: publishers' clock offsets "
                    "plus transport delay.", labels=["stat"],
                )
                offset.add_metric(["median"], median)
                offset.add_metric(["max_abs"], largest)
                yield offset
        if lag is not None:
            yield _histogram(
                "rainier_monitor_sample_lag_seconds",
                "Time from a frame's sample time (publisher clock) to the end of the analysis that applied it.", lag,
            )


def _histogram(name: str, documentation: str, histogram: LagHistogram) -> HistogramMetricFamily:
    buckets = [(repr(bound) if bound != float("inf") else "+Inf", count) for bound, count in histogram.cumulative()]
    return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=histogram.total_s)


class BuildInfoCollector(Collector):
    """rainier_build_info: version labels, value 1."""

    def collect(self) -> Iterator[Metric]:
        info = InfoMetricFamily("rainier_build", "rainierd build information.")
        info.add_metric([], {"version": __version__, "wire_version": str(WIRE_VERSION)})
        yield info


@dataclass(eq=False)
class _Timings:
    duration_s: dict[str, float] = field(default_factory=dict)
    success: dict[str, bool] = field(default_factory=dict)


class _Timed(Collector):
    """Runs one collector, recording its duration and success for this scrape."""

    def __init__(self, name: str, inner: Collector, timings: _Timings) -> None:
        self._name, self._inner, self._timings = name, inner, timings

    def collect(self) -> Iterable[Metric]:
        started = time.perf_counter()
        try:
            metrics = list(self._inner.collect())
        except Exception:
            # One broken source drops its own group, never the whole scrape.
            log.exception("collector failed", collector=self._name)
            self._timings.success[self._name] = False
            metrics = []
        else:
            self._timings.success[self._name] = True
        self._timings.duration_s[self._name] = time.perf_counter() - started
        return metrics


class _ScrapeCollector(Collector):
    def __init__(self, timings: _Timings) -> None:
        self._timings = timings

    def collect(self) -> Iterator[Metric]:
        duration = GaugeMetricFamily(
            "rainier_exporter_collector_duration_seconds", "Time each collector took in this scrape.",
            labels=["collector"],
        )
        success = GaugeMetricFamily(
            "rainier_exporter_collector_success", "1 if the collector succeeded in this scrape.",
            labels=["collector"],
        )
        for name, seconds in self._timings.duration_s.items():
            duration.add_metric([name], seconds)
            success.add_metric([name], float(self._timings.success[name]))
        yield duration
        yield success


def build_registry(collectors: dict[str, Collector], *, process_metrics: bool = True) -> CollectorRegistry:
    """Return a registry of the named collectors, each timed, plus process metrics."""
    registry = CollectorRegistry(auto_describe=False)
    timings = _Timings()
    for name, collector in collectors.items():
        registry.register(_Timed(name, collector, timings))
    registry.register(_Timed("build_info", BuildInfoCollector(), timings))
    if process_metrics:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
    # Registered last: the registry collects in order, so it sees this scrape's timings.
    registry.register(_ScrapeCollector(timings))
    return registry


__all__ += ["BuildInfoCollector", "FleetCollector", "MonitorCollector", "ShardCollector"]
