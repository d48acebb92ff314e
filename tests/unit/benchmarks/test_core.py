"""``python -m benchmarks core --training-jobs N``: the jobs it gives the fleet
(N of the simulator's mix, resolved as the monitor resolves them), the job
work it times each tick, the report's keys, and the sizes it refuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.__main__ import main
from benchmarks._jobwork import JobWork, job_capacity, job_mix
from rainierd.core.analysis import MonitorCore
from rainierd.fleet.topology import build_fleet, build_topology
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames

ROOT = Path(__file__).resolve().parents[3]
PER_TICK = {"job_loss", "phases", "render", "job_loss_no_jobs", "phases_no_jobs", "render_no_jobs", "work",
            "tick_with_jobs", "tick_without_jobs"}
SIDE = {"series", "bytes", "gzip_bytes", "render_s_median"}


class TestJobMix:
    def test_n_jobs_of_the_mix_resolved_by_the_monitor(self) -> None:
        """40 jobs over 64 UltraServers: 40 resolved jobs, the flagship the largest, each holding its whole
        UltraServers' nodes, together at most the mix's 85 %, the rest idle."""
        topo = build_fleet(2, 32)
        members, mix = job_mix(topo, 40, start_s=0.0, seed=0)
        held = np.bincount(members.node_job[members.node_job >= 0], minlength=members.n_jobs)
        per_us = topo.n_nodes // topo.n_ultraservers
        assert (members.n_jobs, mix["jobs"], int(held.min()) % per_us, int(held.sum()) // per_us) == (
            40, 40, 0, mix["allocated_ultraservers"])
        assert mix["allocated_ultraservers"] + mix["idle_ultraservers"] == 64
        assert mix["allocated_ultraservers"] <= job_capacity(64) == 55
        assert mix["ultraservers_per_job"]["min"] == 1
        assert mix["ultraservers_per_job"]["max"] == int(held.max()) // per_us

    def test_more_jobs_than_the_mix_allocates_are_refused(self) -> None:
        """Each job holds an UltraServer at least: 3 jobs do not fit in the 2 of demo."""
        with pytest.raises(ValueError, match="3 jobs"):
            job_mix(build_topology("demo"), 3, start_s=0.0, seed=0)


class TestJobWork:
    def test_each_tick_times_the_job_work_with_and_without_jobs(self) -> None:
        """Three ticks of demo with 2 jobs: each timing has a value a tick kept, the share of the tick lies in
        (0, 1), and the scrape with jobs has the per-job series the scrape without lacks."""
        topo = build_topology("demo")
        core = MonitorCore(topo)
        model = FleetModel(topo, np.random.default_rng(0), tick_s=1.0, start_s=1.8e9)
        work = JobWork.of(core, 2, start_s=1.8e9, seed=0)
        for tick in range(3):
            analysis = core.step([frame for _topic, frame in tick_frames(topo, model.step(tick), publisher="t")])
            work.tick(analysis.throughput, keep=tick > 0)
        report = work.report([0.01, 0.01])
        scrape = report["scrape"]
        assert (set(report), set(report["per_tick_s"]), {len(v) for v in work.times.values()}) == (
            {"mix", "per_tick_s", "share_of_tick", "job_loss_share_of_tick", "scrape"}, PER_TICK, {2})
        assert 0 < report["share_of_tick"]["median"] < 1
        assert (set(scrape["with_jobs"]), set(scrape["without_jobs"])) == (SIDE, SIDE)
        assert scrape["series_added_by_family"]["rainier_job_info"] == 2
        assert scrape["series_added"] == scrape["with_jobs"]["series"] - scrape["without_jobs"]["series"] > 24
        assert scrape["bytes_added"] > 0


class TestCommandLine:
    def test_a_size_too_small_for_the_jobs_is_refused(self, capsys: pytest.CaptureFixture[str]) -> None:
        """``--training-jobs 1000`` at demo exits 2 before measuring, naming the size and what fits."""
        code = main(["core", "--topology", "demo", "--training-jobs", "1000"])
        assert (code, capsys.readouterr().err) == (
            2, "bench core: 1000 training jobs do not fit in demo (at most 2)\n")

    @pytest.mark.integration  # starts the benchmark, its monitor process and its feeder
    def test_the_json_report_at_demo(self) -> None:
        """``bench core --topology demo --training-jobs 2 --json``: one result with the jobs' section."""
        out = subprocess.run([sys.executable, "-m", "benchmarks", "core", "--topology", "demo", "--repeat", "2",
                              "--training-jobs", "2", "--json"], capture_output=True, text=True, check=True,
                             cwd=ROOT, timeout=120).stdout
        report = json.loads(out)
        jobs = report["results"][0]["jobs"]
        assert (report["training_jobs"], jobs["mix"]["jobs"], set(jobs["per_tick_s"])) == (2, 2, PER_TICK)
