"""Which job holds each node: job documents (``rainierd.wire.jobs``) resolved
against the fleet's topology into one frozen ``JobMembership``.

Pure: documents and a topology in, a frozen value out; no I/O, no clock.

Names.  A document names nodes as its scheduler does; ``NameIndex`` turns a
name into a node id, trying in order: the inventory hostname, the instance
id, ``n<id>`` (a present node), its canonical id (``s0/u1/n4``,
docs/ids.md), and, for a fully qualified name
(``ip-10-0-17-8.us-east-2.compute.internal``, as Kubernetes names EKS nodes),
its first label as a hostname.  An UltraServer is its inventory name,
``u<id>`` or its canonical id (``s0/u1``) and stands for its present nodes.  A name that resolves to nothing
is counted in the job's ``unknown_nodes`` (an UltraServer in
``unknown_ultraservers``), never guessed.

Conflicts.  A scheduler never gives one node to two jobs at once, so two
documents claiming a node means one of them is stale (its removal was lost,
or a publisher is wrong).  The job that started later holds the node (ties:
the larger job id, so the result never depends on the order documents
arrived in); the other keeps its remaining nodes and counts the node in
``lost_nodes``.  ``conflicted_nodes`` is how many nodes were claimed twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TypeVar

import numpy as np

from rainierd._types import F64, I32, I64, B
from rainierd.fleet import TRN2, Topology
from rainierd.fleet.ids import parse
from rainierd.wire import JobDocument

NO_JOB: Final = -1


_A = TypeVar("_A", bound=np.ndarray)


def _frozen(array: _A) -> _A:
    array.flags.writeable = False
    return array


def _number(text: str) -> int | None:
    """Return the id ``text`` spells in ASCII digits without a leading zero (as in a topic: ``n07`` is not
    ``n7``), or None."""
    if not text.isascii() or not text.isdigit() or len(text) > 10 or (len(text) > 1 and text[0] == "0"):
        return None
    return int(text)


@dataclass(frozen=True, eq=False)
class NameIndex:
    """Node and UltraServer names of one topology, for resolving documents (build once: ``NameIndex.of``)."""

    n_nodes: int
    node_present: B
    hosts: dict[str, int]  # hostname -> node
    node_hosts: tuple[str | None, ...]  # node -> hostname (empty: none named)
    instances: dict[str, int]  # instance id -> node
    ultraservers: dict[str, int]  # UltraServer name -> id
    nodes_per_ultraserver: int
    topology: Topology | None = None  # to read canonical ids (None: they name nothing)

    @classmethod
    def of(cls, topology: Topology) -> NameIndex:
        """Return the index of ``topology``'s names (inventory names where it has them)."""
        names = topology.names
        return cls(
            n_nodes=topology.n_nodes, node_present=topology.node_present,
            hosts={h: i for i, h in enumerate(names.hostnames) if h is not None}, node_hosts=names.hostnames,
            instances={h: i for i, h in enumerate(names.instance_ids) if h is not None},
            ultraservers={u: i for i, u in enumerate(names.ultraservers)},
            nodes_per_ultraserver=TRN2.nodes_per_ultraserver, topology=topology,
        )

    def _canonical(self, name: str, kind: str) -> int | None:
        """Return the index of the entity of ``kind`` whose canonical id is ``name``, or None."""
        if self.topology is None or "/" not in name:
            return None
        try:
            found_kind, index = parse(self.topology, name)
        except ValueError:
            return None
        return index if found_kind == kind else None

    def node(self, name: str) -> int | None:
        """Return the node ``name`` names (see the module docstring for the order tried), or None."""
        found = self.hosts.get(name)
        if found is None:
            found = self.instances.get(name)
        if found is None and name[:1] == "n" and (node := _number(name[1:])) is not None:
            found = node if node < self.n_nodes and self.node_present[node] else None
        if found is None:
            found = self._canonical(name, "node")
        if found is None and "." in name:
            found = self.hosts.get(name.split(".", 1)[0])
        return found

    def hostname(self, name: str) -> str:
        """Return the inventory's name for the node ``name`` names (its hostname, else ``n<id>``), or ``name``
        itself when it names no node: what an adapter puts in a document."""
        node = self.node(name)
        if node is None:
            return name
        host = self.node_hosts[node] if self.node_hosts else None
        return host if host is not None else f"n{node}"

    def ultraserver_nodes(self, name: str) -> list[int] | None:
        """Return the present nodes of the UltraServer ``name`` names (inventory name or ``u<id>``), or None."""
        us = self.ultraservers.get(name)
        n_us = self.n_nodes // self.nodes_per_ultraserver
        if us is None and name[:1] == "u" and (number := _number(name[1:])) is not None:
            us = number if number < n_us else None
        if us is None:
            us = self._canonical(name, "ultraserver")
        if us is None:
            return None
        first = us * self.nodes_per_ultraserver
        return [n for n in range(first, first + self.nodes_per_ultraserver) if self.node_present[n]]


@dataclass(frozen=True, eq=False)
class JobMembership:
    """The fleet's jobs and where they run, one frozen value; arrays are read-only.

    Jobs are numbered by their id's order (``ids`` is sorted); every per-job
    array is indexed by that number.  ``node_job[n]`` is the job holding node
    ``n``, or ``NO_JOB`` (-1).
    """

    ids: tuple[str, ...]
    names: tuple[str, ...]
    owners: tuple[str, ...]
    schedulers: tuple[str, ...]
    sources: tuple[str, ...]
    start_s: F64
    restarting: B  # its scheduler says it is restarting (the document's ``restarting``)
    node_job: I32
    nodes_held: I64  # nodes each job holds after conflicts
    nodes_claimed: I64  # distinct known nodes its document names (UltraServers expanded)
    lost_nodes: I64  # nodes it named that a later job holds
    unknown_nodes: I64  # node names the topology does not know
    unknown_ultraservers: I64  # UltraServer names the topology does not know
    conflicted_nodes: int  # nodes two or more jobs claim

    @property
    def n_jobs(self) -> int:
        """Return how many jobs there are."""
        return len(self.ids)

    def job_nodes(self, job: int) -> I64:
        """Return the nodes job number ``job`` holds, ascending."""
        return np.flatnonzero(self.node_job == job)

    @classmethod
    def empty(cls, n_nodes: int) -> JobMembership:
        """Return the membership of a fleet with no jobs."""
        return resolve_jobs(NameIndex(n_nodes, np.ones(n_nodes, bool), {}, (), {}, {}, TRN2.nodes_per_ultraserver), ())


def resolve_jobs(index: NameIndex, documents: Iterable[JobDocument]) -> JobMembership:
    """Return the membership the documents describe on the fleet ``index`` names (at most one per job id: the
    last given wins).  Never raises for what a document says: what cannot be resolved is counted."""
    by_id = {doc.id: doc for doc in documents}
    docs = [by_id[job_id] for job_id in sorted(by_id)]
    n_jobs = len(docs)
    claimed: list[I64] = []
    unknown = np.zeros(n_jobs, np.int64)
    unknown_us = np.zeros(n_jobs, np.int64)
    for job, doc in enumerate(docs):
        nodes: list[int] = []
        for name in doc.nodes:
            node = index.node(name)
            if node is None:
                unknown[job] += 1
            else:
                nodes.append(node)
        for name in doc.ultraservers:
            members = index.ultraserver_nodes(name)
            if members is None:
                unknown_us[job] += 1
            else:
                nodes.extend(members)
        claimed.append(np.unique(np.asarray(nodes, np.int64)))
    nodes_claimed = np.array([c.size for c in claimed], np.int64)
    node_job = np.full(index.n_nodes, NO_JOB, np.int32)
    conflicted = 0
    if n_jobs:
        all_nodes = np.concatenate(claimed)
        all_jobs = np.repeat(np.arange(n_jobs, dtype=np.int64), nodes_claimed)
        # Rank: the later start wins a node, then the larger id (jobs are numbered in id order).
        start = np.array([doc.start_s for doc in docs], np.float64)
        rank = np.empty(n_jobs, np.int64)
        rank[np.lexsort((np.arange(n_jobs), start))] = np.arange(n_jobs)
        order = np.lexsort((rank[all_jobs], all_nodes))
        sorted_nodes, sorted_jobs = all_nodes[order], all_jobs[order]
        last = np.ones(sorted_nodes.size, bool)
        last[:-1] = sorted_nodes[1:] != sorted_nodes[:-1]
        node_job[sorted_nodes[last]] = sorted_jobs[last]
        first = np.ones(sorted_nodes.size, bool)
        first[1:] = sorted_nodes[1:] != sorted_nodes[:-1]
        conflicted = int(np.count_nonzero(first & ~last))  # a node's first claim is not also its last
    held = np.bincount(node_job[node_job >= 0], minlength=n_jobs).astype(np.int64)
    return JobMembership(
        ids=tuple(doc.id for doc in docs), names=tuple(doc.name for doc in docs),
        owners=tuple(doc.owner for doc in docs), schedulers=tuple(doc.scheduler for doc in docs),
        sources=tuple(doc.source for doc in docs),
        start_s=_frozen(np.array([doc.start_s for doc in docs], np.float64)),
        restarting=_frozen(np.array([doc.restarting for doc in docs], dtype=bool)),
        node_job=_frozen(node_job), nodes_held=_frozen(held), nodes_claimed=_frozen(nodes_claimed),
        lost_nodes=_frozen(nodes_claimed - held), unknown_nodes=_frozen(unknown),
        unknown_ultraservers=_frozen(unknown_us), conflicted_nodes=conflicted,
    )
