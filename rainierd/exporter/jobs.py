"""The jobs as metrics: what each training job holds, delivers and loses, to
which cause and to which entity (core/jobmodel.py), and the fleet's capacity
in no job.  docs/metrics.md lists the families; docs/jobs.md, "The monitor
side", says where the figures come from.

Rendered straight to text (as exporter/ultraservers.py and entities.py are):
at rainier with 1,000 jobs these are some 18,000 to 23,000 series, which
prometheus-client would build one Python object each for.

The per-job families have a budget, ``max_jobs`` jobs: beyond it the jobs
losing the most FP8 are kept (the ones worth a look), the rest are counted
in ``rainier_jobs_over_budget`` and logged once.  A shard exports the jobs
holding nodes in its share, each with its share's figures; a whole-fleet
monitor exports every job, one holding no known node included (its figures
0: the names in its document resolved to nothing).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

import numpy as np
import structlog

from rainierd._types import I64
from rainierd.core import PHASE_NAMES, JobLoss, JobMembership, JobPhases
from rainierd.exporter.exposition import family_head
from rainierd.fleet import CAUSES, Topology
from rainierd.fleet.ids import entity_id
from rainierd.monitor import MonitorSnapshot
from rainierd.wire import JOB_REJECT_REASONS

log = structlog.get_logger("rainierd.exporter")

def _escape(value: str) -> str:
    """Return ``value`` as a label value in exposition text (a job's name is its scheduler's free text)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


_ONE_ZERO: Final = ("0.0", "1.0")


def _flags(out: list[str], name: str, labels: list[str], on: np.ndarray) -> None:
    """Append one 0/1 series a label set, the value a constant (no float to convert and format): thousands of
    them at rainier's 1,000 jobs."""
    out.extend(f"{name}{{{b}}} {_ONE_ZERO[flag]}\n" for b, flag in zip(labels, on.tolist(), strict=True))


def exported_jobs(loss: JobLoss, *, whole_fleet: bool, max_jobs: int) -> tuple[I64, int]:
    """Return the job numbers whose series are exported (in id order) and how many more were over budget.

    The candidates are every job on a whole-fleet monitor, else the jobs
    holding a chip in the shard's share; beyond ``max_jobs`` the ones
    losing the most FP8 are kept (ties: the first in id order).
    """
    candidates = np.arange(loss.n_jobs, dtype=np.int64) if whole_fleet else np.flatnonzero(loss.chips > 0)
    if candidates.size <= max_jobs:
        return candidates, 0
    lost = loss.lost_total[candidates]
    keep = candidates[np.lexsort((candidates, -lost))[:max_jobs]]
    return np.sort(keep), int(candidates.size - max_jobs)


class JobFamilies:
    """Renders the job families of the latest snapshot to exposition text."""

    def __init__(
        self, topology: Topology, snapshot: Callable[[], MonitorSnapshot | None], *, max_jobs: int = 1_000,
        whole_fleet: bool = True,
    ) -> None:
        self._topo, self._snapshot, self._max, self._whole = topology, snapshot, max_jobs, whole_fleet
        self._warned = False

    def render(self) -> bytes:
        """Return the families as exposition text (the refusals from the start; the rest once an analysis has
        applied telemetry)."""
        snap = self._snapshot()
        if snap is None:
            return b""
        out: list[str] = []
        refused = snap.status.jobs_refused
        # Text format 0.0.4: HELP and TYPE name the samples, ``_total`` included.
        name = "rainier_job_documents_refused_total"
        out.append(family_head(name, "Job documents refused (rainier/v1/jobs/#), by reason; the job's last good "
                               "document stands.", "counter"))
        out.extend(f'{name}{{reason="{r}"}} {float(refused.get(r, 0))!r}\n' for r in JOB_REJECT_REASONS)
        if snap.computed and snap.jobs is not None and snap.job_loss is not None:
            self._jobs(snap.jobs, snap.job_loss, snap.job_phases, out)
        return "".join(out).encode()

    def _jobs(self, jobs: JobMembership, loss: JobLoss, phases: JobPhases | None, out: list[str]) -> None:
        keep, over = exported_jobs(loss, whole_fleet=self._whole, max_jobs=self._max)
        if over and not self._warned:
            self._warned = True
            log.warning("jobs over the exporter's budget; keeping those losing the most", jobs=loss.n_jobs,
                        max_jobs=self._max, over_budget=over)
        out.append(family_head("rainier_jobs", "Jobs known (retained documents on rainier/v1/jobs/#, the same on "
                               "every shard)."))
        out.append(f"rainier_jobs {float(jobs.n_jobs)!r}\n")
        out.append(family_head("rainier_jobs_exported", "Jobs with per-job series here (at most max_jobs; a shard: "
                               "the jobs holding nodes in its share)."))
        out.append(f"rainier_jobs_exported {float(keep.size)!r}\n")
        out.append(family_head("rainier_jobs_over_budget", "Jobs left without per-job series because more than "
                               "max_jobs had them (those losing the most FP8 are kept)."))
        out.append(f"rainier_jobs_over_budget {float(over)!r}\n")
        out.append(family_head("rainier_fleet_fp8_unallocated_flops", "FP8 peak FLOP/s of present nodes no job "
                               "holds: idle capacity, not a loss."))
        out.append(f"rainier_fleet_fp8_unallocated_flops {loss.unallocated_peak!r}\n")
        ratio = loss.allocated_goodput_ratio
        if not math.isnan(ratio):  # no job delivers or loses anything (no jobs): unknown, so no series
            out.append(family_head("rainier_fleet_allocated_goodput_ratio", "The jobs' FP8 effective over effective "
                                   "plus lost, together."))
            out.append(f"rainier_fleet_allocated_goodput_ratio {ratio!r}\n")
        if keep.size:
            self._per_job(jobs, loss, keep, out)
            if phases is not None and phases.n_jobs == loss.n_jobs:
                self._phases(jobs, phases, keep, out)

    def _per_job(self, jobs: JobMembership, loss: JobLoss, keep: I64, out: list[str]) -> None:
        ids = keep.tolist()
        # A job id is letters, digits and ._:@=-/: nothing to escape. The label is not `job`, Prometheus's own.
        job = [f'training_job="{jobs.ids[j]}"' for j in ids]
        out.append(family_head("rainier_job_info", "A job's names (1), for joins on training_job."))
        out.extend(f'rainier_job_info{{{b},name="{_escape(jobs.names[j])}",owner="{jobs.owners[j]}",'
                   f'scheduler="{jobs.schedulers[j]}"}} 1.0\n' for b, j in zip(job, ids, strict=True))
        for name, text, values in (
            ("rainier_job_chips", "Chips of the job's present nodes.", loss.chips.astype(np.float64)),
            ("rainier_job_fp8_peak_flops", "The job's FP8 dense peak, FLOP/s.", loss.peak),
            ("rainier_job_fp8_effective_flops", "FP8 FLOP/s the job's chips execute.", loss.effective),
            ("rainier_job_goodput_ratio", "The job's FP8 effective over effective plus lost (absent for a job "
             "holding no chip).", loss.goodput_ratio),
            ("rainier_job_slowest_speed", "The pace the job's slowest member allows (1 healthy), floored at 0.05.",
             loss.s_min),
            ("rainier_job_fp8_learned_healthy_flops", "FP8 FLOP/s the job's chips deliver healthy, as learned while "
             "it ran: what a stall is priced against.", loss.healthy_value),
        ):
            out.append(family_head(name, text))
            out.extend(f"{name}{{{b}}} {v!r}\n" for b, v in zip(job, values[keep].tolist(), strict=True)
                       if not math.isnan(v))
        for name, text, flags in (
            ("rainier_job_stalled", "1 while a failed chip or a silent node stalls the whole job.", loss.stalled),
            # The pace terms, so recording rules can price a job spanning shards (docs/jobs.md, "Shards").
            ("rainier_job_member_failed", "1 while a member chip has failed (a stall charged to failed_chip; "
             "else to stale_telemetry).", loss.failed),
            ("rainier_job_slowest_is_straggler", "1 when that member is a straggler (its loss charged to straggler, "
             "else thermal_throttle).", loss.slowest_is_straggler),
        ):
            out.append(family_head(name, text))
            _flags(out, name, job, flags[keep])
        name = "rainier_job_path_fraction"
        out.append(family_head(name, "The bandwidth share the job's slowest path keeps, by path (1 healthy), floored "
                               "at 0.05."))
        for path, values in (("neuronlink", loss.f_nl), ("efa", loss.f_efa)):
            out.extend(f'{name}{{{b},path="{path}"}} {v!r}\n' for b, v in zip(job, values[keep].tolist(), strict=True))
        name = "rainier_job_fp8_lost_flops"
        out.append(family_head(name, "FP8 FLOP/s the job loses, by cause (every cause, 0 included)."))
        for cause in CAUSES:
            values = loss.lost[cause][keep].tolist()
            out.extend(f'{name}{{{b},cause="{cause}"}} {v!r}\n' for b, v in zip(job, values, strict=True))
        name = "rainier_job_culprit_flops"
        out.append(family_head(name, "FP8 FLOP/s one entity costs the job, its costliest first (rank 1-5, only "
                               "non-zero)."))
        # Only the jobs that have a culprit: at rainier most have none, and a call a job is 1,000 calls a render.
        charged = np.flatnonzero((loss.culprit_flops[keep] > 0).any(axis=1)).tolist()
        for b, j in ((job[i], ids[i]) for i in charged):
            for rank, (kind, entity, flops) in enumerate(loss.culprits(j), start=1):
                if flops > 0:
                    out.append(f'{name}{{{b},rank="{rank}",entity="{kind}",'
                               f'id="{entity_id(self._topo, kind, entity)}"}} {flops!r}\n')

    @staticmethod
    def _phases(jobs: JobMembership, phases: JobPhases, keep: I64, out: list[str]) -> None:
        ids = keep.tolist()
        job = [f'training_job="{jobs.ids[j]}"' for j in ids]
        name = "rainier_job_phase"
        out.append(family_head(name, "1 for the job's phase now (running, checkpoint, restarting, stalled), 0 for the "
                               "others: its members quiet together are a phase, not faults (docs/jobs.md)."))
        now = phases.phase[keep]
        for code, phase in enumerate(PHASE_NAMES):
            _flags(out, name, [f'{b},phase="{phase}"' for b in job], now == code)
        for name, text, values, kind in (
            ("rainier_job_phase_seconds", "Seconds the job has been in its phase now.", phases.phase_s, "gauge"),
            ("rainier_job_stall_seconds_total", "Seconds the job spent in checkpoint, restarting or stalled, since "
             "this monitor first heard of it.", phases.stall_s, "counter"),
        ):
            out.append(family_head(name, text, kind))
            out.extend(f"{name}{{{b}}} {v!r}\n" for b, v in zip(job, values[keep].tolist(), strict=True))
