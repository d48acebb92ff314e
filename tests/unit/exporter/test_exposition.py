"""Specification of the one writer of HELP and TYPE lines
(rainierd/exporter/exposition.py): what prometheus-client writes."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rainierd.exporter.exposition import family_head


class _One(Collector):
    def __init__(self, family: Metric) -> None:
        self._family = family

    def collect(self) -> list[Metric]:
        return [self._family]


def client_head(family: Metric) -> str:
    """Return the HELP and TYPE lines prometheus-client writes for ``family``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_One(family))
    return "".join(line + "\n" for line in generate_latest(registry).decode().splitlines()[:2])


class TestFamilyHead:
    @pytest.mark.parametrize("text", ["Plain help.", "A back\\slash.", "Two\nlines."])
    def test_a_gauges_head_is_the_clients(self, text: str) -> None:
        """A gauge's lines, its help escaped, are those prometheus-client writes."""
        assert family_head("rainier_x", text) == client_head(GaugeMetricFamily("rainier_x", text, value=1))

    def test_a_counters_head_is_the_clients_given_its_sample_name(self) -> None:
        """Given the samples' name (``_total`` included, as text format 0.0.4 has it), a counter's lines are
        those prometheus-client writes."""
        assert family_head("rainier_y_total", "Things.", "counter") == client_head(
            CounterMetricFamily("rainier_y", "Things.", value=1))
