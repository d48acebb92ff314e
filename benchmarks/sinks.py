"""``benchmarks sinks``: what the advisories' sinks cost at ``rainier`` with
many unhealthy nodes (docs/actions.md, "Where actions go").

A hand-built ``ActionsView`` of ``--advisories`` nodes (default 1,000: one
a node for 1,000 unhealthy entities spread over 1,000 nodes, the worst
case), each with ``--causes`` causes and ``--jobs`` protected jobs, named as
rainier's hostnames are.  It measures the size of ``GET /api/v1/actions``
(the default limit's answer, and one node's, as ``node-check`` asks), the
time to build each, and the time of both through a real exporter HTTP
server on loopback; the per-tick work on the event loop of the pushing
sinks (the diff of two consecutive views, the retained documents' and the
webhook's ``offer``) when nothing changed and when every advisory is new.
The advisory policy's own cost is the policy's benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from rainierd.actions.model import ActionsView, Advisory, BrakeStatus, Cause, Protected
from rainierd.api.actions import DEFAULT_LIMIT, ActionsApi, render
from rainierd.core.throughput import Throughput
from rainierd.fleet.topology import Topology, build_sites
from rainierd.http.client import parse_url, request
from rainierd.http.config import HttpConfig
from rainierd.http.server import HttpServer
from rainierd.monitor.snapshot import MonitorSnapshot
from rainierd.sinks.changes import diff
from rainierd.sinks.retained import RetainedActions
from rainierd.sinks.webhook import WebhookConfig, WebhookSink

__all__ = ["HELP", "add_arguments", "bench_sinks", "run", "view_of"]

HELP: Final = "size and time of /api/v1/actions, and what the pushing sinks cost a tick, with many advisories"


def view_of(n_advisories: int, *, causes: int, jobs: int, t_s: float = 1_764_000_000.0) -> ActionsView:
    """Return a view of ``n_advisories`` nodes' cordons, each with ``causes`` causes and ``jobs`` jobs."""
    advisories = []
    for i in range(n_advisories):
        index = i * 31
        node = f"s0/u{index // 4}/n{index}"
        cause_list = tuple(Cause("neuronlink", i * 96 + c, f"{node}/chip{c % 16}/link{c % 3}", "degraded",
                                 ("bandwidth_low", "crc_errors"), t_s - 600.0) for c in range(causes))
        advisories.append(Advisory(
            node=node, index=index, site="s0", ultraserver=f"s0/u{index // 4}", action="cordon",
            state="proposed", hostname=f"trn2-r-{index:06d}",
            reason=f"NeuronLink {node}/chip0/link0 degraded for 10 min; slows {jobs} jobs",
            causes=cause_list, protects=tuple(Protected(f"team-{j}/pretrain-{i % 50}-{j}", 1.25e15 / (j + 1))
                                              for j in range(jobs)),
            since_s=t_s - 600.0, proposed_s=t_s - 300.0))
    return ActionsView(t_s=t_s, dry_run=True, advisories=tuple(advisories),
                       brake=BrakeStatus(max_nodes=50, max_fraction=0.02, window_s=3_600.0, under_action=50))


def _fleet_of(view: ActionsView) -> Topology:
    """Return a fleet holding every node of ``view`` (one site: the API resolves node= against it)."""
    return build_sites([max(a.index for a in view.advisories) // 4 + 1], name="bench")


def _median_s(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def _served(view: ActionsView, repeat: int) -> dict[str, float]:
    """Return the median wall time of the default query and of one node's through a real exporter server."""
    empty = np.zeros(0)
    none = np.zeros(0, np.int64)
    throughput = Throughput(0, np.zeros(0, bool), empty, empty, empty, empty, empty, empty, empty, empty,
                            none, none, none, none)
    snap = MonitorSnapshot(generation=1, throughput=throughput, chips_total=0, analysis_s=0.0, analysed_ticks=1,
                           actions=view)
    server = HttpServer(HttpConfig(host="127.0.0.1", port=0))
    server.route("/api/v1/actions", ActionsApi(_fleet_of(view), lambda: snap).serve)
    node = view.advisories[len(view.advisories) // 2].node
    out: dict[str, float] = {}
    async with server:
        for name, target in (("all", "/api/v1/actions"), ("one_node", f"/api/v1/actions?node={node}&limit=1")):
            url = parse_url(f"http://127.0.0.1:{server.port}{target}")
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                response = await request(url, max_body_bytes=1 << 26)
                times.append(time.perf_counter() - started)
                assert response.status == 200, response.status
            out[f"served_{name}_s"] = statistics.median(times)
    return out


def bench_sinks(*, advisories: int, causes: int, jobs: int, repeat: int) -> dict[str, Any]:
    """Return the sizes and times (medians of ``repeat``) described in the module docstring."""
    view = view_of(advisories, causes=causes, jobs=jobs)
    later = ActionsView(t_s=view.t_s + 5.0, dry_run=view.dry_run, advisories=view.advisories, brake=view.brake)
    node = view.advisories[len(view.advisories) // 2].node
    body_all = render(view, node=None, state=None, limit=DEFAULT_LIMIT)
    body_node = render(view, node=node, state=None, limit=1)

    def offer_first(make: Callable[[], Any]) -> Callable[[], object]:
        return lambda: make().offer(view)

    def offer_unchanged(make: Callable[[], Any]) -> Callable[[], object]:
        sink = make()
        sink.offer(view)
        return lambda: sink.offer(later)

    def retained() -> RetainedActions:
        return RetainedActions(qos=1)

    def webhook() -> WebhookSink:
        return WebhookSink(WebhookConfig(url="http://127.0.0.1:9/", queue_size=advisories + 10))

    report: dict[str, Any] = {
        "benchmark": "sinks", "advisories": advisories, "causes_per_advisory": causes, "jobs_per_advisory": jobs,
        "repeat": repeat,
        "api_all_bytes": len(body_all), "api_all_advisories": len(json.loads(body_all)["actions"]),
        "api_bytes_per_advisory": round(len(body_all) / max(1, advisories)),
        "api_one_node_bytes": len(body_node),
        "render_all_s": _median_s(lambda: render(view, node=None, state=None, limit=DEFAULT_LIMIT), repeat),
        "render_one_node_s": _median_s(lambda: render(view, node=node, state=None, limit=1), repeat),
        "diff_unchanged_s": _median_s(lambda: diff(view, later), repeat),
        "diff_all_new_s": _median_s(lambda: diff(None, view), repeat),
        "retained_offer_unchanged_s": _median_s(offer_unchanged(retained), repeat),
        "retained_offer_all_new_s": _median_s(offer_first(retained), repeat),
        "webhook_offer_unchanged_s": _median_s(offer_unchanged(webhook), repeat),
        "webhook_offer_all_new_s": _median_s(offer_first(webhook), repeat),
    }
    report |= asyncio.run(_served(view, repeat))
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--advisories", type=int, default=1_000, help="nodes with an advisory (default 1000)")
    parser.add_argument("--causes", type=int, default=1, help="causes an advisory (default 1)")
    parser.add_argument("--jobs", type=int, default=3, help="protected jobs an advisory (default 3)")
    parser.add_argument("--repeat", type=int, default=7, help="runs of each measurement; medians (default 7)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a few lines of text."""
    report = bench_sinks(advisories=args.advisories, causes=args.causes, jobs=args.jobs, repeat=args.repeat)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for key, value in report.items():
        shown = f"{value * 1e3:.2f} ms" if key.endswith("_s") else value
        print(f"{key:30} {shown}")
    return 0
