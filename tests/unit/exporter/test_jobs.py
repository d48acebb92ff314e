"""Specification of the jobs as metrics (rainierd/exporter/jobs.py): from a
synthetic analysis of the demo fleet with three jobs and two faults, every
family's series; the ``max_jobs`` budget; a fleet without jobs; a shard's
share of a job."""

from __future__ import annotations

import math
from collections import Counter
from types import MappingProxyType

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from rainierd.core.analysis import Analysis, MonitorCore
from rainierd.core.jobmodel import CULPRIT_KINDS
from rainierd.core.jobs import NameIndex, resolve_jobs
from rainierd.exporter import build_exporter
from rainierd.exporter.jobs import JobFamilies, exported_jobs
from rainierd.fleet.ids import entity_id
from rainierd.fleet.pace import CAUSES
from rainierd.fleet.shards import shard_view
from rainierd.fleet.topology import Topology, build_topology
from rainierd.monitor.snapshot import MonitorSnapshot, MonitorStatus
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire.jobs import JOB_REJECT_REASONS, JobDocument
from rainierd.wire.topics import Shard

TOPO = build_topology("demo")  # 2 UltraServers, 8 nodes, 128 chips
LINK_IN_PRETRAIN = 5  # a torus link of node 0 (UltraServer 0)
CHIP_IN_EVAL = 100  # a chip of node 6


def document(job_id: str, *, nodes: tuple[str, ...] = (), ultraservers: tuple[str, ...] = (), name: str = "",
             start_s: float = 0.0) -> JobDocument:
    return JobDocument(v=1, id=job_id, name=name or job_id.rsplit("/", 1)[-1], owner="alice", scheduler="slurm",
                       source="test", nodes=list(nodes), ultraservers=list(ultraservers), start_s=start_s)


THREE_JOBS = (
    document("lab/pretrain", ultraservers=("u0",)),  # 64 chips, the degraded NeuronLink
    document("lab/finetune", nodes=("n4", "n5")),  # 32 chips, healthy
    document("lab/eval", nodes=("n6",), name='nightly "eval" \\ run'),  # 16 chips, the straggler
)  # node 7 in no job: 16 chips unallocated


def analysed(documents: tuple[JobDocument, ...], topo: Topology = TOPO, ticks: int = 50) -> tuple[Analysis, float]:
    """Return the last analysis of ``ticks`` ticks of the demo fleet with a NeuronLink at half bandwidth and a
    straggler from tick 30, under the jobs ``documents`` name, and the fleet's peak."""
    faults = [Fault(FaultKind.NL_DEGRADED, LINK_IN_PRETRAIN, 0.5, 30, 100),
              Fault(FaultKind.STRAGGLER, CHIP_IN_EVAL, 0.10, 30, 100)]
    model = FleetModel(TOPO, np.random.default_rng(3), tick_s=1.0, start_s=1.8e9, faults=faults)
    core = MonitorCore(topo)
    jobs = resolve_jobs(NameIndex.of(topo), documents)
    for tick in range(ticks):
        analysis = core.step([f for _t, f in tick_frames(TOPO, model.step(tick), publisher="t")],
                             jobs=jobs if tick == 0 else None)
    return analysis, float(analysis.throughput.fleet_peak)


def snapshot_of(analysis: Analysis, refused: dict[str, int] | None = None) -> MonitorSnapshot:
    status = MonitorStatus(jobs_refused=MappingProxyType(refused or {}))
    return MonitorSnapshot.of(analysis, generation=1, chips_total=TOPO.n_present_chips, analysis_s=0.0,
                              analysed_ticks=1, events=Counter(), lag_s=0.0, status=status)


def samples(text: bytes) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Return every sample of the exposition by name, keyed by its sorted labels."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


@pytest.fixture(scope="module")
def three_jobs() -> tuple[Analysis, float]:
    return analysed(THREE_JOBS)


def job_values(found: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str) -> dict[str, float]:
    return {dict(labels)["training_job"]: value for labels, value in found[name].items()}


class TestThreeJobs:
    def test_every_job_has_its_info_and_size(self, three_jobs: tuple[Analysis, float]) -> None:
        """Each job has one info series with its name (escaped and read back whole), owner and scheduler, and
        its chips; the counts say three jobs, all exported."""
        found = samples(JobFamilies(TOPO, lambda: snapshot_of(three_jobs[0])).render())
        assert sorted(found["rainier_job_info"]) == sorted(
            (("name", d.name), ("owner", "alice"), ("scheduler", "slurm"), ("training_job", d.id)) for d in THREE_JOBS)
        assert job_values(found, "rainier_job_chips") == {"lab/pretrain": 64, "lab/finetune": 32, "lab/eval": 16}
        assert (found["rainier_jobs"][()], found["rainier_jobs_exported"][()],
                found["rainier_jobs_over_budget"][()]) == (3, 3, 0)

    def test_peaks_and_unallocated_add_up_to_the_fleet(self, three_jobs: tuple[Analysis, float]) -> None:
        """The jobs' peaks plus the unallocated capacity are the fleet's peak (node 7 is in no job)."""
        analysis, fleet_peak = three_jobs
        found = samples(JobFamilies(TOPO, lambda: snapshot_of(analysis)).render())
        peaks = job_values(found, "rainier_job_fp8_peak_flops")
        unallocated = found["rainier_fleet_fp8_unallocated_flops"][()]
        assert unallocated == pytest.approx(16 * 1.299e15, rel=1e-12)
        assert abs(sum(peaks.values()) + unallocated - fleet_peak) <= 1e-9 * fleet_peak

    def test_every_cause_of_every_job_has_a_series(self, three_jobs: tuple[Analysis, float]) -> None:
        """rainier_job_fp8_lost_flops has each cause of each job, zeros included, and the faults land on
        their jobs' causes only."""
        found = samples(JobFamilies(TOPO, lambda: snapshot_of(three_jobs[0])).render())
        lost = {(dict(k)["training_job"], dict(k)["cause"]): v for k, v in found["rainier_job_fp8_lost_flops"].items()}
        assert sorted(lost) == sorted((d.id, c) for d in THREE_JOBS for c in CAUSES)
        assert {k for k, v in lost.items() if v > 0} == {("lab/pretrain", "degraded_neuronlink"),
                                                          ("lab/eval", "straggler")}

    def test_goodput_effective_and_stalled(self, three_jobs: tuple[Analysis, float]) -> None:
        """Goodput is effective over effective plus lost; the healthy job's is 1; nothing is stalled."""
        found = samples(JobFamilies(TOPO, lambda: snapshot_of(three_jobs[0])).render())
        effective = job_values(found, "rainier_job_fp8_effective_flops")
        goodput = job_values(found, "rainier_job_goodput_ratio")
        lost = dict.fromkeys(effective, 0.0)
        for labels, value in found["rainier_job_fp8_lost_flops"].items():
            lost[dict(labels)["training_job"]] += value
        assert goodput == pytest.approx({j: effective[j] / (effective[j] + lost[j]) for j in effective})
        assert goodput["lab/finetune"] == 1.0
        assert goodput["lab/pretrain"] < 0.95
        assert job_values(found, "rainier_job_stalled") == dict.fromkeys(effective, 0.0)
        assert 0 < found["rainier_fleet_allocated_goodput_ratio"][()] < 1

    def test_culprits_name_the_faulty_entities(self, three_jobs: tuple[Analysis, float]) -> None:
        """Each hurt job's first culprit is its fault, named by its canonical id (docs/ids.md); the healthy job has
        none."""
        found = samples(JobFamilies(TOPO, lambda: snapshot_of(three_jobs[0])).render())
        first = {dict(k)["training_job"]: (dict(k)["entity"], dict(k)["id"]) for k in found["rainier_job_culprit_flops"]
                 if dict(k)["rank"] == "1"}
        assert first == {"lab/pretrain": ("neuronlink", "s0/u0/n0/chip5/link0"), "lab/eval": ("chip", "s0/u1/n6/chip4")}
        assert all(v > 0 for v in found["rainier_job_culprit_flops"].values())

    def test_the_pace_terms_are_the_model_s(self, three_jobs: tuple[Analysis, float]) -> None:
        """Each job's pace terms (slowest speed and whether a straggler sets it, slowest path by path, a failed
        member, the learned healthy FLOP/s) are its JobLoss's, so rules can price a job spanning shards."""
        analysis = three_jobs[0]
        loss, jobs = analysis.job_loss, analysis.jobs
        assert loss is not None
        assert jobs is not None
        ids = jobs.ids
        found = samples(JobFamilies(TOPO, lambda: snapshot_of(analysis)).render())

        def by_job(name: str, **labels: str) -> dict[str, float]:
            return {dict(k)["training_job"]: v for k, v in found[name].items()
                    if all(dict(k).get(label) == want for label, want in labels.items())}
        assert by_job("rainier_job_slowest_speed") == dict(zip(ids, loss.s_min.tolist(), strict=True))
        assert by_job("rainier_job_slowest_is_straggler") == {"lab/pretrain": 0, "lab/finetune": 0, "lab/eval": 1}
        assert by_job("rainier_job_path_fraction", path="neuronlink") == dict(zip(ids, loss.f_nl.tolist(), strict=True))
        assert by_job("rainier_job_path_fraction", path="efa") == dict.fromkeys(ids, 1.0)
        assert by_job("rainier_job_member_failed") == dict.fromkeys(ids, 0.0)
        assert by_job("rainier_job_fp8_learned_healthy_flops") == dict(zip(ids, loss.healthy_value.tolist(),
                                                                           strict=True))
        assert by_job("rainier_job_slowest_speed")["lab/eval"] < 1.0
        assert by_job("rainier_job_path_fraction", path="neuronlink")["lab/pretrain"] < 1.0

    def test_eleven_series_and_twenty_four_a_job_plus_its_culprits(self, three_jobs: tuple[Analysis, float]) -> None:
        """The cardinality docs/metrics.md states: 11 fixed series (6 of them the refusal reasons), 24 a job
        (6 of them its causes, 6 its pace terms, 6 its phase) and one a culprit."""
        found = samples(JobFamilies(TOPO, lambda: snapshot_of(three_jobs[0])).render())
        series = sum(len(by_labels) for by_labels in found.values())
        assert series == 11 + 24 * 3 + len(found["rainier_job_culprit_flops"])

    def test_every_culprit_kind_has_its_canonical_id(self) -> None:
        """A culprit of any kind the model names is labelled with the id every surface prints for it."""
        assert [entity_id(TOPO, kind, 7) for kind in CULPRIT_KINDS] == [
            "s0/u0/n0/chip7", "s0/u0/n0/chip7/link0", "s0/u0/n0/efa7", "s0/u1/n7"]

    def test_the_monitor_s_exporter_collects_them(
            self, three_jobs: tuple[Analysis, float]) -> None:
        """Wired into the monitor's exporter, the jobs' families are collected and succeed."""
        snap = snapshot_of(three_jobs[0])
        text = build_exporter(TOPO, lambda: snap, process_metrics=False).render()
        found = samples(text)
        assert found["rainier_exporter_collector_success"][(("collector", "jobs"),)] == 1.0
        assert len(found["rainier_job_info"]) == 3


class TestBudget:
    def test_beyond_max_jobs_the_costliest_are_kept(self, three_jobs: tuple[Analysis, float]) -> None:
        """With max_jobs 2, the two jobs losing the most keep their series; the third is counted over budget and
        logged once, however many scrapes."""
        families = JobFamilies(TOPO, lambda: snapshot_of(three_jobs[0]), max_jobs=2)
        with capture_logs() as logs:
            found = samples(families.render())
            families.render()
        loss = three_jobs[0].job_loss
        assert loss is not None
        costliest = {THREE_JOBS[j].id for j in np.argsort(-loss.lost_total)[:2].tolist()}
        assert set(job_values(found, "rainier_job_chips")) == costliest == {"lab/pretrain", "lab/eval"}
        assert (found["rainier_jobs"][()], found["rainier_jobs_exported"][()],
                found["rainier_jobs_over_budget"][()]) == (3, 2, 1)
        assert [entry["event"] for entry in logs] == ["jobs over the exporter's budget; keeping those losing the most"]

    def test_every_per_job_family_honours_the_budget(self, three_jobs: tuple[Analysis, float]) -> None:
        """No per-job family names a job left out."""
        found = samples(JobFamilies(TOPO, lambda: snapshot_of(three_jobs[0]), max_jobs=1).render())
        named = {dict(labels)["training_job"] for name, series in found.items() if name.startswith("rainier_job_")
                 for labels in series if "training_job" in dict(labels)}
        assert named == {"lab/pretrain"}


class TestNoJobs:
    def test_a_fleet_without_jobs_exports_the_fleet_figures_only(self) -> None:
        """No jobs: rainier_jobs 0, all the peak unallocated, no allocated goodput and no per-job family at all."""
        analysis, fleet_peak = analysed((), ticks=3)
        text = JobFamilies(TOPO, lambda: snapshot_of(analysis)).render()
        found = samples(text)
        assert (found["rainier_jobs"][()], found["rainier_jobs_exported"][()]) == (0, 0)
        assert found["rainier_fleet_fp8_unallocated_flops"][()] == fleet_peak
        assert "rainier_fleet_allocated_goodput_ratio" not in found
        assert [line for line in text.decode().splitlines() if "rainier_job_" in line
                and "documents_refused" not in line] == []

    def test_refusals_are_counted_by_every_reason(self) -> None:
        """rainier_job_documents_refused_total has every reason, 0 included, from the snapshot's status."""
        analysis, _peak = analysed((), ticks=1)
        found = samples(JobFamilies(TOPO, lambda: snapshot_of(analysis, {"schema": 3})).render())
        assert found["rainier_job_documents_refused_total"] == {
            (("reason", r),): (3.0 if r == "schema" else 0.0) for r in JOB_REJECT_REASONS}

    def test_nothing_before_the_first_analysis(self) -> None:
        """No snapshot yet: nothing rendered."""
        assert JobFamilies(TOPO, lambda: None).render() == b""


class TestShards:
    def test_a_shard_exports_its_share_of_a_job(self) -> None:
        """A job over both UltraServers: each of two shards exports it with its own UltraServer's chips and
        peak, which add up to the whole job's; a job wholly in the other shard is not exported."""
        docs = (document("lab/wide", ultraservers=("u0",), nodes=("n4", "n5", "n6")),)
        whole, _peak = analysed(docs, ticks=2)
        assert whole.job_loss is not None
        chips, peaks = [], []
        for index in range(2):
            share = shard_view(TOPO, Shard(index, 2))
            analysis, _ = analysed((*docs, document("lab/only-u1", nodes=("n7",))), topo=share, ticks=2)
            assert analysis.job_loss is not None
            keep, over = exported_jobs(analysis.job_loss, whole_fleet=False, max_jobs=10)
            assert over == 0
            assert [analysis.jobs.ids[j] for j in keep.tolist()] == (  # type: ignore[union-attr]
                ["lab/wide"] if index == 0 else ["lab/only-u1", "lab/wide"])
            wide = analysis.jobs.ids.index("lab/wide")  # type: ignore[union-attr]
            chips.append(int(analysis.job_loss.chips[wide]))
            peaks.append(float(analysis.job_loss.peak[wide]))
        assert chips == [64, 48]
        assert math.isclose(sum(peaks), float(whole.job_loss.peak[0]), rel_tol=1e-12)
