"""``rainierd jobs slurm|kubernetes|static``: read a scheduler's view of its
jobs and make the broker's retained job documents say the same.

    squeue --json | rainierd jobs slurm --topology fleet.toml --mqtt-url mqtts://broker:8883
    kubectl get pods -A -o json | rainierd jobs kubernetes --topology fleet.toml …
    kubectl get pods -A -o json --watch | rainierd jobs kubernetes --watch …
    rainierd jobs static jobs.toml --topology fleet.toml …

The broker holds the state, so the command keeps none between runs: it
first reads the retained documents under ``rainier/v1/jobs/#`` (until its
own retained status comes back on a second subscription: Mosquitto sends a
subscription's retained messages in order, so every job document is in by
then; at most ``_SETTLE_S`` on a broker that does not), then publishes
each job whose document changed, and an empty retained message for each
job of its own ``--source`` that is no longer there.  A document of another
source is never removed, and one it refuses is logged and counted, never
believed.  Unreadable scheduler output publishes nothing and exits 1: a
failed ``squeue`` must not read as "every job ended".

The one-shot forms exit 0 once the broker has acknowledged every publish
(QoS 1), 1 if that does not happen within ``_ONE_SHOT_S``.  ``--watch``
reads kubectl's stream until it ends, publishing what changed at most once
every ``_WATCH_PERIOD_S`` (the first time once the stream has been quiet
for that long, so kubectl's initial listing is whole before anything is
removed), re-reads the broker's documents after every reconnect, and
exits 0 once the stream has ended and its last changes are published (1 if
the broker does not take them within ``_ONE_SHOT_S``).
"""

from __future__ import annotations

import asyncio
import codecs
import json
import os
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import aiomqtt
import structlog

from rainierd.core import NameIndex, resolve_jobs
from rainierd.errors import JobError, RainierdError
from rainierd.jobs._config import JobsConfig
from rainierd.jobs.kubernetes import DEFAULT_GROUP_LABELS, PodWatch, kubernetes_jobs
from rainierd.jobs.slurm import slurm_jobs
from rainierd.jobs.static import static_jobs
from rainierd.mqtt import ConnectionState, MqttConfig, supervise
from rainierd.runtime import run_until_stopped
from rainierd.wire import JOBS_FILTER, JobBook, JobDocument, encode_job, job_topic, status_topic

log = structlog.get_logger("rainierd.jobs")

Kind = Literal["slurm", "kubernetes", "static"]

_MAX_INPUT: Final = 1 << 30  # one squeue or kubectl listing; 30,000 pods of kubectl JSON are ~600 MB
_SETTLE_S: Final = 5.0  # how long the retained documents may take to arrive
_ONE_SHOT_S: Final = 60.0
_WATCH_PERIOD_S: Final = 1.0
_LOGGED: Final = 20  # skipped jobs and refused documents logged one by one per run; the rest are counted


class JobSync:
    """What this source has on the broker, and the publishes that make it what the scheduler says."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.owned: dict[str, bytes] = {}  # job id -> payload on the broker, this source's
        self.foreign: dict[str, str] = {}  # job id -> source, of the broker's other sources' jobs
        self.published = 0
        self.removed = 0

    async def read_broker(self, client: aiomqtt.Client, client_id: str) -> JobBook:
        """Return the retained job documents on the broker, and take this source's as owned."""
        book = JobBook()
        sentinel = status_topic(client_id)
        await client.subscribe(JOBS_FILTER, qos=1)
        await client.subscribe(sentinel, qos=1)
        try:
            async with asyncio.timeout(_SETTLE_S):
                async for message in client.messages:
                    topic = message.topic.value
                    if topic == sentinel:
                        break
                    payload = bytes(message.payload) if isinstance(message.payload, bytes | bytearray) else b""
                    error = book.apply(topic, payload)
                    if error is not None and sum(book.rejected.values()) <= _LOGGED:
                        log.warning("job document refused", topic=topic[:200], reason=error.reason,
                                    error=error.detail)
        except TimeoutError:
            log.info("no retained status came back; taking the job documents heard so far", settle_s=_SETTLE_S)
        await client.unsubscribe(sentinel)
        await client.unsubscribe(JOBS_FILTER)
        self.owned = {job_id: book.payloads[job_id] for job_id, doc in book.jobs.items() if doc.source == self.source}
        self.foreign = {job_id: doc.source for job_id, doc in book.jobs.items() if doc.source != self.source}
        if book.rejected:
            log.warning("job documents refused on the broker", **dict(book.rejected))
        return book

    async def publish(self, client: aiomqtt.Client, docs: Sequence[JobDocument]) -> None:
        """Publish the documents that changed and remove this source's jobs not in ``docs``."""
        desired = {doc.id: encode_job(doc) for doc in docs}
        for job_id, payload in desired.items():
            if self.owned.get(job_id) == payload:
                continue
            if job_id in self.foreign:  # one topic a job: the last publisher's document stands
                log.warning("job id taken over from another source", job=job_id, source=self.foreign.pop(job_id))
            await client.publish(job_topic(job_id), payload, qos=1, retain=True)
            self.owned[job_id] = payload
            self.published += 1
        for job_id in sorted(self.owned.keys() - desired.keys()):
            await client.publish(job_topic(job_id), b"", qos=1, retain=True)  # MQTT's removal of a retained message
            del self.owned[job_id]
            self.removed += 1
            log.info("job ended", job=job_id)


def _read_input(path: Path | None) -> Any:
    """Return the JSON of the scheduler's output (stdin when ``path`` is None); raise JobError if it is none."""
    try:
        if path is None:
            raw = sys.stdin.buffer.read(_MAX_INPUT + 1)
        else:
            with path.open("rb") as file:
                raw = file.read(_MAX_INPUT + 1)
    except OSError as exc:
        raise JobError("bad_input", f"{path or 'stdin'}: {exc.strerror or exc}") from None
    if len(raw) > _MAX_INPUT:
        raise JobError("bad_input", f"more than {_MAX_INPUT:,} bytes of input")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise JobError("bad_input", f"not JSON: {str(exc)[:200]}") from None


def _report(docs: Sequence[JobDocument], skipped: Sequence[JobError], index: NameIndex) -> None:
    """Log what the scheduler's output became: each skipped job, each job with nodes the fleet does not know."""
    for error in skipped[:_LOGGED]:
        log.warning("job skipped", reason=error.reason, error=error.detail)
    membership = resolve_jobs(index, docs)
    for job, job_id in enumerate(membership.ids):
        if membership.unknown_nodes[job] or membership.unknown_ultraservers[job]:
            log.warning("job names nodes the inventory does not know", job=job_id,
                        unknown_nodes=int(membership.unknown_nodes[job]),
                        unknown_ultraservers=int(membership.unknown_ultraservers[job]))
    log.info("jobs read", jobs=len(docs), skipped=len(skipped), nodes_in_jobs=int((membership.node_job >= 0).sum()),
             conflicted_nodes=membership.conflicted_nodes)


@dataclass
class _Watch:
    """A kubectl watch stream's pods, and whether they changed since the last publish."""

    pods: PodWatch
    version: int = 0
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


async def _read_watch(watch: _Watch, path: Path | None) -> None:
    """Feed kubectl's watch stream (stdin, or ``path``) to ``watch`` until it ends."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    read: Callable[[], Any]
    if path is None and not stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode):
        # A pipe: read on the loop, so a stop never waits on a thread blocked in read().
        reader = asyncio.StreamReader(limit=1 << 20)
        await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
        read = lambda: reader.read(1 << 16)  # noqa: E731
    else:
        # A regular file (--input, or stdin redirected from one): the loop cannot watch it, and it never
        # blocks for long, so a worker thread reads it.
        file = path.open("rb") if path is not None else sys.stdin.buffer
        read = lambda: asyncio.to_thread(file.read, 1 << 16)  # noqa: E731
    while chunk := await read():
        if watch.pods.feed(decoder.decode(chunk)):
            watch.version += 1
            watch.changed.set()
    if watch.pods.feed(decoder.decode(b"", final=True)):
        watch.version += 1
    log.info("kubectl watch stream ended", objects=watch.pods.objects, skipped=watch.pods.skipped)
    watch.ended.set()
    watch.changed.set()


async def run_jobs(jobs: JobsConfig, *, kind: Kind, input_path: Path | None = None, watch: bool = False,
                   labels: Sequence[str] = DEFAULT_GROUP_LABELS) -> None:
    """Make the broker's job documents of this source what the scheduler says; see the module docstring.

    ``input_path`` is the static jobs file for ``static``, else the
    scheduler's output (None: stdin).  Raises ConfigError for a bad jobs
    file, JobError for unreadable scheduler output, RainierdError when the
    broker does not take the documents in time.
    """
    index, source, config = jobs.index, jobs.source, jobs.mqtt
    sync = JobSync(source)
    stop = asyncio.Event()
    if watch:
        await _run_watch(config, sync, index, labels=labels, input_path=input_path, stop=stop)
        return
    if kind == "static":
        if input_path is None:
            raise JobError("bad_input", "rainierd jobs static needs a jobs file")
        docs, skipped = static_jobs(input_path, source=source, index=index), list[JobError]()
    elif kind == "slurm":
        docs, skipped = slurm_jobs(_read_input(input_path), source=source, index=index)
    else:
        docs, skipped = kubernetes_jobs(_read_input(input_path), source=source, index=index, labels=labels)
    _report(docs, skipped, index)

    async def session(client: aiomqtt.Client) -> None:
        await sync.read_broker(client, config.client_id)
        await sync.publish(client, docs)

    async def once() -> None:
        try:
            async with asyncio.timeout(_ONE_SHOT_S):
                await supervise(config, session, state=ConnectionState())
        except TimeoutError:
            raise RainierdError(f"the broker did not take the job documents within {_ONE_SHOT_S:g} s") from None
        log.info("jobs published", source=source, published=sync.published, removed=sync.removed,
                 unchanged=len(docs) - sync.published)
        stop.set()

    await run_until_stopped("jobs", stop, {"jobs-sync": once()}, source=source, broker=config.url)


async def _run_watch(config: MqttConfig, sync: JobSync, index: NameIndex, *, labels: Sequence[str],
                     input_path: Path | None, stop: asyncio.Event) -> None:
    state = _Watch(PodWatch(labels=labels))
    published_version = -1

    async def read() -> None:
        await _read_watch(state, input_path)
        try:  # the stream ended: the last changes have this long to reach the broker
            async with asyncio.timeout(_ONE_SHOT_S):
                await stop.wait()
        except TimeoutError:
            raise RainierdError(f"the broker did not take the last job documents within {_ONE_SHOT_S:g} s "
                                "of the stream's end") from None

    async def publish_changes(client: aiomqtt.Client) -> None:
        nonlocal published_version
        if published_version < 0:  # the first time: let kubectl's initial listing arrive whole
            while not state.ended.is_set():
                state.changed.clear()
                try:
                    async with asyncio.timeout(_WATCH_PERIOD_S):
                        await state.changed.wait()
                except TimeoutError:
                    break
        version = state.version
        docs, skipped = state.pods.documents(source=sync.source, index=index)
        _report(docs, skipped, index)
        await sync.publish(client, docs)
        published_version = version

    async def session(client: aiomqtt.Client) -> None:
        await sync.read_broker(client, config.client_id)  # after every (re)connect: the broker may have changed
        await publish_changes(client)
        while True:
            if published_version == state.version:
                if state.ended.is_set():
                    break
                state.changed.clear()  # no await between the check and the clear: no change is missed
                await state.changed.wait()
                continue
            await asyncio.sleep(_WATCH_PERIOD_S)  # a pace, not a wait for something: changes are batched
            await publish_changes(client)
        log.info("jobs published", source=sync.source, published=sync.published, removed=sync.removed)
        stop.set()

    await run_until_stopped("jobs", stop, {
        "jobs-read-watch": read(),
        "jobs-mqtt-publish": supervise(config, session, state=ConnectionState()),
    }, source=sync.source, broker=config.url, watch=True)
