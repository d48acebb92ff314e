"""The jobs the simulated fleet runs, when it runs jobs: who holds which
UltraServers from when to when, and what phase each job is in at each tick.

Off by default (``FleetParams.jobs`` ``"none"``): the fleet is then the
original fixed groups of ``FleetParams.group_ultraservers``.  With
``"mix"`` a seed-driven mix (``JobMix``) fills the fleet with jobs of
heavy-tailed sizes, one UltraServer to thousands, and keeps it filled as
jobs end; a scenario file's ``[[job]]`` entries (``load_jobs``) give a
fixed list instead.  UltraServers no job holds are idle: unallocated, not
lost.

A job is a synchronous group (``sim/job_training.py`` paces it) whose
phase at a tick is a pure function of its ``JobSpec`` and the tick:

- ``running``: the training step cycle;
- ``checkpoint``: every ``checkpoint_every_ticks`` since the job (re)started,
  ``checkpoint_ticks`` long: every chip near 0, collectives silent;
- ``eval``: every ``eval_every_ticks``, ``eval_ticks`` long: a lower busy
  share and lighter collectives;
- ``restarting``: from each restart tick, ``restart_ticks`` long: the job's
  chips idle, then it resumes (its checkpoint and evaluation cadence start
  again).

Every figure of ``JobMix`` is an assumption and says so; the restart rate
is the Llama 3 interruption rate of docs/calibration.md.  The mix draws
from its own generator, derived from the model's seed without drawing from
it, so turning jobs on changes no other value of a seed's stream.
``JobAnnouncer`` turns the jobs of each tick into the retained documents
of the job contract (docs/jobs.md, ``rainierd.wire.jobs``).
"""

from __future__ import annotations

import tomllib
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from rainierd.errors import ConfigError, JobError
from rainierd.fleet import Topology
from rainierd.sim.sample import TickTruth
from rainierd.wire import JobDocument, encode_job, job_id_of_topic, job_topic

Phase = Literal["running", "checkpoint", "eval", "restarting"]
# Phases in code order (the per-group phase arrays hold these indices).
PHASES: Final[tuple[Phase, ...]] = ("running", "checkpoint", "eval", "restarting")
RUNNING, CHECKPOINT, EVAL, RESTARTING = range(4)
# Phases in which the job steps no training work: counted as its stall seconds, charged to no fault.
STALLS: Final = frozenset({CHECKPOINT, RESTARTING})

_NEVER: Final = 2**62


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """One job: its UltraServers, its window ``[start_tick, end_tick)`` and its phase cadence, in ticks."""

    id: str  # the job contract's id (one or two topic levels)
    ultraservers: tuple[int, ...]
    start_tick: int
    end_tick: int = _NEVER
    checkpoint_every_ticks: int = _NEVER
    checkpoint_ticks: int = 0
    eval_every_ticks: int = _NEVER
    eval_ticks: int = 0
    restart_ticks_at: tuple[int, ...] = ()  # ticks a restart begins, ascending
    restart_ticks: int = 1
    cycle_phase: float = 0.0  # where in its step cycle the job starts, [0, 1)

    def active(self, tick: int) -> bool:
        """Return True if the job holds its UltraServers at ``tick``."""
        return self.start_tick <= tick < self.end_tick

    def phase(self, tick: int) -> int:
        """Return the job's phase index (``PHASES``) at ``tick``, the job active."""
        resumed = self.start_tick
        for at in self.restart_ticks_at:
            if at > tick:
                break
            if tick < at + self.restart_ticks:
                return RESTARTING
            resumed = at + self.restart_ticks
        since = tick - resumed
        if since >= self.checkpoint_every_ticks and since % self.checkpoint_every_ticks < self.checkpoint_ticks:
            return CHECKPOINT
        if since >= self.eval_every_ticks and since % self.eval_every_ticks < self.eval_ticks:
            return EVAL
        return RUNNING


@dataclass(frozen=True, slots=True, kw_only=True)
class JobMix:
    """How a seed-driven job mix is drawn; every figure is an assumption unless it cites one."""

    target_allocated: float = 0.85  # share of UltraServers the mix keeps allocated; the rest idle
    flagship_share: float = 0.5  # the first job holds this share of the fleet (Rainier runs one huge job)
    size_alpha: float = 1.0  # other sizes: P(size >= k) = k ** -alpha, 1 to the free UltraServers
    arrival_every_s: float = 600.0  # mean time between arrivals while below the target
    median_duration_s: float = 6 * 3600.0  # lognormal job length
    duration_sigma: float = 1.0
    checkpoint_every_s: tuple[float, float] = (1_200.0, 3_600.0)  # uniform, per job
    checkpoint_s: tuple[float, float] = (20.0, 90.0)  # tens of seconds
    eval_every_s: tuple[float, float] = (7_200.0, 21_600.0)
    eval_s: tuple[float, float] = (180.0, 600.0)
    # Llama 3 (docs/calibration.md): 4.7e-4 interruptions per accelerator-day, 0.03 per 64-chip UltraServer-day.
    restarts_per_us_day: float = 0.03
    restart_s: tuple[float, float] = (120.0, 600.0)  # stall, then resume from the last checkpoint
    eval_busy_share: float = 0.35  # busy share of a chip in evaluation (no backward pass)
    eval_step_s: float = 2.0  # evaluation's step cycle
    eval_comm_share: float = 0.3  # collective traffic in evaluation, relative to training's

    def target_ultraservers(self, n_ultraservers: int) -> int:
        """Return how many of a fleet's ``n_ultraservers`` the mix keeps allocated (the rest idle)."""
        return int(np.ceil(self.target_allocated * n_ultraservers))


def _ticks(seconds: float, tick_s: float) -> int:
    return max(1, round(seconds / tick_s))


@dataclass(eq=False)
class JobSchedule:
    """The jobs of a run: a fixed list, or a mix drawn as it goes; which are active at each tick."""

    topology: Topology
    tick_s: float
    rng: np.random.Generator
    mix: JobMix | None = None
    jobs: list[JobSpec] = field(default_factory=list)
    _drawn: int = field(default=0, init=False)  # jobs the mix has started: the next one's number
    _last_tick: int = field(default=-1, init=False)  # the last tick the mix drew for

    def active(self, tick: int) -> list[JobSpec]:
        """Return the jobs active at ``tick`` (the mix draws new ones first), in the order listed or drawn."""
        if self.mix is not None:
            while self._last_tick < tick:  # one draw per tick, whichever ticks a caller asks for
                self._last_tick += 1
                self._draw(self._last_tick)
            self.jobs = [j for j in self.jobs if j.end_tick > tick]  # ended jobs never come back
        return [j for j in self.jobs if j.active(tick)]

    def _draw(self, tick: int) -> None:
        m, n_us = self.mix, self.topology.n_ultraservers
        assert m is not None
        taken = np.zeros(n_us, dtype=bool)
        for job in self.jobs:
            if job.active(tick):
                taken[list(job.ultraservers)] = True
        target = m.target_ultraservers(n_us)
        if tick == 0:  # the fleet starts full: a flagship, then the heavy-tailed rest
            first = True
            while (room := target - int(taken.sum())) > 0:
                self._start(tick, taken, max(1, round(m.flagship_share * n_us)) if first else None, room)
                first = False
        elif taken.sum() < target and self.rng.random() < min(1.0, self.tick_s / m.arrival_every_s):
            self._start(tick, taken, None, n_us)

    def fill(self, n_jobs: int) -> list[JobSpec]:
        """Start exactly ``n_jobs`` jobs at tick 0, drawn as the mix fills a fleet, and return them.

        The first is the flagship (``flagship_share`` of the fleet), the rest
        heavy-tailed, each leaving an UltraServer for every job still to
        start: so with many jobs the late ones hold one UltraServer each.
        Together they hold at most the mix's target share; the rest is idle.
        For the benchmarks, which need a given number of jobs; a running
        simulation's mix draws its own count (``active``).  Raises ValueError
        without a mix, or when fewer UltraServers than ``n_jobs`` are in the
        target share.
        """
        if self.mix is None:
            raise ValueError("fill needs a job mix")
        target = self.mix.target_ultraservers(self.topology.n_ultraservers)
        if n_jobs > target:
            raise ValueError(f"{n_jobs} jobs of at least one UltraServer each do not fit in the "
                             f"{target} UltraServers the mix allocates of {self.topology.name}")
        taken = np.zeros(self.topology.n_ultraservers, dtype=bool)
        flagship = max(1, round(self.mix.flagship_share * self.topology.n_ultraservers))
        started = len(self.jobs)
        for left in range(n_jobs - 1, -1, -1):  # ``left``: jobs still to start after this one
            first = len(self.jobs) == started
            self._start(0, taken, flagship if first else None, target - int(taken.sum()) - left)
        self._last_tick = max(self._last_tick, 0)  # tick 0 is drawn: ``active`` adds no second fill
        return self.jobs[started:]

    def _start(self, tick: int, taken: npt.NDArray[np.bool_], size: int | None, cap: int) -> None:
        """Start a job of ``size`` (None: drawn) UltraServers, at most ``cap`` and the free ones, chosen at random."""
        m, rng, dt = self.mix, self.rng, self.tick_s
        assert m is not None
        free = np.flatnonzero(~taken)
        if size is None:
            size = int(min(np.floor(rng.random() ** (-1.0 / m.size_alpha)) if m.size_alpha > 0 else 1, 1e9))
        size = min(size, free.size, cap)
        us = np.sort(rng.choice(free, size=size, replace=False))
        taken[us] = True
        length = _ticks(m.median_duration_s * float(np.exp(m.duration_sigma * rng.standard_normal())), dt)
        restarts = int(rng.poisson(m.restarts_per_us_day * size * length * dt / 86_400.0))
        self.jobs.append(JobSpec(
            id=f"sim/j{self._drawn:06d}", ultraservers=tuple(int(u) for u in us),
            start_tick=tick, end_tick=tick + length,
            checkpoint_every_ticks=_ticks(rng.uniform(*m.checkpoint_every_s), dt),
            checkpoint_ticks=_ticks(rng.uniform(*m.checkpoint_s), dt),
            eval_every_ticks=_ticks(rng.uniform(*m.eval_every_s), dt),
            eval_ticks=_ticks(rng.uniform(*m.eval_s), dt),
            restart_ticks_at=tuple(sorted(tick + 1 + int(t) for t in rng.integers(max(1, length - 1), size=restarts))),
            restart_ticks=_ticks(rng.uniform(*m.restart_s), dt),
            cycle_phase=float(rng.random()),
        ))
        self._drawn += 1


_JOB_KEYS: Final = ("id", "ultraservers", "at_s", "for_s", "checkpoint_every_s", "checkpoint_s", "eval_every_s",
                    "eval_s", "restart_at_s", "restart_s")


def load_jobs(path: Path, topo: Topology, *, tick_s: float) -> list[JobSpec]:
    """Return the ``[[job]]`` entries of a TOML scenario file (docs/scenarios.md, "Jobs").

    Raises ConfigError naming the file, the job and what is wrong (an unknown
    UltraServer, one held by two jobs at once, a bad id).
    """
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"scenario {path}: {exc}") from None
    jobs: list[JobSpec] = []
    for i, entry in enumerate(document.get("job", [])):
        where = f"scenario {path}, job {i + 1}"
        if unknown := sorted(set(entry) - set(_JOB_KEYS)):  # a misspelt key would be a default, silently
            raise ConfigError(f"{where}: unknown key {unknown[0]!r}; a job takes {', '.join(_JOB_KEYS)}")
        try:
            job_id = str(entry["id"])
            job_topic(job_id)
            us = tuple(int(u) for u in entry["ultraservers"])
            if not us or not all(0 <= u < topo.n_ultraservers for u in us) or len(set(us)) != len(us):
                raise ConfigError(f"{where}: ultraservers must be distinct ids of topology {topo.name}")
            start = round(float(entry.get("at_s", 0.0)) / tick_s)
            end = start + _ticks(float(entry["for_s"]), tick_s) if "for_s" in entry else _NEVER
            spec = JobSpec(
                id=job_id, ultraservers=tuple(sorted(us)), start_tick=start, end_tick=end,
                checkpoint_every_ticks=_ticks(float(entry.get("checkpoint_every_s", _NEVER)), tick_s),
                checkpoint_ticks=_ticks(float(entry.get("checkpoint_s", 30.0)), tick_s),
                eval_every_ticks=_ticks(float(entry.get("eval_every_s", _NEVER)), tick_s),
                eval_ticks=_ticks(float(entry.get("eval_s", 300.0)), tick_s),
                restart_ticks_at=tuple(sorted(start + round(float(s) / tick_s)
                                              for s in entry.get("restart_at_s", []))),
                restart_ticks=_ticks(float(entry.get("restart_s", 120.0)), tick_s),
            )
        except KeyError as exc:
            raise ConfigError(f"{where}: missing {exc.args[0]!r}") from None
        except (ValueError, TypeError, JobError) as exc:  # JobError: the id is not a job id
            raise ConfigError(f"{where}: {exc}") from None
        for other in jobs:
            overlap = set(other.ultraservers) & set(spec.ultraservers)
            if overlap and spec.start_tick < other.end_tick and other.start_tick < spec.end_tick:
                raise ConfigError(f"{where}: UltraServer {min(overlap)} is also {other.id!r}'s at the same time")
        jobs.append(spec)
    return jobs


@dataclass(eq=False)
class JobAnnouncer:
    """Which job documents a simulator has published: the messages that bring the broker up to the jobs of a tick.

    A job that starts gets its retained document; a job that ends, an empty
    retained message (the contract's removal).  A restart keeps the job's
    nodes: its document says ``restarting`` until it resumes, as a
    scheduler that relaunches a job would.
    """

    source: str
    published: dict[str, tuple[tuple[int, ...], bool]] = field(default_factory=dict)
    # Job messages whose publish failed (the connection lost under them), taken by the next ``changes``;
    # all on the event loop.
    undelivered: deque[str] = field(default_factory=deque)

    def document(
        self, job_id: str, ultraservers: Sequence[int], start_s: float, *, restarting: bool = False,
    ) -> JobDocument:
        """Return the contract document of a simulated job."""
        return JobDocument(v=1, id=job_id, name=job_id.rpartition("/")[2], owner="sim", scheduler="other",
                           source=self.source, ultraservers=[f"u{u}" for u in ultraservers], start_s=start_s,
                           restarting=restarting)

    def changes(
        self, jobs: Iterable[tuple[str, tuple[int, ...], float]], *, restarting: Collection[str] = (),
    ) -> list[tuple[str, bytes]]:
        """Return (topic, payload) of each change: a document for a new or changed job, b"" for an ended one.

        ``jobs`` are the active jobs as (id, UltraServers, start in Unix seconds); ``restarting`` the ids of
        those restarting now.
        """
        now = {job_id: ((us, job_id in restarting), start_s) for job_id, us, start_s in jobs}
        while self.undelivered:  # sent again: a job's document if it still runs, else its removal
            self.published[job_id_of_topic(self.undelivered.popleft())] = ((), False)
        out = [(job_topic(job_id), b"") for job_id in sorted(self.published.keys() - now.keys())]
        for job_id, (held, start_s) in now.items():
            if self.published.get(job_id) != held:
                document = self.document(job_id, held[0], start_s, restarting=held[1])
                out.append((job_topic(job_id), encode_job(document)))
        self.published = {job_id: held for job_id, (held, _) in now.items()}
        return out

    def removals(self) -> list[tuple[str, bytes]]:
        """Return the empty retained message of every job still published (the simulator is stopping)."""
        out = [(job_topic(job_id), b"") for job_id in sorted(self.published)]
        self.published = {}
        return out


def jobs_truth_document(truth: TickTruth) -> dict[str, Any]:
    """Return the per-job rows and the idle capacity of one tick's truth, as plain data ({} without jobs)."""
    if truth.unallocated is None:
        return {}
    return {
        "jobs": [
            {"id": j.id, "ultraservers": list(j.ultraservers), "start_s": j.start_s, "phase": j.phase,
             "chips": j.chips, "peak_flops": j.peak_flops, "effective_flops": j.effective_flops,
             "goodput": j.goodput, "lost_flops": j.lost_flops, "stall_s": j.stall_s}
            for j in truth.jobs
        ],
        # Idle capacity: neither a job's nor lost to a fault.
        "unallocated": {"ultraservers": list(truth.unallocated), "chips": truth.unallocated_chips,
                        "peak_flops": truth.unallocated_peak_flops},
    }
