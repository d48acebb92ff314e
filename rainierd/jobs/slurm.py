"""Slurm's running jobs, from ``squeue --json``, as job documents.

``squeue --json`` (Slurm 22.05 and later; the ``data_parser`` plugins of
23.x and 24.x) prints ``{"jobs": [...], "errors": [...], ...}``.  Of each job
this reads ``job_id``, ``name``, ``user_name`` (else ``user_id``),
``cluster``, ``job_state`` (a string in 22.05, a list of flags from 23.02),
``nodes`` (a hostlist expression) and ``start_time`` (an integer, or from
23.11 an object ``{"set": true, "infinite": false, "number": …}``).  Only
RUNNING jobs are documents; a job's id is ``<cluster>/<job_id>`` (an array
task and a heterogeneous job's component each have a job_id of their own).

A job that cannot be read is skipped and reported; output that is not
squeue's (not JSON, no ``jobs`` list, or squeue's own ``errors``) raises,
so a failed squeue never reads as "every job ended".
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from rainierd.core import NameIndex
from rainierd.errors import JobError
from rainierd.jobs.hostlist import expand_hostlist
from rainierd.wire import JOB_VERSION, MAX_JOB_NODES, JobDocument, validation_message


def _number(value: Any) -> int | None:
    """Return an integer field of either form (plain, or ``{"set", "infinite", "number"}``), None if unset."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    return value if type(value) is int else None


def _states(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [state for state in value if isinstance(state, str)]
    return []


def _document(job: dict[str, Any], *, source: str, index: NameIndex | None) -> JobDocument | None:
    """Return the document of one squeue job, or None when it is not running; raise JobError if unreadable."""
    if "RUNNING" not in _states(job.get("job_state")):
        return None
    job_id = job.get("job_id")
    if type(job_id) is not int:
        raise JobError("bad_job", f"job_id {job_id!r} is not an integer")
    cluster = job.get("cluster") or "slurm"
    start = _number(job.get("start_time"))
    if start is None:
        raise JobError("bad_job", f"job {job_id}: no start_time")
    nodes = job.get("nodes")
    if not isinstance(nodes, str):
        raise JobError("bad_job", f"job {job_id}: nodes {str(nodes)[:100]!r} is not a hostlist")
    hosts = expand_hostlist(nodes, max_hosts=MAX_JOB_NODES)
    if not hosts:
        raise JobError("bad_job", f"job {job_id}: running on no node")
    user = job.get("user_name") or (str(job["user_id"]) if type(job.get("user_id")) is int else "unknown")
    try:
        return JobDocument(
            v=JOB_VERSION, id=f"{cluster}/{job_id}", name=(job.get("name") or str(job_id))[:256], owner=user,
            scheduler="slurm", source=source, start_s=float(start),
            nodes=[index.hostname(h) for h in hosts] if index is not None else hosts,
        )
    except ValidationError as exc:  # a name too long, a character a topic cannot hold
        raise JobError("bad_job", f"job {job_id}: {validation_message(exc)}") from None


def slurm_jobs(output: Any, *, source: str, index: NameIndex | None = None) -> tuple[list[JobDocument],
                                                                                   list[JobError]]:
    """Return the running jobs of ``squeue --json``'s parsed output as documents, and the jobs skipped.

    Node names are the inventory's where ``index`` knows them (an unknown
    one is kept as squeue gave it).  Raises JobError (``bad_input``) when
    the output is not squeue's or squeue reported errors.
    """
    if not isinstance(output, dict) or not isinstance(output.get("jobs"), list):
        raise JobError("bad_input", "not squeue --json output (no jobs list)")
    errors = output.get("errors") or []
    if errors:
        raise JobError("bad_input", f"squeue reported errors: {str(errors)[:300]}")
    docs, skipped = [], []
    for job in output["jobs"]:
        if not isinstance(job, dict):
            skipped.append(JobError("bad_job", f"{str(job)[:100]!r} is not a job object"))
            continue
        try:
            doc = _document(job, source=source, index=index)
        except JobError as exc:
            skipped.append(exc)
            continue
        if doc is not None:
            docs.append(doc)
    return docs, skipped
