"""The job contract: which training job holds which nodes, as one retained
JSON document a job on ``rainier/v1/jobs/<job id>``.

A scheduler adapter (``rainierd jobs slurm|kubernetes|static``, or your own)
publishes a document, retained, when a job starts or changes, and an empty
retained message on the same topic when it ends: MQTT's way of deleting a
retained message.  Whoever subscribes to ``rainier/v1/jobs/#`` later gets the
current set of jobs at once.  docs/jobs.md is the contract in prose;
``docs/jobs.schema.json`` is generated from ``JobDocument`` (``rainierd
schema --jobs``) and a test keeps it in step.

Every document is read as a hostile publisher might have written it: at
most ``MAX_JOB_BYTES`` before parsing, no duplicate keys, no nesting deeper
than the model, strict types (``"12"`` is not a number), every string and
list bounded, so one document costs at most a few megabytes to refuse.
``decode_job`` raises ``JobError`` with a short ``reason`` (a metric label
value); ``JobBook`` keeps the documents heard, counts what it refused by
reason, and never raises.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from rainierd.errors import JobError

JOB_VERSION: Final = 1
JOBS_ROOT: Final = "rainier/v1/jobs"
JOBS_FILTER: Final = f"{JOBS_ROOT}/#"

# The shipped Mosquitto refuses packets over 1 MiB + 4 KiB (deploy/mosquitto/mosquitto.conf): a document fits
# under it.  A whole Rainier fleet (31,200 nodes, hostnames like ip-10-0-17-8) is about 560 KB as a node list,
# and 7,800 UltraServer names about 70 KB.
MAX_JOB_BYTES: Final = 1_048_576
MAX_JOB_NODES: Final = 65_536
MAX_JOB_ULTRASERVERS: Final = 16_384

# A job id is one or two topic levels (Kubernetes: namespace/name; Slurm: cluster/job id).  No MQTT wildcard
# (+ #), no empty level, nothing to escape in a log line or a label value.  Kubernetes namespaces and label
# values are at most 63 characters, so namespace/name fits in 128.
_ID_PART: Final = r"[A-Za-z0-9][A-Za-z0-9._:@=-]*"
JOB_ID_PATTERN: Final = rf"^{_ID_PART}(/{_ID_PART})?$"
_JOB_ID_RE: Final = re.compile(JOB_ID_PATTERN, re.ASCII)
# A node or UltraServer name: an inventory hostname, instance id or UltraServer name (rainierd/fleet/inventory.py's
# names), n<id> / u<id>, a canonical id (s0/u1/n4, s0/u1: docs/ids.md), or a scheduler's fully qualified host
# name (253 characters at most in DNS).
_HOST_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"

JobId = Annotated[str, Field(min_length=1, max_length=128, pattern=JOB_ID_PATTERN)]
HostName = Annotated[str, Field(min_length=1, max_length=253, pattern=_HOST_PATTERN)]
Text = Annotated[str, Field(min_length=1, max_length=256)]
Label = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@/=-]*$")]
Scheduler = Literal["slurm", "kubernetes", "static", "other"]

# Why a document was refused: the values of a rejection counter's ``reason`` label.
JOB_REJECT_REASONS: Final = ("bad_topic", "oversize", "malformed", "schema", "topic_mismatch", "too_many_jobs")


def _json_integer(value: object) -> object:
    """Refuse anything but a JSON integer (a Literal of ints takes true: it equals 1 in Python)."""
    if type(value) is not int:
        raise ValueError(f"{value!r} is not an integer")
    return value


class JobDocument(BaseModel):
    """One job as its scheduler sees it: who, where, since when.

    ``nodes`` and ``ultraservers`` together are what the job holds (either
    may be empty, not both); a name the fleet's inventory does not know is
    kept and counted unknown when the document is resolved
    (``rainierd.core.jobs``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    v: Annotated[Literal[1], BeforeValidator(_json_integer)] = Field(description="contract version")
    id: JobId = Field(description="the job's id, also the topic's last level(s): rainier/v1/jobs/<id>")
    name: Text = Field(description="display name (Slurm job name, Kubernetes job name, ...)")
    owner: Label = Field(description="who the job belongs to: a user, or a Kubernetes namespace")
    scheduler: Scheduler = Field(description="where the job comes from")
    source: Label = Field(
        description="the publisher that owns this document (an adapter instance); a publisher removes only "
                    "documents of its own source")
    nodes: Annotated[list[HostName], Field(max_length=MAX_JOB_NODES)] = Field(
        default_factory=list, description="nodes the job holds: inventory hostnames, instance ids, n<id>, ids "
                                          "(s0/u1/n4), or a fully qualified name whose first label is an inventory "
                                          "hostname")
    ultraservers: Annotated[list[HostName], Field(max_length=MAX_JOB_ULTRASERVERS)] = Field(
        default_factory=list, description="whole UltraServers the job holds: inventory names, u<id> or ids (s0/u1)")
    start_s: Annotated[float, Field(ge=0.0, le=2**40, allow_inf_nan=False)] = Field(
        description="when the job started, Unix seconds")
    restarting: bool = Field(
        default=False, description="true while the scheduler restarts the job (it still holds its nodes): the "
                                   "monitor names the job's quiet spell 'restarting', not a checkpoint or a stall; "
                                   "left out when false")


def job_topic(job_id: str) -> str:
    """Return the topic of job ``job_id``; raise JobError (``bad_topic``) if the id is not a valid job id."""
    if len(job_id) > 128 or not _JOB_ID_RE.fullmatch(job_id):
        raise JobError("bad_topic", f"{job_id[:140]!r} is not a job id")
    return f"{JOBS_ROOT}/{job_id}"


def job_id_of_topic(topic: str) -> str:
    """Return the job id a topic under ``rainier/v1/jobs/`` names; raise JobError (``bad_topic``) otherwise."""
    prefix = JOBS_ROOT + "/"
    job_id = topic[len(prefix):] if topic.startswith(prefix) else ""
    if not job_id or len(job_id) > 128 or not _JOB_ID_RE.fullmatch(job_id):
        raise JobError("bad_topic", f"{topic[:200]!r} is not a job topic")
    return job_id


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key appears twice in one object")
    return out


def validation_message(exc: ValidationError) -> str:
    """Return ``where: what`` of a validation error's first complaint, one line."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "document"
    return f"{where}: {first['msg'].removeprefix('Value error, ')}"[:300]


def decode_job(topic: str, payload: bytes) -> JobDocument | None:
    """Return the document a retained message carries, or None for an empty one (the job's removal).

    Raises JobError naming the reason: ``bad_topic`` (not a job topic),
    ``oversize`` (more than ``MAX_JOB_BYTES``), ``malformed`` (not a JSON
    object, duplicate keys, nested too deep), ``schema`` (not a valid
    document), ``topic_mismatch`` (its ``id`` is not its topic's).
    """
    job_id = job_id_of_topic(topic)
    if not payload:
        return None
    if len(payload) > MAX_JOB_BYTES:
        raise JobError("oversize", f"{len(payload):,} bytes, more than {MAX_JOB_BYTES:,}")
    try:
        document = json.loads(payload, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise JobError("malformed", str(exc)[:200]) from None
    if not isinstance(document, dict):
        raise JobError("malformed", "a job document is a JSON object")
    try:
        job = JobDocument.model_validate(document)
    except ValidationError as exc:
        raise JobError("schema", validation_message(exc)) from None
    if not job.nodes and not job.ultraservers:
        raise JobError("schema", "a job holds at least one node or UltraServer")
    if job.id != job_id:
        raise JobError("topic_mismatch", f"document id {job.id!r} on the topic of {job_id!r}")
    return job


def encode_job(job: JobDocument) -> bytes:
    """Return a document's payload: compact JSON, keys in the model's order (equal jobs, equal bytes).

    ``restarting`` is written only when true, so a job that never restarts
    is the same bytes it was before the field existed.
    """
    document = job.model_dump(mode="json")
    if not document["restarting"]:
        del document["restarting"]
    return json.dumps(document, separators=(",", ":"), allow_nan=False).encode()


def jobs_schema() -> dict[str, Any]:
    """Return the JSON Schema of a job document."""
    schema = JobDocument.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"rainierd job document, contract version {JOB_VERSION}"
    # A document holds something: at least one node or one UltraServer (decode_job checks the same).
    schema["anyOf"] = [{"properties": {"nodes": {"minItems": 1}}, "required": ["nodes"]},
                       {"properties": {"ultraservers": {"minItems": 1}}, "required": ["ultraservers"]}]
    return schema


@dataclass(eq=False)
class JobBook:
    """The job documents heard on ``rainier/v1/jobs/#``, by job id, and what was refused, by reason.

    A refused message leaves the job's previous document as it was: a
    publisher's broken update does not end a job.  At most ``max_jobs``
    documents are kept; a new job beyond it is refused (``too_many_jobs``).
    """

    max_jobs: int = 100_000
    jobs: dict[str, JobDocument] = field(default_factory=dict)
    payloads: dict[str, bytes] = field(default_factory=dict)
    rejected: Counter[str] = field(default_factory=Counter)

    def apply(self, topic: str, payload: bytes) -> JobError | None:
        """Take one message: store its document, or forget the job for an empty one.

        Returns the JobError of a refused message (counted here; the caller logs it), else None.
        """
        try:
            job = decode_job(topic, payload)
        except JobError as exc:
            self.rejected[exc.reason] += 1
            return exc
        if job is not None and job.id not in self.jobs and len(self.jobs) >= self.max_jobs:
            self.rejected["too_many_jobs"] += 1
            return JobError("too_many_jobs", f"{job.id!r}: already {self.max_jobs:,} jobs")
        job_id = job_id_of_topic(topic)
        if job is None:
            self.jobs.pop(job_id, None)
            self.payloads.pop(job_id, None)
        else:
            self.jobs[job_id] = job
            self.payloads[job_id] = bytes(payload)
        return None
