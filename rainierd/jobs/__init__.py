"""Where jobs come from: adapters from a scheduler's own view of its jobs
(Slurm's ``squeue --json``, Kubernetes pods, a static file) to the job
contract, retained documents on ``rainier/v1/jobs/<job id>``
(``rainierd.wire.jobs``; docs/jobs.md).  ``rainierd jobs …`` runs them
(``run.py``, taking its ``JobsConfig``); the modules beside it read their
input and do no I/O.
"""

from __future__ import annotations

from rainierd.jobs._config import JobsConfig
from rainierd.jobs.hostlist import expand_hostlist
from rainierd.jobs.kubernetes import DEFAULT_GROUP_LABELS, PodWatch, kubernetes_jobs
from rainierd.jobs.run import run_jobs
from rainierd.jobs.slurm import slurm_jobs
from rainierd.jobs.static import static_jobs

__all__ = [
    "DEFAULT_GROUP_LABELS",
    "JobsConfig",
    "PodWatch",
    "expand_hostlist",
    "kubernetes_jobs",
    "run_jobs",
    "slurm_jobs",
    "static_jobs",
]
