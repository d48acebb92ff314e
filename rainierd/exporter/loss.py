"""What the fleet loses, as metrics: lost FP8 by cause for the fleet and each
site (the UltraServers' are text-rendered with the health families,
exporter/entities.py), the part of it capacity in no job loses, goodput at
both levels, and the fleet's costliest entities.

Every figure is ``core/fleetloss.py``'s one model: each job priced whole,
capacity in no job per UltraServer, every level the sum of the same prices.
``rainier_fleet_fp8_unallocated_lost_flops`` is what the recording rules add
to the jobs' combined losses to give the fleet's headline across shards
(rules/rainierd-jobs.yml): with one monitor, the headline equals the jobs'
losses plus it, exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rainierd.fleet import CAUSES, Topology
from rainierd.fleet.ids import entity_id
from rainierd.monitor import MonitorSnapshot


def goodput(effective: float, lost: float) -> float:
    """Return ``effective / (effective + lost)``, NaN where that is unknown or nothing could run."""
    whole = effective + lost
    return effective / whole if whole > 0 and not math.isnan(effective) else float("nan")


class LossCollector(Collector):
    """Lost FP8 by cause (fleet, site, capacity in no job), goodput and the fleet's costliest entities."""

    def __init__(self, topology: Topology, snapshot: Callable[[], MonitorSnapshot | None]) -> None:
        self._topo, self._snapshot = topology, snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        if snap is None or snap.lost is None:
            return
        lost = snap.lost
        fleet = GaugeMetricFamily("rainier_fleet_fp8_lost_flops", "FP8 FLOP/s lost, by cause: every job's loss and "
                                  "the capacity in no job's (docs/throughput-model.md).", labels=["cause"])
        site = GaugeMetricFamily("rainier_site_fp8_lost_flops", "Site FP8 FLOP/s lost, by cause: every loss "
                                 "placed where what causes it is.", labels=["site", "cause"])
        free = GaugeMetricFamily("rainier_fleet_fp8_unallocated_lost_flops", "FP8 FLOP/s the capacity in no job "
                                 "loses, by cause, priced per UltraServer (all of the fleet's without jobs).",
                                 labels=["cause"])
        unallocated = lost.unallocated_fleet()
        for cause in CAUSES:
            fleet.add_metric([cause], float(lost.site[cause].sum()))
            free.add_metric([cause], unallocated[cause])
            for s, value in enumerate(lost.site[cause].tolist()):
                site.add_metric([f"s{s}", cause], value)
        yield fleet
        yield site
        yield free
        tp = snap.throughput
        fleet_ratio = GaugeMetricFamily("rainier_fleet_goodput_ratio", "FP8 effective over effective plus lost, "
                                        "the fleet's (absent while its effective figure is unknown).")
        ratio = goodput(float(tp.shown("effective", "fleet")[0]), float(sum(lost.fleet().values())))
        if not math.isnan(ratio):
            fleet_ratio.add_metric([], ratio)
        yield fleet_ratio
        site_ratio = GaugeMetricFamily("rainier_site_goodput_ratio", "FP8 effective over effective plus lost, per "
                                       "site: what the fleet loses to what is in it.", labels=["site"])
        for s, (eff, lose) in enumerate(zip(tp.shown("effective", "site").tolist(), lost.total("site").tolist(),
                                            strict=True)):
            if not math.isnan(value := goodput(eff, lose)):
                site_ratio.add_metric([f"s{s}"], value)
        yield site_ratio
        culprits = GaugeMetricFamily(
            "rainier_fleet_culprit_flops", "FP8 FLOP/s one entity costs, summed over what it slows, the fleet's "
            "costliest first (rank 1-20, only non-zero; training_job empty for capacity in no job).",
            labels=["rank", "entity", "id", "training_job"])
        jobs = snap.jobs.ids if snap.jobs is not None else ()
        for rank, (kind, ident, job, flops) in enumerate(lost.culprits(), start=1):
            if flops > 0:
                culprits.add_metric([str(rank), kind, entity_id(self._topo, kind, ident),
                                     jobs[job] if 0 <= job < len(jobs) else ""], flops)
        yield culprits
        yield GaugeMetricFamily("rainier_fleet_loss_jobs_priced", "Jobs the loss figures price whole: 0 means every "
                                "figure is the per-UltraServer fallback (no job known).",
                                value=float(lost.n_jobs))
