"""What the advisory policy (``rainierd.actions.policy``) costs the monitor a tick at rainier scale with many
unhealthy entities, and how large ``/api/v1/actions`` (``ActionsView.document()``) gets.

``python -m benchmarks.actions [--topology rainier] [--unhealthy 1000] [--repeat 30] [--json FILE]``

A synthetic health view, not a simulated feed: the policy's work follows the unhealthy entities alone (a
vectorised grouping by node, then a few objects per unhealthy node), never the fleet's size, so what matters
is how many entities are unhealthy and over how many nodes.  The view: ``--unhealthy`` entities on as many
distinct nodes drawn at random over the fleet, half degraded NeuronLinks, a fifth degraded EFA ports, a fifth
throttled chips, 5 % failed chips and 5 % lost nodes; 1,000 jobs of contiguous nodes over ~90 % of the fleet,
each entity charged 1 TFLOP/s to its node's job (each job delivering 10 PF/s: every cause priced cheap).
The policy is fed the same view every 30 s of wall time
past its hold, so the ticks measured are steady state: every node has its advisory, the brake has tripped and
holds most of them back (the costliest state: every advisory rebuilt, the brake's candidates sorted).

Prints one JSON line (and writes it to ``--json``): the median and p99 ms of ``ActionPolicy.update`` per
tick, wall and this process's CPU (on a shared machine the CPU time is the closer to an idle one's), the
first tick's, and the size in bytes of the whole document, of one node's and of ``limit=100``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from rainierd.actions.config import ActionConfig
from rainierd.actions.policy import ActionPolicy
from rainierd.core.analysis import HealthView
from rainierd.core.detect import STATE_NAMES, FeedView, Reason
from rainierd.core.jobmodel import CULPRIT_KINDS, JobLoss
from rainierd.core.jobs import NameIndex, resolve_jobs
from rainierd.fleet import CAUSES
from rainierd.fleet.topology import Topology, build_topology
from rainierd.wire.jobs import JobDocument

_T0 = 1_800_000_000.0
# (kind, state, reason, share of the unhealthy entities)
_MIX = (("neuronlink", "degraded", Reason.LANES, 0.5), ("efa", "degraded", Reason.BANDWIDTH, 0.2),
        ("chip", "throttled", Reason.THROTTLE_FLAG, 0.2), ("chip", "failed", Reason.UNRESPONSIVE, 0.05),
        ("node", "lost", Reason.SILENT, 0.05))


def synthetic(topo: Topology, n_unhealthy: int, seed: int) -> tuple[HealthView, Any, JobLoss]:
    """Return a health view of ``n_unhealthy`` entities on distinct nodes, the jobs and their loss."""
    rng = np.random.default_rng(seed)
    nodes = rng.choice(topo.n_nodes, n_unhealthy, replace=False)
    ids: dict[str, list[int]] = {k: [] for k in STATE_NAMES}
    states: dict[str, list[int]] = {k: [] for k in STATE_NAMES}
    reasons: dict[str, list[int]] = {k: [] for k in STATE_NAMES}
    at = 0
    for kind, state, reason, share in _MIX:
        count = round(share * n_unhealthy)
        for node in nodes[at:at + count].tolist():
            local = int(rng.integers(16))
            entity = {"neuronlink": node * topo.links_per_node + local, "efa": node * topo.efa_ports_per_node + local,
                      "chip": node * topo.chips_per_node + local, "node": node}[kind]
            ids[kind].append(entity)
            states[kind].append(STATE_NAMES[kind].index(state))
            reasons[kind].append(int(reason))
        at += count
    view = HealthView(
        {k: np.array(sorted(v), np.int64) for k, v in ids.items()},
        {k: np.array([s for _, s in sorted(zip(ids[k], v, strict=True))], np.int64) for k, v in states.items()},
        {k: np.array([r for _, r in sorted(zip(ids[k], v, strict=True))], np.int64) for k, v in reasons.items()},
        {k: np.zeros(len(v), np.int64) for k, v in ids.items()}, {}, {}, FeedView())
    n_jobs = 1_000
    size = int(0.9 * topo.n_nodes) // n_jobs
    docs = [JobDocument(v=1, id=f"trn-east/{41871 + j}", name=f"llm-pretrain-{j:04d}", owner="alice",
                        scheduler="slurm", source="bench", nodes=[f"n{n}" for n in range(j * size, (j + 1) * size)],
                        start_s=0.0) for j in range(n_jobs)]
    jobs = resolve_jobs(NameIndex.of(topo), docs)
    node_of = {"neuronlink": topo.link_node, "efa": topo.efa_node, "chip": topo.chip_node}
    keys, charged_job = [], []
    for kind in CULPRIT_KINDS:
        entity = view.ids[kind]
        node = entity if kind == "node" else node_of[kind][entity]
        job = jobs.node_job[node].astype(np.int64)
        keys.append(entity[job >= 0] * len(CULPRIT_KINDS) + CULPRIT_KINDS.index(kind))
        charged_job.append(job[job >= 0])
    key, job = np.concatenate(keys), np.concatenate(charged_job)
    order = np.argsort(key)
    zeros = np.zeros(n_jobs)
    loss = JobLoss(
        chips=np.zeros(n_jobs, np.int64), peak=zeros + 1e16, effective=zeros + 1e16,
        lost=dict.fromkeys(CAUSES, zeros), stalled=zeros.astype(bool),
        failed=zeros.astype(bool), s_min=zeros + 1, slowest_is_straggler=zeros.astype(bool), f_nl=zeros + 1,
        f_efa=zeros + 1, healthy_value=zeros, culprit_kind=np.full((n_jobs, 5), -1),
        culprit_id=np.zeros((n_jobs, 5), np.int64), culprit_flops=np.zeros((n_jobs, 5)), charged_key=key[order],
        charged_job=job[order], charged_flops=np.full(key.size, 1e12), unallocated_peak=0.0)
    return view, jobs, loss


def measure(topology: str, *, n_unhealthy: int, repeat: int, seed: int) -> dict[str, Any]:
    """Return the per-tick cost of the policy and the document's size."""
    topo = build_topology(topology)
    view, jobs, loss = synthetic(topo, n_unhealthy, seed)
    config = ActionConfig()
    policy = ActionPolicy(topo, config)
    started = time.perf_counter()
    policy.update(view, t_s=_T0, jobs=jobs, loss=loss)
    first_ms = (time.perf_counter() - started) * 1e3
    t_s = _T0 + config.hold_s
    wall, cpu = [], []
    actions = None
    for i in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        actions = policy.update(view, t_s=t_s + 30.0 * i, jobs=jobs, loss=loss)
        wall.append((time.perf_counter() - w0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    assert actions is not None
    states: dict[str, int] = {}
    for advisory in actions.advisories:
        states[advisory.state] = states.get(advisory.state, 0) + 1
    node = actions.advisories[0].node

    def size(document: dict[str, Any]) -> int:
        return len(json.dumps(document, separators=(",", ":")).encode())

    started = time.perf_counter()
    whole = actions.document()
    document_ms = (time.perf_counter() - started) * 1e3

    def p99(values: list[float]) -> float:
        return float(np.percentile(values, 99))

    return {
        "benchmark": "actions", "load_average_1m": round(os.getloadavg()[0], 2), "topology": topology,
        "nodes": topo.n_nodes, "unhealthy_entities": n_unhealthy,
        "advisories": len(actions.advisories), "states": states, "brake_tripped": actions.brake.tripped,
        "repeat": repeat, "seed": seed,
        "update_ms_median": round(statistics.median(wall), 3), "update_ms_p99": round(p99(wall), 3),
        "update_cpu_ms_median": round(statistics.median(cpu), 3), "update_cpu_ms_p99": round(p99(cpu), 3),
        "first_update_ms": round(first_ms, 3), "document_ms": round(document_ms, 3),
        "document_bytes": size(whole), "document_bytes_per_advisory": round(size(whole) / len(actions.advisories)),
        "document_bytes_one_node": size(actions.document(node=node)),
        "document_bytes_limit_100": size(actions.document(limit=100)),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print one JSON line, and write it to ``--json`` when given."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.actions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--topology", default="rainier")
    parser.add_argument("--unhealthy", type=int, default=1_000, help="unhealthy entities (on as many nodes)")
    parser.add_argument("--repeat", type=int, default=30, help="ticks measured")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the result here")
    args = parser.parse_args(argv)
    result = measure(args.topology, n_unhealthy=args.unhealthy, repeat=args.repeat, seed=args.seed)
    line = json.dumps(result)
    print(line)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
