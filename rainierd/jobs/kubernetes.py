"""Kubernetes training jobs, from pod JSON, as job documents.

A job is the pods that share a job label's value in one namespace.  The
labels tried, first present wins (``DEFAULT_GROUP_LABELS``, or
``--group-label`` in your own order):

1. ``jobset.sigs.k8s.io/jobset-name`` — a JobSet.  Its pods also carry the
   ``batch.kubernetes.io/job-name`` of the child Job they belong to (a
   JobSet is made of batch Jobs), so it is tried first: the other way round
   would split one synchronous JobSet into its replicated Jobs.
2. ``training.kubeflow.org/job-name`` — a Kubeflow training job
   (PyTorchJob, MPIJob, …); its pods are not in a batch Job.
3. ``batch.kubernetes.io/job-name`` — a plain batch/v1 Job (an indexed Job).

A job's id is ``<namespace>/<label value>``, its owner the namespace, its
nodes the ``spec.nodeName`` of its Running pods and of Pending pods already
bound to a node (pulling images on it), its start the earliest
``status.startTime`` of those pods (else their ``creationTimestamp``).  A pod
being deleted (``metadata.deletionTimestamp``), finished, or without any of
the labels belongs to no job.  A job is ``restarting`` while any of its pods
is not running all its containers (Pending on its node, or a container
waiting: ``ContainerCreating``, ``CrashLoopBackOff``): a synchronous job
steps only with every member, so it is starting or restarting (the pods of
a JobSet or a PyTorchJob restarted by its failure policy come back this
way); the monitor names its quiet spell ``restarting`` (docs/jobs.md, "Job
phases").

``kubectl get pods -A -o json`` prints a ``List`` (or ``PodList``) of pods:
``kubernetes_jobs``.  ``kubectl get pods -A -o json --watch`` prints one pod
object after another, concatenated, not a list (with
``--output-watch-events``, each wrapped in ``{"type", "object"}``, and a
``DELETED`` event ends the pod): ``PodWatch`` reads that stream piece by
piece and keeps the pods it has heard of.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from rainierd.core import NameIndex
from rainierd.errors import JobError
from rainierd.wire import JOB_VERSION, MAX_JOB_NODES, JobDocument, validation_message

DEFAULT_GROUP_LABELS: Final = (
    "jobset.sigs.k8s.io/jobset-name",
    "training.kubeflow.org/job-name",
    "batch.kubernetes.io/job-name",
)
MAX_POD_BYTES: Final = 16 * 2**20  # one pod object in a watch stream; a real one is 5-50 KB


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """What a pod says about its job: the job's id, name and namespace, the pod's node and start."""

    job_id: str
    job_name: str
    namespace: str
    node: str
    start_s: float
    running: bool = True  # Running, and no container waiting


def _seconds(stamp: Any) -> float | None:
    """Return an RFC 3339 timestamp (``2026-12-01T04:00:00Z``) as Unix seconds, or None."""
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return moment.timestamp() if moment.tzinfo is not None else None


def pod_key(pod: Mapping[str, Any]) -> str:
    """Return a pod's identity in a watch: its uid, else namespace/name."""
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def placement(pod: Any, *, labels: Sequence[str] = DEFAULT_GROUP_LABELS) -> PodPlacement | None:
    """Return where a pod places its job, or None when it holds no node for a job (see the module docstring)."""
    if not isinstance(pod, dict):
        return None
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if not isinstance(meta, dict) or not isinstance(spec, dict) or not isinstance(status, dict):
        return None
    if meta.get("deletionTimestamp"):
        return None
    node, phase = spec.get("nodeName"), status.get("phase")
    if not isinstance(node, str) or not node or phase not in ("Running", "Pending"):
        return None
    pod_labels = meta.get("labels") or {}
    namespace = meta.get("namespace") or "default"
    if not isinstance(pod_labels, dict) or not isinstance(namespace, str):
        return None
    name = next((pod_labels[label] for label in labels if isinstance(pod_labels.get(label), str)), None)
    if not name:
        return None
    start = _seconds(status.get("startTime"))
    if start is None:
        start = _seconds(meta.get("creationTimestamp"))
    return PodPlacement(f"{namespace}/{name}", name, namespace, node, start if start is not None else 0.0,
                        running=phase == "Running" and not _waiting(status))


def _waiting(status: Mapping[str, Any]) -> bool:
    """Return True if any of a pod's containers (init containers included) is waiting."""
    for key in ("initContainerStatuses", "containerStatuses"):
        statuses = status.get(key)
        if not isinstance(statuses, list):
            continue
        for container in statuses:
            state = container.get("state") if isinstance(container, dict) else None
            if isinstance(state, dict) and "waiting" in state:
                return True
    return False


def documents(placements: Iterable[PodPlacement], *, source: str, index: NameIndex | None = None,
              ) -> tuple[list[JobDocument], list[JobError]]:
    """Return one document per job of ``placements``, and the jobs that could not be documents."""
    jobs: dict[str, list[PodPlacement]] = {}
    for place in placements:
        jobs.setdefault(place.job_id, []).append(place)
    docs, skipped = [], []
    for job_id, pods in sorted(jobs.items()):
        hosts = sorted({index.hostname(p.node) if index is not None else p.node for p in pods})
        if len(hosts) > MAX_JOB_NODES:
            skipped.append(JobError("bad_job", f"{job_id}: {len(hosts):,} nodes, more than {MAX_JOB_NODES:,}"))
            continue
        try:
            docs.append(JobDocument(
                v=JOB_VERSION, id=job_id, name=pods[0].job_name, owner=pods[0].namespace, scheduler="kubernetes",
                source=source, nodes=hosts, start_s=min(p.start_s for p in pods),
                restarting=not all(p.running for p in pods),
            ))
        except ValidationError as exc:
            skipped.append(JobError("bad_job", f"{job_id}: {validation_message(exc)}"))
    return docs, skipped


def kubernetes_jobs(pod_list: Any, *, source: str, index: NameIndex | None = None,
                    labels: Sequence[str] = DEFAULT_GROUP_LABELS) -> tuple[list[JobDocument], list[JobError]]:
    """Return the jobs of ``kubectl get pods -A -o json``'s parsed output, and the jobs skipped.

    Raises JobError (``bad_input``) when it is not a list of pods, so a
    failed kubectl never reads as "every job ended".
    """
    if not isinstance(pod_list, dict) or pod_list.get("kind") not in ("List", "PodList") \
            or not isinstance(pod_list.get("items"), list):
        raise JobError("bad_input", "not a pod list (kind List or PodList with items)")
    places = [p for pod in pod_list["items"] if (p := placement(pod, labels=labels)) is not None]
    return documents(places, source=source, index=index)


@dataclass(eq=False)
class PodWatch:
    """The pods a ``kubectl get pods -o json --watch`` stream has told of, fed its bytes as they come.

    ``feed`` takes any chunk of the stream; each complete object in it
    updates the pods.  Text that is not JSON is skipped up to the next line
    that opens an object (kubectl starts each object on a new line), and
    counted in ``skipped``; an object larger than ``MAX_POD_BYTES`` is
    refused the same way, so the buffer stays bounded.
    """

    labels: Sequence[str] = DEFAULT_GROUP_LABELS
    pods: dict[str, PodPlacement] = field(default_factory=dict)
    objects: int = 0
    skipped: int = 0
    _buffer: str = ""
    _decoder: json.JSONDecoder = field(default_factory=json.JSONDecoder)

    def feed(self, chunk: str) -> int:
        """Take the next piece of the stream; return how many objects it completed."""
        self._buffer += chunk
        done = 0
        while True:
            text = self._buffer.lstrip()
            if not text:
                self._buffer = ""
                return done
            if text[0] != "{":
                self._resync(text)
                continue
            if not self._may_end(text):  # parsing a half-arrived object again and again would be quadratic
                if len(text) > MAX_POD_BYTES:
                    self._resync(text)
                    continue
                self._buffer = text
                return done
            try:
                obj, end = self._decoder.raw_decode(text)
            except (ValueError, RecursionError):
                if len(text) > MAX_POD_BYTES or self._complete(text):
                    self._resync(text)
                    continue
                self._buffer = text  # an object still arriving
                return done
            self._buffer = text[end:]
            self._apply(obj)
            done += 1

    @staticmethod
    def _may_end(text: str) -> bool:
        """Return True when an object may be complete: kubectl's pretty objects end with a ``}`` at the start
        of a line, compact ones (one a line) with ``}`` at the end of one."""
        return "\n}" in text or "}\n{" in text or text.rstrip().endswith("}")

    @staticmethod
    def _complete(text: str) -> bool:
        """Return True when a later object has begun, so the unparsable one before it will never complete."""
        return "\n{" in text

    def _resync(self, text: str) -> None:
        """Drop ``text`` up to the next line that opens an object (or all of it), counting one skip."""
        self.skipped += 1
        cut = text.find("\n{", 1)
        self._buffer = text[cut + 1:] if cut >= 0 else ""

    def _apply(self, obj: Any) -> None:
        self.objects += 1
        if not isinstance(obj, dict):
            self.skipped += 1
            return
        if obj.get("kind") in ("List", "PodList") and isinstance(obj.get("items"), list):
            for item in obj["items"]:  # a listing in the stream (kubectl get without --watch, piped in): each pod
                self._apply(item)
            self.objects -= len(obj["items"])
            return
        event = obj.get("type") if isinstance(obj.get("object"), dict) else None
        pod = obj["object"] if event is not None else obj
        key = pod_key(pod)
        place = None if event == "DELETED" else placement(pod, labels=self.labels)
        if place is None:
            self.pods.pop(key, None)
        else:
            self.pods[key] = place

    def documents(self, *, source: str, index: NameIndex | None = None) -> tuple[list[JobDocument],
                                                                                 list[JobError]]:
        """Return the jobs of the pods heard so far."""
        return documents(self.pods.values(), source=source, index=index)
