"""Specification of the simulated jobs (rainierd/sim/workload.py, sim/job_training.py): each job a synchronous group
over its own UltraServers, its phases in the telemetry and the truth, idle capacity unallocated rather than lost,
a seed-driven mix that starts, restarts and ends jobs, and the job documents the simulate role publishes."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import aiomqtt
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rainierd.errors import ConfigError
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.topology import Topology, build_fleet, build_topology
from rainierd.sim.faults import Fault, FaultKind
from rainierd.sim.fleet import FleetModel, FleetParams
from rainierd.sim.publisher import Simulator, truth_document
from rainierd.sim.sample import JobTruth, TickSample
from rainierd.sim.workload import JobAnnouncer, JobMix, JobSchedule, JobSpec, load_jobs
from rainierd.wire.jobs import JOBS_ROOT, JobBook, decode_job

CHIPS_PER_US = 64
QUIET = FleetParams(noise=0.0)  # no jitter: a phase's zeros are exact zeros


def chips_of(topo: Topology, ultraservers: tuple[int, ...]) -> np.ndarray:
    return np.flatnonzero(np.isin(topo.chip_ultraserver, ultraservers))


def run(
    topo: Topology, ticks: int, *, jobs: list[JobSpec] | None = None, faults: list[Fault] | None = None,
    params: FleetParams = QUIET, seed: int = 0, tick_s: float = 1.0,
) -> list[TickSample]:
    """Return every tick's sample (records copied: the model reuses its arrays)."""
    model = FleetModel(topo, np.random.default_rng(seed), tick_s=tick_s, start_s=1.7e9, params=params,
                       faults=faults, jobs=jobs)
    out = []
    for tick in range(ticks):
        s = model.step(tick)
        out.append(replace(s, chips=s.chips.copy(), links=s.links.copy(), efa=s.efa.copy()))
    return out


def flop_rate(samples: list[TickSample], tick: int) -> np.ndarray:
    """Return each chip's FP8 FLOP/s over ``tick`` (counter delta over one 1 s tick)."""
    return (samples[tick].chips["fp8_flop_total"].astype(np.float64)
            - samples[tick - 1].chips["fp8_flop_total"].astype(np.float64))


def job_row(sample: TickSample, job_id: str) -> JobTruth:
    return next(j for j in sample.truth.jobs if j.id == job_id)


TWO_JOBS = (JobSpec(id="t/a", ultraservers=(0, 2, 4), start_tick=0), JobSpec(id="t/b", ultraservers=(1, 3),
                                                                              start_tick=0))


class TestSynchronousJobs:
    TOPO = build_fleet(1, 6)
    JOBS = TWO_JOBS
    # A chip of UltraServer 2 (job a's middle member) throttled to half its clock from tick 5.
    THROTTLE = Fault(FaultKind.CHIP_THROTTLE, 2 * CHIPS_PER_US + 7, 0.5, 5, 100)

    def test_a_fault_in_one_ultraserver_slows_every_chip_of_its_job(self) -> None:
        """One throttled chip in UltraServer 2 slows the FLOP rate of every chip of UltraServers 0, 2 and 4 alike
        (to 1 / step of the healthy run), and truth charges the job's loss to thermal throttling."""
        healthy = run(self.TOPO, 12, jobs=list(self.JOBS))
        faulty = run(self.TOPO, 12, jobs=list(self.JOBS), faults=[self.THROTTLE])
        a = chips_of(self.TOPO, (0, 2, 4))
        ratio = flop_rate(faulty, 10)[a] / flop_rate(healthy, 10)[a]
        step = 0.75 / 0.5 + 0.25  # compute share at half speed, collectives untouched
        assert ratio == pytest.approx(np.full(a.size, 1 / step), rel=1e-6)
        row = job_row(faulty[10], "t/a")
        assert row.lost_flops["thermal_throttle"] > 0.3 * row.peak_flops * 0.62
        assert faulty[10].truth.fault_lost_flops == (pytest.approx(sum(row.lost_flops.values())),)

    def test_another_job_in_the_same_fleet_is_unaffected(self) -> None:
        """Job b (UltraServers 1 and 3, between job a's) runs exactly as without the fault: same FLOP, no loss."""
        healthy = run(self.TOPO, 12, jobs=list(self.JOBS))
        faulty = run(self.TOPO, 12, jobs=list(self.JOBS), faults=[self.THROTTLE])
        b = chips_of(self.TOPO, (1, 3))
        assert np.array_equal(flop_rate(faulty, 10)[b], flop_rate(healthy, 10)[b])
        row = job_row(faulty[10], "t/b")
        assert (row.effective_flops, sum(row.lost_flops.values())) == (job_row(healthy[10], "t/b").effective_flops,
                                                                       0.0)

    def test_the_fleet_s_truth_is_the_sum_of_its_jobs(self) -> None:
        """Effective FP8 and every cause's loss fleet-wide are the jobs' sums: idle chips add nothing."""
        truth = run(self.TOPO, 12, jobs=list(self.JOBS), faults=[self.THROTTLE])[10].truth
        assert truth.effective_flops == pytest.approx(sum(j.effective_flops for j in truth.jobs))
        for cause, lost in truth.lost_flops.items():
            assert lost == pytest.approx(sum(j.lost_flops[cause] for j in truth.jobs))


class TestPhases:
    TOPO = build_fleet(1, 3)
    JOB = JobSpec(id="t/ckpt", ultraservers=(0, 2), start_tick=0, checkpoint_every_ticks=10, checkpoint_ticks=3,
                  eval_every_ticks=25, eval_ticks=4, restart_ticks_at=(40,), restart_ticks=5)

    def test_the_phase_cadence(self) -> None:
        """Checkpoints every 10 ticks for 3, evaluation every 25 for 4, a restart at 40 for 5 after which both
        cadences start again from the resumption."""
        phases = [self.JOB.phase(t) for t in range(62)]
        names = "".join("RCER"[p] if p != 0 else "." for p in phases)
        assert names == ("." * 10 + "CCC" + "." * 7 + "CCC" + ".." + "EEEE" + "." + "CCC" + "." * 7 + "RRRRR"
                         + "." * 10 + "CCC" + "." * 4)

    @given(every=st.integers(1, 30), length=st.integers(0, 10), eval_every=st.integers(1, 40),
           eval_length=st.integers(0, 10), restarts=st.lists(st.integers(0, 200), max_size=4),
           restart_length=st.integers(1, 20), tick=st.integers(0, 250))
    def test_the_phase_is_the_tick_by_tick_walk_s(
        self, *, every: int, length: int, eval_every: int, eval_length: int, restarts: list[int], restart_length: int,
        tick: int,
    ) -> None:
        """Any cadence: the phase at a tick is what walking the job tick by tick gives (a restart window idles it,
        and both cadences count again from the tick after it; a checkpoint wins over an evaluation)."""
        spec = JobSpec(id="t/p", ultraservers=(0,), start_tick=0, checkpoint_every_ticks=every,
                       checkpoint_ticks=length, eval_every_ticks=eval_every, eval_ticks=eval_length,
                       restart_ticks_at=tuple(sorted(restarts)), restart_ticks=restart_length)
        resumed, phase = 0, 0
        for t in range(tick + 1):
            if any(r <= t < r + restart_length for r in restarts):
                phase, resumed = 3, t + 1
                continue
            since = t - resumed
            phase = (1 if since >= every and since % every < length
                     else 2 if since >= eval_every and since % eval_every < eval_length else 0)
        assert spec.phase(tick) == phase

    def test_a_checkpoint_drops_every_chip_of_the_job_together(self) -> None:
        """During a checkpoint every chip of the job is at 0 utilisation and 0 FLOP/s, and its NeuronLink and EFA
        traffic is 0; the idle-free UltraServer 1 is not the job's and stays as it was (idle)."""
        samples = run(self.TOPO, 14, jobs=[self.JOB])
        chips = chips_of(self.TOPO, (0, 2))
        assert job_row(samples[11], "t/ckpt").phase == "checkpoint"
        assert np.all(samples[11].chips["util"][chips] == 0.0)
        assert np.all(flop_rate(samples, 11)[chips] == 0.0)
        links = np.isin(self.TOPO.node_ultraserver[self.TOPO.link_node], (0, 2))
        assert np.all(samples[11].links["bw_bytes_s"][links] == 0.0)
        assert np.array_equal(samples[11].links["tx_bytes_total"], samples[10].links["tx_bytes_total"])
        assert np.array_equal(samples[11].efa["tx_bytes_total"], samples[10].efa["tx_bytes_total"])
        assert np.all(samples[14 - 1].chips["util"][chips] > 0.5)  # running again from tick 13

    def test_a_checkpoint_is_charged_to_no_fault_and_counted_as_stall_seconds(self) -> None:
        """A throttled chip throughout: the job's loss is thermal while it runs and nothing in its checkpoint,
        whose 3 ticks are its stall seconds."""
        throttle = Fault(FaultKind.CHIP_THROTTLE, 5, 0.5, 0, 100)
        samples = run(self.TOPO, 14, jobs=[self.JOB], faults=[throttle])
        running, ckpt, after = (job_row(samples[t], "t/ckpt") for t in (9, 11, 13))
        assert running.lost_flops["thermal_throttle"] > 0
        assert (sum(ckpt.lost_flops.values()), ckpt.effective_flops) == (0.0, 0.0)
        assert samples[11].truth.fault_lost_flops == (0.0,)
        assert (running.stall_s, ckpt.stall_s, after.stall_s) == (0.0, 2.0, 3.0)

    def test_evaluation_runs_the_job_at_a_lower_busy_share(self) -> None:
        """In evaluation the job's chips are busy about 0.35 of the time (training: about 0.62) and still step."""
        samples = run(self.TOPO, 28, jobs=[self.JOB])
        chips = chips_of(self.TOPO, (0, 2))
        assert job_row(samples[26], "t/ckpt").phase == "eval"
        assert samples[26].chips["util"][chips].mean() == pytest.approx(0.35, abs=0.04)
        assert samples[18].chips["util"][chips].mean() == pytest.approx(0.62, abs=0.04)
        assert flop_rate(samples, 26)[chips].min() > 0

    def test_a_restart_idles_the_job_then_it_resumes(self) -> None:
        """From the restart tick the job's chips idle (phase restarting, stall seconds counted); 5 ticks later the
        job runs again on the same UltraServers."""
        samples = run(self.TOPO, 47, jobs=[self.JOB])
        chips = chips_of(self.TOPO, (0, 2))
        assert [job_row(samples[t], "t/ckpt").phase for t in (39, 40, 44, 45)] == ["running", "restarting",
                                                                                  "restarting", "running"]
        assert np.all(flop_rate(samples, 42)[chips] == 0.0)
        assert flop_rate(samples, 46)[chips].min() > 0
        assert job_row(samples[46], "t/ckpt").stall_s == 3 * 3 + 5  # three checkpoints (10, 20, 30) and the restart


class TestIdle:
    def test_idle_ultraservers_are_unallocated_not_lost(self) -> None:
        """UltraServer 1, in no job: its chips at 0 utilisation and FLOP, listed unallocated with its capacity,
        and no FLOP lost to any cause."""
        topo = build_fleet(1, 3)
        samples = run(topo, 6, jobs=[JobSpec(id="t/j", ultraservers=(0, 2), start_tick=0)])
        truth = samples[5].truth
        idle = chips_of(topo, (1,))
        assert (truth.unallocated, truth.unallocated_chips) == ((1,), CHIPS_PER_US)
        assert truth.unallocated_peak_flops == CHIPS_PER_US * TRN2.fp8_dense_flops
        assert np.all(samples[5].chips["util"][idle] == 0.0)
        assert np.all(flop_rate(samples, 5)[idle] == 0.0)
        assert sum(truth.lost_flops.values()) == 0.0
        assert truth_document(truth, "sim")["unallocated"] == {
            "ultraservers": [1], "chips": 64, "peak_flops": 64 * TRN2.fp8_dense_flops}

    def test_a_fault_on_an_idle_ultraserver_costs_nothing(self) -> None:
        """A failed chip where no job runs: no job slows, no FP8 is lost, the fault's loss is 0."""
        topo = build_fleet(1, 3)
        fault = Fault(FaultKind.CHIP_FAILED, CHIPS_PER_US + 3, 1.0, 1, 100)
        truth = run(topo, 6, jobs=[JobSpec(id="t/j", ultraservers=(0, 2), start_tick=0)], faults=[fault])[5].truth
        assert (sum(truth.lost_flops.values()), truth.fault_lost_flops) == (0.0, (0.0,))


def mix_schedule(seed: int, *, n_us: int = 64, tick_s: float = 60.0, mix: JobMix | None = None) -> JobSchedule:
    return JobSchedule(build_fleet(2, n_us // 2), tick_s, np.random.default_rng(seed), mix=mix or JobMix())


class TestMix:
    def test_the_fleet_starts_with_a_flagship_and_a_heavy_tail_most_of_it_allocated(self) -> None:
        """At tick 0 the mix holds about 85 % of 7,800 UltraServers: one job of half the fleet (thousands), and
        many small ones, most of a single UltraServer."""
        schedule = mix_schedule(3, n_us=7_800)
        jobs = schedule.active(0)
        sizes = sorted((len(j.ultraservers) for j in jobs), reverse=True)
        assert sizes[0] == 3_900
        assert sum(sizes) == int(np.ceil(0.85 * 7_800))
        assert sizes.count(1) > len(sizes) / 3
        held = [u for j in jobs for u in j.ultraservers]
        assert len(held) == len(set(held))  # no UltraServer in two jobs

    def test_over_a_long_run_jobs_restart_end_and_new_ones_start_on_freed_ultraservers(self) -> None:
        """Four simulated days of a 64-UltraServer fleet at a minute a tick: every phase occurs, jobs end, and a
        later job runs on an UltraServer an ended job held; no UltraServer is ever in two jobs at once."""
        schedule = mix_schedule(1)
        seen_phases: set[int] = set()
        started: dict[str, JobSpec] = {}
        for tick in range(4 * 1_440):
            active = schedule.active(tick)
            held = [u for j in active for u in j.ultraservers]
            assert len(held) == len(set(held))
            for job in active:
                started.setdefault(job.id, job)
                seen_phases.add(job.phase(tick))
        assert seen_phases == {0, 1, 2, 3}
        ended = [j for j in started.values() if j.end_tick < 4 * 1_440]
        assert len(ended) >= 5
        assert sum(len(j.restart_ticks_at) for j in started.values()) >= 3
        assert any(set(later.ultraservers) & set(gone.ultraservers) and later.start_tick >= gone.end_tick
                   for gone in ended for later in started.values())

    def test_same_seed_same_mix_and_another_seed_another(self) -> None:
        """Two schedules of one seed draw the same jobs, tick for tick; another seed draws others."""
        a, b, c = mix_schedule(5), mix_schedule(5), mix_schedule(6)
        for tick in range(2_000):
            assert a.active(tick) == b.active(tick)
        assert [j.ultraservers for j in a.active(0)] != [j.ultraservers for j in c.active(0)]

    def test_the_fleet_model_s_mix_is_its_seed_s(self) -> None:
        """FleetModel with jobs "mix": same seed, same job truth rows; the model's other values are those of the
        same seed's fixed-group model only where no job differs (the mix draws from its own stream)."""
        topo = build_fleet(1, 8)
        params = replace(QUIET, jobs="mix")
        rows = [[(j.id, j.ultraservers, j.phase, j.effective_flops) for j in s.truth.jobs]
                for s in run(topo, 5, params=params, seed=11)]
        again = [[(j.id, j.ultraservers, j.phase, j.effective_flops) for j in s.truth.jobs]
                 for s in run(topo, 5, params=params, seed=11)]
        assert rows == again
        assert rows[0]

    def test_jobs_are_off_by_default(self) -> None:
        """The default FleetParams runs no jobs: its truth document has no job rows, as before jobs existed."""
        truth = run(build_fleet(1, 2), 2)[1].truth
        assert FleetParams().jobs == "none"
        assert (truth.jobs, truth.unallocated) == ((), None)
        assert "jobs" not in truth_document(truth, "sim")


class TestFill:
    def test_n_jobs_a_flagship_then_the_tail_each_leaving_room_for_the_rest(self) -> None:
        """1,000 jobs over 7,800 UltraServers: exactly 1,000, the first half the fleet, the rest from one
        UltraServer to tens, together the mix's 85 %, none sharing an UltraServer."""
        schedule = mix_schedule(0, n_us=7_800)
        jobs = schedule.fill(1_000)
        sizes = [len(j.ultraservers) for j in jobs]
        held = [u for j in jobs for u in j.ultraservers]
        assert (len(jobs), sizes[0], sum(sizes), min(sizes), len(set(held))) == (1_000, 3_900, 6_630, 1, 6_630)
        assert max(sizes[1:]) >= 10
        assert {j.start_tick for j in jobs} == {0}

    def test_filled_jobs_are_the_schedule_s_at_tick_0(self) -> None:
        """The filled jobs are the ones active at tick 0: the mix draws no second fleet over them."""
        schedule = mix_schedule(2)
        jobs = schedule.fill(20)
        assert schedule.active(0) == jobs

    def test_more_jobs_than_the_target_share_are_refused(self) -> None:
        """64 UltraServers at 85 % hold 55 jobs of one UltraServer at most: 56 are refused."""
        assert len(mix_schedule(1).fill(55)) == 55
        with pytest.raises(ValueError, match="56 jobs"):
            mix_schedule(1).fill(56)


class TestScenarioJobs:
    def test_a_scenario_s_jobs(self, tmp_path: Path) -> None:
        """[[job]] entries become specs in ticks: UltraServers sorted, cadences and restarts from seconds."""
        path = tmp_path / "s.toml"
        path.write_text('[[job]]\nid = "lab/pretrain"\nultraservers = [4, 1, 2]\nat_s = 10\nfor_s = 600\n'
                        'checkpoint_every_s = 120\ncheckpoint_s = 30\nrestart_at_s = [300]\nrestart_s = 60\n'
                        '[[job]]\nid = "lab/eval"\nultraservers = [0]\n')
        a, b = load_jobs(path, build_fleet(1, 6), tick_s=2.0)
        assert a == JobSpec(id="lab/pretrain", ultraservers=(1, 2, 4), start_tick=5, end_tick=305,
                            checkpoint_every_ticks=60, checkpoint_ticks=15, eval_every_ticks=a.eval_every_ticks,
                            eval_ticks=150, restart_ticks_at=(155,), restart_ticks=30)
        assert (b.ultraservers, b.start_tick, b.active(10**9)) == ((0,), 0, True)

    @pytest.mark.parametrize(("entries", "complaint"), [
        ('[[job]]\nid = "a"\nultraservers = [9]\n', "ultraservers must be distinct ids"),
        ('[[job]]\nid = "a"\nultraservers = [1]\n[[job]]\nid = "b"\nultraservers = [1, 2]\n', "UltraServer 1"),
        ('[[job]]\nid = "a/b/c"\nultraservers = [1]\n', "not a job id"),
        ('[[job]]\nid = "a"\n', "missing 'ultraservers'"),
    ])
    def test_a_bad_job_is_refused_naming_it(self, tmp_path: Path, entries: str, complaint: str) -> None:
        """An unknown UltraServer, one held twice at once, a bad id or a missing field: ConfigError naming the job."""
        path = tmp_path / "s.toml"
        path.write_text(entries)
        with pytest.raises(ConfigError, match=complaint):
            load_jobs(path, build_fleet(1, 6), tick_s=1.0)


class TestAnnouncer:
    def test_a_job_is_published_once_and_removed_when_it_ends(self) -> None:
        """A new job: its document; the same job next tick: nothing; gone: the empty retained message."""
        announcer = JobAnnouncer(source="sim")
        first = announcer.changes([("sim/j1", (0, 2), 1.7e9)])
        assert [(topic, decode_job(topic, payload)) for topic, payload in first] == [
            ("rainier/v1/jobs/sim/j1", announcer.document("sim/j1", (0, 2), 1.7e9))]
        assert announcer.changes([("sim/j1", (0, 2), 1.7e9)]) == []
        assert announcer.changes([]) == [("rainier/v1/jobs/sim/j1", b"")]

    def test_an_undelivered_message_is_sent_again(self) -> None:
        """A document the outbox dropped is published again the next tick; a dropped removal is sent again."""
        announcer = JobAnnouncer(source="sim")
        announcer.changes([("sim/j1", (0,), 0.0), ("sim/j2", (1,), 0.0)])
        announcer.undelivered.append("rainier/v1/jobs/sim/j1")
        assert [topic for topic, _ in announcer.changes([("sim/j1", (0,), 0.0), ("sim/j2", (1,), 0.0)])] == [
            "rainier/v1/jobs/sim/j1"]
        assert announcer.changes([("sim/j1", (0,), 0.0)]) == [("rainier/v1/jobs/sim/j2", b"")]
        announcer.undelivered.append("rainier/v1/jobs/sim/j2")
        assert announcer.changes([("sim/j1", (0,), 0.0)]) == [("rainier/v1/jobs/sim/j2", b"")]


class Recorder:
    """A client that records every publish in order."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes, int, bool]] = []

    async def publish(self, topic: str, payload: bytes, *, qos: int, retain: bool) -> None:
        self.messages.append((topic, payload, qos, retain))


class Failing:
    """A client whose every publish fails: the broker went away."""

    async def publish(self, topic: str, payload: bytes, *, qos: int, retain: bool) -> None:
        raise aiomqtt.MqttError("the broker went away")


class TestPublishedJobs:
    async def test_a_job_document_whose_publish_failed_is_announced_again(self) -> None:
        """The broker lost under a job's document: publish_jobs raises (the supervisor reconnects) and the job is
        announced again the next tick."""
        sim = Simulator(build_topology("demo"), publisher_id="sim", seed=0, tick_s=1.0, ticks=1, encoding="binary",
                        qos=0)
        sim._announce(sim._announcer.changes([("t/a", (0,), 0.0)]))
        with pytest.raises(aiomqtt.MqttError):
            await sim.publish_jobs(Failing())  # type: ignore[arg-type]
        assert [topic for topic, _ in sim._announcer.changes([("t/a", (0,), 0.0)])] == ["rainier/v1/jobs/t/a"]


    async def test_published_documents_decode_and_match_the_truth_s_membership(self, tmp_path: Path) -> None:
        """The simulate role's retained job documents decode (a JobBook refuses none) and name exactly the
        UltraServers the truth gives each job; every job ends with an empty retained message, none is left once
        the run stops, and the truth file's rows carry the same jobs."""
        mix = JobMix(median_duration_s=0.2, arrival_every_s=0.02, duration_sigma=0.3)
        sim = Simulator(build_topology("sites=1,ultraservers=6"), publisher_id="sim-jobs", seed=2, tick_s=0.01,
                        ticks=150, encoding="binary", qos=0, batch_nodes=128, truth_file=tmp_path / "truth.jsonl",
                        params=FleetParams(jobs="mix", job_mix=mix))
        client = Recorder()
        publishing = asyncio.create_task(sim.session(client))  # type: ignore[arg-type]
        await asyncio.wait_for(sim.produce(asyncio.Event()), 60)
        publishing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await publishing
        book, documents, ended, held = JobBook(), {}, [], {}
        for topic, payload, qos, retain in client.messages:
            if topic.startswith(JOBS_ROOT + "/"):
                assert (qos, retain) == (1, True)
                assert book.apply(topic, payload) is None
                if payload:
                    documents[topic.removeprefix(JOBS_ROOT + "/")] = book.jobs[topic.removeprefix(JOBS_ROOT + "/")]
                else:
                    ended.append(topic.removeprefix(JOBS_ROOT + "/"))
            elif topic.startswith("rainier/v1/truth/"):
                held.update({j["id"]: [f"u{u}" for u in j["ultraservers"]] for j in json.loads(payload)["jobs"]})
        assert {job_id: doc.ultraservers for job_id, doc in documents.items()} == held
        assert sorted(ended) == sorted(held)
        assert len(held) >= 4
        assert book.jobs == {}
        rows = [json.loads(line) for line in (tmp_path / "truth.jsonl").read_text().splitlines()]
        assert len(rows) == 150
        assert {"id", "ultraservers", "phase", "goodput", "lost_flops", "stall_s", "effective_flops",
                "peak_flops", "chips", "start_s"} == set(rows[0]["jobs"][0])

    async def test_a_stopped_simulator_removes_its_jobs(self) -> None:
        """Stopped by a signal mid-run (the daemon awaits ``drain``), the simulator removes every job document it
        published, and announces none after: the broker keeps no simulated job."""
        sim = Simulator(build_topology("sites=1,ultraservers=3"), publisher_id="sim-jobs", seed=0, tick_s=0.01,
                        ticks=0, encoding="binary", qos=0, batch_nodes=128,
                        jobs=[JobSpec(id="t/a", ultraservers=(0, 2), start_tick=0),
                              JobSpec(id="t/b", ultraservers=(1,), start_tick=20)])
        client = Recorder()
        publishing = asyncio.create_task(sim.session(client))  # type: ignore[arg-type]
        producing = asyncio.create_task(sim.produce(asyncio.Event()))
        await asyncio.sleep(0.6)  # 60 ticks due: job b started at tick 20
        assert sim.ticks_produced > 20
        await sim.drain()
        await asyncio.sleep(0.1)  # ticks still run during a drain: they announce nothing
        for task in (producing, publishing):
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        jobs = [(topic, payload) for topic, payload, _, _ in client.messages if topic.startswith(JOBS_ROOT + "/")]
        assert [(topic, bool(payload)) for topic, payload in jobs] == [
            ("rainier/v1/jobs/t/a", True), ("rainier/v1/jobs/t/b", True),
            ("rainier/v1/jobs/t/a", False), ("rainier/v1/jobs/t/b", False)]


class TestShippedScenario:
    def test_the_demo_jobs_scenario_loads_against_the_demo_fleet(self) -> None:
        """scenarios/demo-jobs.toml: two jobs on the demo fleet's two UltraServers, the second from 60 s to 660 s."""
        path = Path(__file__).parents[3] / "scenarios" / "demo-jobs.toml"
        jobs = load_jobs(path, build_topology("demo"), tick_s=1.0)
        assert [(j.id, j.ultraservers, j.start_tick, j.end_tick < 10**9) for j in jobs] == [
            ("lab/pretrain", (0,), 0, False), ("lab/finetune", (1,), 60, True)]
