"""Jobs from a file, for fleets without a scheduler (or with one rainierd
does not read): ``rainierd jobs static jobs.toml`` (or ``jobs.json``, the
same shape)::

    [[job]]
    id = "eval/nightly"                       # one or two levels: the topic's
    name = "nightly evaluation"               # optional (default: the id)
    owner = "ml-eval"
    nodes = ["ip-10-0-17-8", "ip-10-2-1-[8-9]"]  # hostnames, n<id>, hostlist expressions
    ultraservers = ["u0018"]                  # optional: whole UltraServers
    start = 2026-12-01T00:00:00Z              # a TOML datetime, an RFC 3339 string, or Unix seconds

The file is the whole truth for its source: a job taken out of it is
removed from the broker at the next run.  A bad file stops the command
(exit 2) before anything is published.
"""

from __future__ import annotations

import json
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rainierd.core import NameIndex
from rainierd.errors import ConfigError, JobError
from rainierd.jobs.hostlist import expand_hostlist
from rainierd.wire import JOB_VERSION, MAX_JOB_NODES, MAX_JOB_ULTRASERVERS, JobDocument, validation_message

MAX_FILE_BYTES: Final = 64 * 2**20


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: Annotated[str, Field(min_length=1, max_length=128)]
    name: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    owner: Annotated[str, Field(min_length=1, max_length=128)]
    nodes: Annotated[list[Annotated[str, Field(max_length=4096)]], Field(max_length=MAX_JOB_NODES)] = []
    ultraservers: Annotated[list[str], Field(max_length=MAX_JOB_ULTRASERVERS)] = []
    start: datetime | str | int | float


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    job: list[_Entry] = []


def _start_s(value: datetime | str | float) -> float:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"start {value.isoformat()} has no time zone (add Z or +00:00)")
        return value.timestamp()
    return float(value)


def _document(entry: _Entry, *, source: str, index: NameIndex | None) -> JobDocument:
    """Return one entry's document; raise JobError or ValueError (a ValidationError) saying what is wrong."""
    hosts = [h for expression in entry.nodes for h in expand_hostlist(expression, max_hosts=MAX_JOB_NODES)]
    if len(hosts) > MAX_JOB_NODES:
        raise JobError("bad_job", f"{len(hosts):,} nodes, more than {MAX_JOB_NODES:,}")
    if not hosts and not entry.ultraservers:
        raise JobError("bad_job", "holds no node and no UltraServer")
    return JobDocument(
        v=JOB_VERSION, id=entry.id, name=entry.name or entry.id, owner=entry.owner, scheduler="static",
        source=source, nodes=[index.hostname(h) for h in hosts] if index is not None else hosts,
        ultraservers=list(entry.ultraservers), start_s=_start_s(entry.start),
    )


def static_jobs(path: Path, *, source: str, index: NameIndex | None = None) -> list[JobDocument]:
    """Return the jobs of a static jobs file (TOML, or JSON for ``*.json``).

    Raises ConfigError naming the file, the job and what is wrong.
    """
    try:
        raw = path.read_bytes()[: MAX_FILE_BYTES + 1]
    except OSError as exc:
        raise ConfigError(f"jobs file {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"jobs file {path}: more than {MAX_FILE_BYTES:,} bytes")
    try:
        data: Any = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode())
        model = _File.model_validate(data)
    except (ValueError, tomllib.TOMLDecodeError) as exc:  # ValidationError and UnicodeDecodeError are ValueErrors
        if isinstance(exc, ValidationError):
            raise ConfigError(f"jobs file {path}: {validation_message(exc)}") from None
        raise ConfigError(f"jobs file {path}: {exc}") from None
    docs: dict[str, JobDocument] = {}
    for number, entry in enumerate(model.job):
        try:
            doc = _document(entry, source=source, index=index)
        except (JobError, ValueError) as exc:
            detail = (exc.detail if isinstance(exc, JobError)
                      else validation_message(exc) if isinstance(exc, ValidationError) else str(exc))
            raise ConfigError(f"jobs file {path}: job {number} ({entry.id!r}): {detail}") from None
        if doc.id in docs:
            raise ConfigError(f"jobs file {path}: job id {doc.id!r} appears twice")
        docs[doc.id] = doc
    return list(docs.values())
