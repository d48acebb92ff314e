"""``python -m benchmarks plan``: the deployment arithmetic from measured figures,
pinned on round numbers a reader can check by hand, and the stored figures
file read as the command reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, fields, replace

import pytest

from benchmarks.plan import FIGURES_FILE, Figures, Plan, load_figures, plan

ROUND = Figures(
    shard_chip_samples_per_s=500_000, bytes_per_chip_sample=200, broker_node_bytes_per_s=100e6,
    prometheus_samples_per_s=1e6, victoria_metrics_samples_per_s=2e6, scrape_interval_s=5, headroom=0.5,
    series_fixed=270, series_per_ultraserver=18,
    series_entity_budget=5_000, series_top_k=30, min_broker_nodes=3, aggregator_cpu_s_per_node_frame=50e-6,
)


class TestPlan:
    def test_a_million_chips_at_one_second(self) -> None:
        """1M chips: 4 shards of 3,907 UltraServers, 200 MB/s in and out on 8 nodes, series summed per shard."""
        assert plan(1_000_000, ROUND) == Plan(
            chips=1_000_000, tick_s=1.0, ultraservers=15_625, chip_samples_per_s=1e6, wire_bytes_per_s=200e6,
            shards=4, ultraservers_per_shard=3_907, broker_nodes=8,
            series_per_shard=270 + 18 * 3_907 + 5_000 + 30, series=4 * (270 + 18 * 3_907 + 5_000 + 30),
            samples_per_s=4 * (270 + 18 * 3_907 + 5_000 + 30) / 5, prometheus_servers=1, victoria_metrics_nodes=1,
            aggregators=7,
        )

    def test_a_small_fleet_keeps_one_shard_and_a_three_node_quorum(self) -> None:
        """64 chips: one shard, and never fewer than three broker nodes."""
        small = plan(64, ROUND)
        assert (small.shards, small.ultraservers, small.broker_nodes, small.prometheus_servers) == (1, 1, 3, 1)

    def test_a_longer_tick_divides_the_rates(self) -> None:
        """At a 5 s tick, 5M chips need the shards and bytes of 1M at 1 s; the series do not shrink."""
        slow, fast = plan(5_000_000, ROUND, tick_s=5.0), plan(1_000_000, ROUND)
        assert (slow.shards, slow.wire_bytes_per_s, slow.broker_nodes) == (fast.shards, fast.wire_bytes_per_s,
                                                                          fast.broker_nodes)
        assert slow.series > 4 * fast.series

    def test_prometheus_scales_out_past_its_ingestion_figure(self) -> None:
        """5M chips at 1 s scraped every second: 1.5M samples/s over half a server's 1M is four servers."""
        big = plan(5_000_000, replace(ROUND, scrape_interval_s=1))
        per_shard = 270 + 18 * 3_907 + 5_000 + 30
        assert (big.shards, big.series, big.samples_per_s, big.prometheus_servers) == (
            20, 20 * per_shard, 20 * per_shard, 4)

    def test_victoria_metrics_nodes_from_its_own_figure(self) -> None:
        """The same 1.5M samples/s over half of a VictoriaMetrics node's 2M is two nodes."""
        big = plan(5_000_000, replace(ROUND, scrape_interval_s=1))
        assert (big.prometheus_servers, big.victoria_metrics_nodes) == (4, 2)


    def test_aggregators_from_the_node_frames_and_their_cost(self) -> None:
        """1M chips are 62,500 node frames a second; at 50 µs of CPU each, half a core's budget each: 7 processes;
        at a 5 s tick, 2."""
        assert (plan(1_000_000, ROUND).aggregators, plan(1_000_000, ROUND, tick_s=5.0).aggregators) == (7, 2)


class TestFigures:
    def test_every_stored_figure_says_where_it_came_from(self) -> None:
        """Each figure in the repository's file has a value, and a command or a source that produced it."""
        document = json.loads(FIGURES_FILE.read_text())
        assert sorted(document["figures"]) == sorted(f.name for f in fields(Figures))
        assert [name for name, entry in document["figures"].items()
                if not (entry.get("command") or entry.get("source"))] == []
        assert load_figures() == Figures(**{k: v["value"] for k, v in document["figures"].items()})

    @pytest.mark.integration  # runs `python -m benchmarks plan`
    def test_the_command_prints_json_for_each_size(self) -> None:
        """`python -m benchmarks plan --chips ... --json` prints one plan per size, from the stored figures."""
        out = subprocess.run([sys.executable, "-m", "benchmarks", "plan", "--chips", "499200", "1000000",
                              "--json"], capture_output=True, text=True, check=True).stdout
        report = json.loads(out)
        figures = load_figures()
        assert report["plans"] == [asdict(plan(chips, figures)) for chips in (499_200, 1_000_000)]
