"""``benchmarks plan``: the deployment for a fleet of N chips, computed from
figures measured on this machine (benchmarks/plan-figures.json, each with the
command that produced it), as docs/scaling.md explains.

The arithmetic, per fleet at one tick:

- chip-samples/s = chips / tick; wire bytes/s = that x bytes per chip-sample
  (batch frames of 128 nodes, as ``bench ingest`` measured them).
- monitor shards = ceil(chip-samples/s / (one monitor's measured ceiling x
  headroom)), whole UltraServers each (``--shard i/N`` splits by UltraServer).
- broker nodes = ceil((ingress + egress bytes/s) / (one node's measured MB/s x
  headroom)), at least 3 (a JetStream quorum survives one node lost): every
  frame enters the cluster once and leaves it once, to its one shard.
- aggregators (real fleets: one frame per node, ``rainierd aggregate``) =
  ceil(node frames/s x the aggregator's measured CPU per node frame, MQTT
  included / headroom): one process a core (an aggregator is one Python
  process), node frames/s = chips / chips per node / tick.
- series = shards x (fixed + 18 per UltraServer + the per-entity budget +
  top-K) (docs/metrics.md's budget; the /probe drill-down is extra), and
  samples/s = series / the scrape interval; Prometheus servers =
  ceil(samples/s / (one server's measured ingestion x headroom)): more than
  one means federation by shard, or remote write to a horizontally scalable
  store; VictoriaMetrics nodes, likewise from one single-node
  VictoriaMetrics's measured ingestion (``bench tsdb``).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from rainierd.fleet.hardware import TRN2

__all__ = ["FIGURES_FILE", "HELP", "Figures", "Plan", "add_arguments", "load_figures", "plan", "run"]

HELP: Final = "the deployment for N chips from the measured figures (docs/scaling.md)"

FIGURES_FILE = Path(__file__).with_name("plan-figures.json")


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """The measured (and the few chosen) figures a plan is computed from; units in the names."""

    shard_chip_samples_per_s: float  # one monitor process keeps up with this (bench ingest, largest passing)
    bytes_per_chip_sample: float  # wire bytes, batch frames (bench ingest at rainier)
    broker_node_bytes_per_s: float  # one broker node carries this, in + out (bench cluster)
    prometheus_samples_per_s: float  # one Prometheus server ingests this (bench tsdb, largest sustained step)
    victoria_metrics_samples_per_s: float  # one single-node VictoriaMetrics ingests this (bench tsdb)
    scrape_interval_s: float  # deploy/prometheus/prometheus.yml
    headroom: float  # the share of a measured ceiling a deployment may use
    series_fixed: int  # fleet and per-site aggregates, self-metrics (docs/metrics.md)
    series_per_ultraserver: int  # 3 FP8 + 15 raw telemetry aggregates
    series_entity_budget: int  # per-entity health, at most max_entity_series per family
    series_top_k: int
    min_broker_nodes: int
    aggregator_cpu_s_per_node_frame: float  # one aggregator process, MQTT in and out included (bench aggregate)


@dataclass(frozen=True, slots=True)
class Plan:
    """The deployment for one fleet size."""

    chips: int
    tick_s: float
    ultraservers: int
    chip_samples_per_s: float
    wire_bytes_per_s: float
    shards: int
    ultraservers_per_shard: int
    broker_nodes: int
    series_per_shard: int
    series: int
    samples_per_s: float
    prometheus_servers: int
    victoria_metrics_nodes: int
    aggregators: int  # rainierd aggregate processes (one core each) for a fleet publishing one frame per node


def load_figures(path: Path = FIGURES_FILE) -> Figures:
    """Return the figures of ``path`` (each entry's ``value``; its ``command`` and ``source`` say where from)."""
    document = json.loads(path.read_text())
    return Figures(**{name: entry["value"] for name, entry in document["figures"].items()})


def plan(chips: int, figures: Figures, *, tick_s: float = 1.0) -> Plan:
    """Return the deployment for ``chips`` chips sampled every ``tick_s`` seconds."""
    ultraservers = math.ceil(chips / TRN2.chips_per_ultraserver)
    rate = chips / tick_s
    shards = max(1, math.ceil(rate / (figures.shard_chip_samples_per_s * figures.headroom)))
    per_shard = math.ceil(ultraservers / shards)
    wire = rate * figures.bytes_per_chip_sample
    brokers = max(figures.min_broker_nodes,
                  math.ceil(2 * wire / (figures.broker_node_bytes_per_s * figures.headroom)))
    series_per_shard = (figures.series_fixed + figures.series_per_ultraserver * per_shard
                        + figures.series_entity_budget + figures.series_top_k)
    series = shards * series_per_shard
    samples = series / figures.scrape_interval_s
    return Plan(
        chips=chips, tick_s=tick_s, ultraservers=ultraservers, chip_samples_per_s=rate, wire_bytes_per_s=wire,
        shards=shards, ultraservers_per_shard=per_shard, broker_nodes=brokers, series_per_shard=series_per_shard,
        series=series, samples_per_s=samples,
        prometheus_servers=_servers(samples, figures.prometheus_samples_per_s, figures.headroom),
        victoria_metrics_nodes=_servers(samples, figures.victoria_metrics_samples_per_s, figures.headroom),
        aggregators=max(1, math.ceil(chips / TRN2.chips_per_node / tick_s * figures.aggregator_cpu_s_per_node_frame
                                     / figures.headroom)),
    )


def _servers(samples_per_s: float, one_server: float, headroom: float) -> int:
    return max(1, math.ceil(samples_per_s / (one_server * headroom)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--chips", type=float, nargs="+", default=[499_200, 1e6, 5e6],
                        help="fleet sizes in chips (default: rainier, 1M, 5M)")
    parser.add_argument("--tick", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--figures", help="measured figures JSON (default: benchmarks/plan-figures.json)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Print the plan for each ``--chips`` as a table, or JSON with ``--json``."""
    figures = load_figures(Path(args.figures) if args.figures else FIGURES_FILE)
    plans = [plan(int(chips), figures, tick_s=args.tick) for chips in args.chips]
    if args.json:
        print(json.dumps({"benchmark": "plan", "figures": asdict(figures),
                          "plans": [asdict(p) for p in plans]}, indent=2))
        return 0
    print("| chips | tick | chip-samples/s | wire MB/s | monitor shards (UltraServers each) | broker nodes | "
          "series (per shard) | samples/s | Prometheus servers | or VictoriaMetrics nodes | "
          "aggregators (node frames) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for p in plans:
        print(f"| {p.chips:,} | {p.tick_s:g} s | {p.chip_samples_per_s:,.0f} | {p.wire_bytes_per_s / 1e6:,.0f} | "
              f"{p.shards} ({p.ultraservers_per_shard:,}) | {p.broker_nodes} | {p.series:,} ({p.series_per_shard:,}) | "
              f"{p.samples_per_s:,.0f} | {p.prometheus_servers} | {p.victoria_metrics_nodes} | {p.aggregators} |")
    return 0


def describe(figures_path: Path = FIGURES_FILE) -> dict[str, Any]:
    """Return the figures file as stored, commands and sources included."""
    return dict(json.loads(figures_path.read_text()))
