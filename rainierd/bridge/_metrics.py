"""The bridge's own metrics, ``rainier_bridge_*`` (docs/metrics.md, "The
neuron-monitor bridge"): what it read, skipped, refused and published, so a
node whose data is bad is visible as such, not merely quiet.

The collector reads one frozen ``BridgeStatus`` (built on the event loop
between lines, read in the scrape's thread), as the aggregator's does.
Every label takes values from a fixed set: reasons, documented group
names, error kinds, the field names the bridge itself gives its refusals.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rainierd.bridge._clock import STEP_REASONS
from rainierd.bridge._report import ERROR_KINDS, GROUPS
from rainierd.mqtt import Connection

SKIP_REASONS: Final = (
    "empty",  # a blank line
    "oversize",  # longer than 16 MiB (a report is about 100 KB)
    "not_json",  # not JSON (or not UTF-8, or nested past the parser's depth)
    "not_object",  # JSON, but not an object
    "bridge_error",  # the bridge failed on it (a defect: logged with its exception)
)
REPORT_REFUSALS: Final = ("instance_mismatch",)  # instance_info.instance_id is another node's
DROP_REASONS: Final = (
    "outbox_full",  # dropped, oldest first, while the broker was away
    "unpublished",  # taken for publishing when the connection failed under it
)


@dataclass(frozen=True, slots=True)
class BridgeStatus:
    """The bridge's counts as of one instant."""

    lines: int = 0
    reports: int = 0
    skipped: Mapping[str, int] = field(default_factory=dict)
    refused_reports: Mapping[str, int] = field(default_factory=dict)
    folded: int = 0
    filled: int = 0
    refused_values: Mapping[tuple[str, str], int] = field(default_factory=dict)
    group_errors: Mapping[str, int] = field(default_factory=dict)
    runtime_errors: int = 0
    resets: Mapping[str, int] = field(default_factory=dict)
    resyncs: Mapping[str, int] = field(default_factory=dict)
    published: int = 0
    dropped: Mapping[str, int] = field(default_factory=dict)
    lag_s: float | None = None  # wall time minus the last frame's sample time, when it was made
    period_s: float | None = None  # the last frame's period
    runtimes: int = 0
    devices_absent: int = 0
    efa_mapped: int = 0
    efa_seen: int = 0
    efa_missing: int = 0
    efa_unmapped: int = 0
    exec_errors: Mapping[str, int] = field(default_factory=dict)
    exec_unattributed: Mapping[str, int] = field(default_factory=dict)
    exec_timeouts: int = 0
    outbox: int = 0
    connection: Connection = field(default_factory=Connection)


def _labelled(name: str, text: str, label: str, keys: tuple[str, ...], values: Mapping[str, int]) -> Metric:
    """Return a counter family with one series per key of ``keys`` (each present from the start)."""
    family = CounterMetricFamily(name, text, labels=[label])
    for key in keys:
        family.add_metric([key], values.get(key, 0))
    return family


class BridgeCollector(Collector):
    """Yields ``rainier_bridge_*`` from ``status()``."""

    def __init__(self, status: Callable[[], BridgeStatus]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        """Yield every family of the bridge's status."""
        s = self._status()
        for name, text, value in (
            ("lines_read", "Lines read from neuron-monitor's output.", s.lines),
            ("reports_read", "Lines that were JSON objects, read as reports.", s.reports),
            ("reports_folded", "Reports whose NeuronCore counters were all repeated (another group's period came "
                               "round): their new counts went into the next frame.", s.folded),
            ("groups_filled", "Metric groups a report left out, filled with their last content (within two of "
                              "their periods): judged repeated, never counted twice.", s.filled),
            ("runtime_errors", "Runtime entries that carried an error or could not be read (their data unknown).",
             s.runtime_errors),
            ("frames_published", "Node frames published.", s.published),
            ("execution_timeouts", "Executions that timed out (execution_summary.timed_out), new periods only.",
             s.exec_timeouts),
        ):
            yield CounterMetricFamily(f"rainier_bridge_{name}", text, value=value)
        yield _labelled("rainier_bridge_lines_skipped", "Lines skipped, by reason.", "reason", SKIP_REASONS,
                        s.skipped)
        yield _labelled("rainier_bridge_reports_refused", "Reports refused whole, by reason.", "reason",
                        REPORT_REFUSALS, s.refused_reports)
        yield _labelled("rainier_bridge_frames_dropped", "Frames made and never published, by reason.", "reason",
                        DROP_REASONS, s.dropped)
        yield _labelled("rainier_bridge_clock_resyncs", "Times the sample clock was stepped to the wall clock, by "
                        "reason (the frame carried no counters).", "reason", STEP_REASONS, s.resyncs)
        yield _labelled("rainier_bridge_group_errors", "Metric groups (and instance_info, neuron_hardware_info) "
                        "that carried an error: their values unknown.", "group", GROUPS, s.group_errors)
        yield _labelled("rainier_bridge_execution_errors", "Execution errors by kind (error_summary), new periods "
                        "only.", "kind", ERROR_KINDS, s.exec_errors)
        yield _labelled("rainier_bridge_execution_errors_unattributed", "Of those, errors of runtimes on several "
                        "devices, on none, or on unknown ones: counted on no chip.", "kind", ERROR_KINDS,
                        s.exec_unattributed)
        refused = CounterMetricFamily("rainier_bridge_values_refused", "Values refused, by field and reason.",
                                      labels=["field", "reason"])
        for (name, reason), value in sorted(s.refused_values.items()):
            refused.add_metric([name, reason], value)
        yield refused
        resets = CounterMetricFamily("rainier_bridge_counter_resets", "Cumulative counters that went backwards (a "
                                     "reset), by counter.", labels=["counter"])
        for name, value in sorted(s.resets.items()):
            resets.add_metric([name], value)
        yield resets
        if s.lag_s is not None:
            yield GaugeMetricFamily("rainier_bridge_sample_lag_seconds", "Wall time minus the sample time of the "
                                    "last frame, when it was made: how far behind its input the bridge is.",
                                    value=s.lag_s)
        if s.period_s is not None:
            yield GaugeMetricFamily("rainier_bridge_period_seconds", "The last frame's period (neuron-monitor's "
                                    "captured period).", value=s.period_s)
        yield GaugeMetricFamily("rainier_bridge_runtimes", "Neuron applications in the last report.",
                                value=s.runtimes)
        yield GaugeMetricFamily("rainier_bridge_neuron_devices_absent", "Neuron devices the last report says are "
                                "gone.", value=s.devices_absent)
        efa = GaugeMetricFamily("rainier_bridge_efa_devices", "EFA devices: mapped to ports, seen in the last "
                                "read, mapped but missing from it, seen but not mapped.", labels=["state"])
        for state, value in (("mapped", s.efa_mapped), ("seen", s.efa_seen), ("missing", s.efa_missing),
                             ("unmapped", s.efa_unmapped)):
            efa.add_metric([state], value)
        yield efa
        yield GaugeMetricFamily("rainier_bridge_outbox_frames", "Frames waiting to be published.", value=s.outbox)
        yield GaugeMetricFamily("rainier_bridge_mqtt_connected", "1 while the MQTT session is up.",
                                value=float(s.connection.connected))
        yield CounterMetricFamily("rainier_bridge_mqtt_connection_failures", "Failed or lost MQTT connections.",
                                  value=s.connection.failures)
