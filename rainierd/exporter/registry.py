"""Every producer of exposition under one isolation, node_exporter style: each
registry collector and each text-rendered family is timed and reports
``rainier_exporter_collector_duration_seconds`` and
``rainier_exporter_collector_success``, and one that fails drops only its own
group (logged) — never the scrape, never the process.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import structlog
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from rainierd import __version__
from rainierd.wire import WIRE_VERSION

log = structlog.get_logger("rainierd.exporter")

T = TypeVar("T")


class TextFamily(Protocol):
    """Families rendered straight to exposition text (the ones that grow with the fleet)."""

    def render(self) -> bytes:
        """Return the families' exposition text."""
        ...


@dataclass(eq=False)
class _Timings:
    duration_s: dict[str, float] = field(default_factory=dict)
    success: dict[str, bool] = field(default_factory=dict)

    def run(self, name: str, produce: Callable[[], T], empty: T) -> T:
        """Return what ``produce`` returns, recording its duration and success; ``empty`` if it fails."""
        started = time.perf_counter()
        try:
            out = produce()
        except Exception:
            # One broken source drops its own group, never the whole scrape.
            log.exception("collector failed", collector=name)
            self.success[name] = False
            out = empty
        else:
            self.success[name] = True
        self.duration_s[name] = time.perf_counter() - started
        return out


class _Timed(Collector):
    """Runs one collector under the timings."""

    def __init__(self, name: str, inner: Collector, timings: _Timings) -> None:
        self._name, self._inner, self._timings = name, inner, timings

    def collect(self) -> Iterable[Metric]:
        return self._timings.run(self._name, lambda: list(self._inner.collect()), [])


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


class BuildInfoCollector(Collector):
    """rainier_build_info: version labels, value 1."""

    def collect(self) -> Iterator[Metric]:
        info = InfoMetricFamily("rainier_build", "rainierd build information.")
        info.add_metric([], {"version": __version__, "wire_version": str(WIRE_VERSION)})
        yield info


@dataclass(frozen=True, eq=False)
class Exporter:
    """A registry of timed collectors and the text families rendered after it, as one exposition."""

    registry: CollectorRegistry
    texts: Mapping[str, TextFamily]
    _timings: _Timings

    def render(self) -> bytes:
        """Return the whole exposition: the registry's families, then the text families.

        The text families render first, so the registry's collector figures
        include theirs from the same scrape.
        """
        texts = [self._timings.run(name, family.render, b"") for name, family in self.texts.items()]
        return generate_latest(self.registry) + b"".join(texts)


def build_registry(
    collectors: Mapping[str, Collector], *, texts: Mapping[str, TextFamily] | None = None,
    process_metrics: bool = True,
) -> Exporter:
    """Return the exporter of the named collectors and text families, each timed, plus process metrics."""
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
    return Exporter(registry, dict(texts or {}), timings)
