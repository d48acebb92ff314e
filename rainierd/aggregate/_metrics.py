"""The aggregator's own metrics, ``rainier_aggregator_*``, over its frozen
status: what it heard, batched, published and dropped (by reason), the
size of its batches and the age of the frames it batched.

The accounting adds up: ``received == batched + dropped (every reason before
batching) + pending``, and ``batched == published + outbox_full +
unpublished + in the outbox``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from rainierd.aggregate._batcher import DROP_REASONS
from rainierd.aggregate._service import BATCH_NODE_BUCKETS, AggregatorStatus


class AggregatorCollector(Collector):
    """Yields ``rainier_aggregator_*`` from ``status()``."""

    def __init__(self, status: Callable[[], AggregatorStatus]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        """Yield every family of the aggregator's status."""
        s = self._status()
        yield GaugeMetricFamily("rainier_aggregator_share_ultraservers",
                                "UltraServers of the fleet in this aggregator's share.", value=s.ultraservers)
        shards = GaugeMetricFamily("rainier_aggregator_shards", "Aggregators the fleet is shared among.",
                                   labels=["shard"])
        shards.add_metric([s.shard], float(s.shard.split("/")[1]))
        yield shards
        for name, help_text, value in (
            ("messages_received", "Node-frame messages heard.", s.received),
            ("frames_batched", "Node frames put into batch frames.", s.batched),
            ("frames_published", "Node frames published in batch frames.", s.published_frames),
            ("batches_published", "Batch frames published.", s.published_batches),
            ("frames_narrowed", "Frames whose records disagreed on a field, batched without that field.",
             s.narrowed),
            ("ticks", "Ticks batched.", s.ticks),
            ("ticks_late", "Ticks batched more than a tick after they were due.", s.ticks_late),
        ):
            yield CounterMetricFamily(f"rainier_aggregator_{name}", help_text, value=value)
        dropped = CounterMetricFamily("rainier_aggregator_frames_dropped",
                                      "Node frames dropped, by reason (each a sequence gap the monitor counts).",
                                      labels=["reason"])
        for reason in DROP_REASONS:
            dropped.add_metric([reason], s.dropped.get(reason, 0))
        yield dropped
        errors = CounterMetricFamily("rainier_aggregator_decode_errors",
                                     "Malformed node frames, by the decoder's reason.", labels=["reason"])
        for reason, count in sorted(s.decode_errors.items()):
            errors.add_metric([reason], count)
        yield errors
        buckets = [(str(bound), float(n)) for bound, n in zip(BATCH_NODE_BUCKETS, s.batch_nodes_le, strict=True)]
        buckets.append(("+Inf", float(s.batches_made)))
        yield HistogramMetricFamily("rainier_aggregator_batch_nodes", "Node entries of each batch frame made.",
                                    buckets=buckets, sum_value=float(s.batched))
        age = GaugeMetricFamily("rainier_aggregator_frame_age_seconds",
                                "Age of the frames batched in the last tick when batched (now - t_s): "
                                "the agents' transport and the wait for the tick; absent after a tick "
                                "without frames.", labels=["quantile"])
        for quantile, seconds in zip(("0.5", "0.99", "1"), s.age_s or (), strict=False):
            age.add_metric([quantile], seconds)
        yield age
        yield GaugeMetricFamily("rainier_aggregator_tick_duration_seconds",
                                "Decode, batch and encode time of the last tick.", value=s.tick_duration_s)
        yield GaugeMetricFamily("rainier_aggregator_pending_frames", "Messages held for the next tick.",
                                value=s.pending)
        yield GaugeMetricFamily("rainier_aggregator_outbox_batches", "Batch frames waiting to be published.",
                                value=s.outbox)
        yield GaugeMetricFamily("rainier_aggregator_mqtt_connected", "1 while the MQTT session is up.",
                                value=float(s.connection.connected))
        yield CounterMetricFamily("rainier_aggregator_mqtt_connection_failures", "Failed or lost MQTT connections.",
                                  value=s.connection.failures)
