"""The monitor's view of itself as metrics: ingest counters, backlog and
overload, sample lag, stream checkpoint, MQTT session, event loop and
analysis progress.  One collector per source, each reading only the frozen
status of the latest snapshot, so one broken source drops its own group.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from rainierd.core import REFUSALS
from rainierd.monitor import MonitorSnapshot, MonitorStatus
from rainierd.runtime import Histogram

# Every reason a frame can be rejected for, so each series exists from start.
DECODE_REASONS: Final = (
    "retained", "over_share", "over_share_unconfirmed", "too_many_topics", "oversize", "empty", "unknown_encoding",
    "truncated", "bad_magic", "bad_version",
    "bad_kind", "bad_header", "trailing_bytes", "non_finite", "bad_json", "schema",
    "unknown_node", "unknown_id", "duplicate_id", "topic_mismatch", "duplicate_node", "stale_seq", "seq_jump",
    "time_jump", "publisher_unconfirmed", "bad_topic",
    "clock_skew",
)
ENCODINGS: Final = ("binary", "json")
SAMPLE_KINDS: Final = ("chips", "links", "efa", "cooling", "facility")

Snapshot = Callable[[], MonitorSnapshot | None]


class _StatusCollector(Collector):
    """A collector of one part of the latest snapshot's status (nothing before the first analysis)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        if snap is not None:
            yield from self.families(snap.status)

    def families(self, status: MonitorStatus) -> Iterator[Metric]:
        """Yield the families of ``status``."""
        raise NotImplementedError


class IngestCollector(_StatusCollector):
    """What reached the monitor and what became of it: messages, frames, rejections, loss."""

    def families(self, status: MonitorStatus) -> Iterator[Metric]:
        """Yield the rainier_ingest_* families."""
        counts = status.ingest
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
            messages.add_metric([encoding], counts.messages.get(encoding, 0))
            frames.add_metric([encoding], counts.frames.get(encoding, 0))
            received.add_metric([encoding], counts.bytes.get(encoding, 0))
        yield messages
        yield frames
        yield received
        errors = CounterMetricFamily(
            "rainier_ingest_decode_errors",
            "Frames rejected, by reason (decode, identity, sequence).", labels=["reason"],
        )
        for reason in sorted(set(DECODE_REASONS) | set(counts.rejected)):
            errors.add_metric([reason], counts.rejected.get(reason, 0))
        yield errors
        yield from _accounting(
            (CounterMetricFamily, "rainier_ingest_frames_lost",
             "Frames missing from sequence gaps for longer than the late window.", counts.frames_lost),
            (GaugeMetricFamily, "rainier_ingest_frames_missing",
             "Frames missing from sequence gaps now, that may still arrive late.", counts.frames_missing),
            (CounterMetricFamily, "rainier_ingest_frames_late",
             "Frames that were missing and arrived late (never counted lost).", counts.frames_late),
            (CounterMetricFamily, "rainier_ingest_frames_applied", "Frames applied to the fleet state.",
             counts.frames_applied),
        )
        samples = CounterMetricFamily(
            "rainier_ingest_samples_applied",
            "Entity samples applied to the fleet state, by kind (a node frame carries 16 chips, 48 links, ...).",
            labels=["kind"],
        )
        for kind in SAMPLE_KINDS:
            samples.add_metric([kind], counts.samples_applied.get(kind, 0))
        yield samples
        refused = CounterMetricFamily(
            "rainier_ingest_counters_refused",
            "Counters of applied samples refused over their physical or exactness bound: no rate for that sample, "
            "summed nowhere (by record kind, field and reason).", labels=["kind", "field", "reason"],
        )
        for key in sorted(set(REFUSALS) | set(counts.counters_refused)):
            refused.add_metric(list(key), counts.counters_refused.get(key, 0))
        yield refused
        yield from _accounting(
            (CounterMetricFamily, "rainier_ingest_publisher_changes",
             "Times a node's frames came from a new publisher id (fail-over, or a restart under a new id).",
             counts.publisher_changes),
            (CounterMetricFamily, "rainier_ingest_publisher_restarts",
             "Times a publisher restarted under the same id (its numbering began again with newer samples).",
             counts.publisher_restarts),
        )


def _accounting(*families: tuple[type[CounterMetricFamily | GaugeMetricFamily], str, str, int | None],
                ) -> Iterator[Metric]:
    """Yield the sequence accounting's families, none of those withheld (None: an older checkpoint is left that a
    later start would take back, monitor/checkpointing.py)."""
    for kind, name, documentation, value in families:
        if value is not None:
            yield kind(name, documentation, value=value)


class BacklogCollector(_StatusCollector):
    """Messages waiting, what overflow dropped, whether the monitor is behind, and how late samples land."""

    def families(self, status: MonitorStatus) -> Iterator[Metric]:
        """Yield the backlog, overload, receive-offset and sample-lag families."""
        backlog = status.backlog
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
        if status.share_topics is not None:
            yield GaugeMetricFamily(
                "rainier_monitor_share_topics",
                "Telemetry topic shares the inbox tracks now: confirmed, candidates', the rest's (each kind bounded "
                "by max_share_topics).",
                value=status.share_topics,
            )
        if status.sample_lag is not None:
            yield histogram_family(
                "rainier_monitor_sample_lag_seconds",
                "Time from a frame's sample time (publisher clock) to the end of the analysis that applied it.",
                status.sample_lag,
            )


class CheckpointCollector(_StatusCollector):
    """The stream checkpoint (``--state-file``): write failures and the last success."""

    def families(self, status: MonitorStatus) -> Iterator[Metric]:
        """Yield the checkpoint families (none without a checkpoint file)."""
        checkpoint = status.checkpoint
        if checkpoint is None:
            return
        yield CounterMetricFamily(
            "rainier_monitor_checkpoint_failures",
            "Stream checkpoints (--state-file) that could not be written; the stale one is removed.",
            value=checkpoint.failures,
        )
        yield GaugeMetricFamily(
            "rainier_monitor_checkpoint_stale",
            "1 while an older stream checkpoint is left that could be neither replaced, removed nor marked stale "
            "(a read-only volume): the rainier_ingest_ sequence counters are withheld until a save works.",
            value=float(checkpoint.stale_left),
        )
        if checkpoint.saves:
            yield GaugeMetricFamily(
                "rainier_monitor_checkpoint_last_success_timestamp_seconds",
                "Wall time the stream checkpoint was last written.", value=checkpoint.last_save_wall_s,
            )


class MqttCollector(_StatusCollector):
    """The monitor's MQTT session and the events waiting to go out on it."""

    def families(self, status: MonitorStatus) -> Iterator[Metric]:
        """Yield the rainier_mqtt_* families and the event outbox's drops."""
        connection = status.connection
        yield GaugeMetricFamily(
            "rainier_mqtt_connected", "1 while the monitor's MQTT session is up.", value=float(connection.connected),
        )
        yield CounterMetricFamily(
            "rainier_mqtt_connection_failures", "Failed or lost MQTT connections.", value=connection.failures,
        )
        yield CounterMetricFamily(
            "rainier_mqtt_status_overwritten",
            "Times another client overwrote the monitor's retained status while it served (it was restored).",
            value=connection.status_overwritten,
        )
        yield CounterMetricFamily(
            "rainier_monitor_events_dropped",
            "Detection events dropped, oldest first, from the outbox while the MQTT session was down "
            "(still logged and counted in rainier_health_events_total).", value=status.events_dropped,
        )


class LoopCollector(_StatusCollector):
    """Event-loop lag: the symptom of anything blocking the loop too long."""

    def families(self, status: MonitorStatus) -> Iterator[Metric]:
        """Yield the event-loop lag gauge and histogram (none where the loop is not measured)."""
        if status.loop_lag_worst_s is not None:
            yield GaugeMetricFamily(
                "rainier_event_loop_lag_seconds", "Worst event-loop lag over the last 10 s.",
                value=status.loop_lag_worst_s,
            )
        if status.loop_lag is not None:
            yield histogram_family(
                "rainier_event_loop_probe_lag_seconds",
                "Event-loop lag of each probe (how late a 0.1 s sleep woke up).", status.loop_lag,
            )


class AnalysisCollector(Collector):
    """The analysis's progress: last tick applied, lag behind the newest sample, time and count of analyses."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        """Yield the rainier_monitor_* progress families (none before the first analysis)."""
        snap = self._snapshot()
        if snap is None:
            return
        if snap.computed:  # absent until telemetry is applied
            yield GaugeMetricFamily("rainier_monitor_last_tick", "Latest telemetry tick applied.",
                                    value=snap.throughput.tick)
        if not math.isnan(snap.lag_s):  # some telemetry has been applied
            yield GaugeMetricFamily(
                "rainier_monitor_lag_seconds",
                "Wall time at the last analysis minus the sample time of the newest telemetry applied.",
                value=snap.lag_s,
            )
        yield GaugeMetricFamily(
            "rainier_monitor_analysis_duration_seconds",
            "Time the last analysis tick took (ingest scatter and throughput model).", value=snap.analysis_s,
        )
        yield CounterMetricFamily("rainier_monitor_analyses", "Analysis ticks run.", value=snap.analysed_ticks)


def histogram_family(name: str, documentation: str, histogram: Histogram) -> HistogramMetricFamily:
    """Return ``histogram`` as a Prometheus histogram family."""
    buckets = [(repr(bound) if bound != float("inf") else "+Inf", count) for bound, count in histogram.buckets]
    return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=histogram.total_s)
