"""MQTT topic names under the one versioned root, their parsing, and how a
monitor shard subscribes to its share of them.

Each kind of message has its own fixed level right under the root, so a
subscription to one kind can never match another (as Sparkplug does)::

    rainier/v1/telemetry/s<site>/b<bucket>/u<ultraserver>/n<node>        a node's frames
    rainier/v1/telemetry/s<site>/b<bucket>/batch/<name>                  batch frames of that site's and bucket's nodes
    rainier/v1/telemetry/s<site>/facility                                a site's cooling plant
    rainier/v1/events/<entity>/<id>                                      detections (monitor only)
    rainier/v1/actions/<node>                                            a node's advisory (monitor only)
    rainier/v1/status/<client-id>                                        online/offline (MQTT will)
    rainier/v1/jobs/<job id>                                             a job's retained document (wire/jobs.py)
    rainier/v1/truth/<publisher>                                         simulator ground truth

Ids are the topology's global ids (a node's is the same ``n<node>`` as its
``node`` label on every metric).

Why a bucket level.  A monitor shard (``--shard i/N``) watches a share of
the fleet by UltraServer, so every synchronous group stays whole in one
shard, and it must receive only its share: decoding the rest to throw it
away would make every shard as busy as one monitor.  MQTT wildcards match
whole levels only, so a share has to be spelled out as topic filters.  One
filter per UltraServer would be 7,800 / N filters at ``rainier``; MQTT shared
subscriptions balance message by message and would split an UltraServer.
Instead every UltraServer falls in one of ``BUCKETS`` (256) fixed buckets,
``bucket = ultraserver % 256``, named in its topics, and shard ``i`` of ``N``
owns the buckets ``b`` with ``b % N == i``: ``ceil(256 / N)`` filters
``rainier/v1/telemetry/+/b<b>/#`` whatever the fleet's size (128 for two
shards, 64 for four, 16 for sixteen), shares within one bucket of each other
(at ``rainier``, 7,800 UltraServers: 30 or 31 a bucket; exact when N divides
256), and up to 256 shards.  The modulo spreads every site over every
bucket, so each shard holds a slice of every site and a site-wide fault
loads all shards alike.  The bucket is a pure function of the UltraServer id
(no fleet size in it), so a publisher needs nothing but the id to place a
frame.

An aggregator's batch holds nodes of one site *and one bucket*, so it reaches
exactly one shard.  A site's facility frames go to shard ``site % N``, the
one that exports that site's facility figures (one series per site across
shards; the recording rules need no deduplication).

Bucket-less topics (``…/s<site>/u<us>/n<node>``, ``…/s<site>/batch/<name>``),
the layout before shards, still parse: an unsharded monitor, subscribed to
``rainier/v1/telemetry/#``, hears them as before; a shard never does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

ROOT: Final = "rainier/v1"
TELEMETRY_ROOT: Final = f"{ROOT}/telemetry"
EVENTS_ROOT: Final = f"{ROOT}/events"
ACTIONS_ROOT: Final = f"{ROOT}/actions"
BUCKETS: Final = 256
"""Fixed by the wire format: changing it moves every UltraServer's topics."""

# Matched whole (fullmatch: ``$`` would also match before a trailing newline) and
# ASCII only (``\d`` would take any Unicode digit, and int() reads "n\u0663" as n3):
# a topic that differs by a byte is not the node's topic.  The bucket level is
# optional: bucket-less topics are the layout before shards.  A bucket has no
# leading zero: ``b07`` would parse as bucket 7 yet never match a shard's ``b7``.
_NODE_RE: Final = re.compile(
    r"rainier/v1/telemetry/s(\d{1,6})(?:/b(0|[1-9]\d{0,2}))?/u(\d{1,8})/n(\d{1,10})", re.ASCII)
_FACILITY_RE: Final = re.compile(r"rainier/v1/telemetry/s(\d{1,6})/facility", re.ASCII)
_BATCH_RE: Final = re.compile(
    r"rainier/v1/telemetry/s(\d{1,6})(?:/b(0|[1-9]\d{0,2}))?/batch/[A-Za-z0-9_.-]{1,64}", re.ASCII)
_SHARD_RE: Final = re.compile(r"(\d{1,3})/(\d{1,3})", re.ASCII)

TopicKind = Literal["node", "facility", "batch"]


@dataclass(frozen=True, slots=True)
class TopicAddress:
    """What a telemetry topic names: a node's frames, a site's facility, or a batch of a site's nodes.

    ``bucket`` is -1 for a facility topic and for the bucket-less layout.
    """

    kind: TopicKind
    site: int
    ultraserver: int = -1
    node: int = -1
    bucket: int = -1

    @property
    def is_facility(self) -> bool:
        """Return True for a site facility topic."""
        return self.kind == "facility"


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard ``index`` of ``count``: the UltraServers whose bucket is ``index`` modulo ``count``.

    ``Shard(0, 1)`` is the whole fleet (one monitor, no ``--shard``).
    """

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.count <= BUCKETS:
            raise ValueError(f"a fleet splits into 1 to {BUCKETS} shards, not {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index {self.index} is not in 0..{self.count - 1}")

    @property
    def whole(self) -> bool:
        """Return True for the whole fleet (one shard)."""
        return self.count == 1

    @property
    def buckets(self) -> range:
        """Return the buckets this shard owns."""
        return range(self.index, BUCKETS, self.count)

    def owns_ultraserver(self, ultraserver: int) -> bool:
        """Return True if ``ultraserver``'s frames are this shard's."""
        return bucket_of(ultraserver) % self.count == self.index

    def owns_site_facility(self, site: int) -> bool:
        """Return True if this shard takes ``site``'s facility frames and exports its facility figures."""
        return site % self.count == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


WHOLE_FLEET: Final = Shard()
"""The one shard of an unsharded monitor."""


def parse_shard(text: str) -> Shard:
    """Return the shard ``i/N`` names.

    Raises ValueError, saying what is wrong.
    """
    m = _SHARD_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not i/N (shard i of N, counted from 0)")
    return Shard(int(m[1]), int(m[2]))


def bucket_of(ultraserver: int) -> int:
    """Return the bucket of ``ultraserver``'s topics."""
    return ultraserver % BUCKETS


def node_topic(site: int, ultraserver: int, node: int) -> str:
    """Return the topic a node's frames are published on (global ids)."""
    return f"{TELEMETRY_ROOT}/s{site}/b{bucket_of(ultraserver)}/u{ultraserver}/n{node}"


def facility_topic(site: int) -> str:
    """Return the topic a site's facility frames are published on."""
    return f"{TELEMETRY_ROOT}/s{site}/facility"


def batch_topic(site: int, bucket: int, name: str) -> str:
    """Return the topic a batch of ``site``'s nodes in ``bucket`` is published on by the aggregator ``name``."""
    return f"{TELEMETRY_ROOT}/s{site}/b{bucket}/batch/{name}"


def truth_topic(publisher: str) -> str:
    """Return the topic a simulator publishes its per-tick ground truth on."""
    return f"{ROOT}/truth/{publisher}"


def status_topic(client_id: str) -> str:
    """Return the retained online/offline topic of a client (its MQTT will)."""
    return f"{ROOT}/status/{client_id}"


def telemetry_filters(shard: Shard = WHOLE_FLEET, *, n_sites: int = 0, batches_only: bool = False) -> list[str]:
    """Return the subscription filters for ``shard``'s telemetry (and nothing else).

    The whole fleet is one filter; a shard has one per bucket it owns and one
    per site (of ``n_sites``) whose facility it takes.  ``batches_only``
    (a monitor behind an aggregation tier) leaves node frames out: batch
    topics and facility topics only, so a node's frame is never heard both
    alone and in an aggregator's batch.
    """
    if batches_only:
        if shard.whole:
            return [f"{TELEMETRY_ROOT}/+/+/batch/+", f"{TELEMETRY_ROOT}/+/batch/+", f"{TELEMETRY_ROOT}/+/facility"]
        return [*(f"{TELEMETRY_ROOT}/+/b{b}/batch/+" for b in shard.buckets),
                *(facility_topic(site) for site in range(n_sites) if shard.owns_site_facility(site))]
    if shard.whole:
        return [f"{TELEMETRY_ROOT}/#"]
    return [*(f"{TELEMETRY_ROOT}/+/b{b}/#" for b in shard.buckets),
            *(facility_topic(site) for site in range(n_sites) if shard.owns_site_facility(site))]


def node_filters(ultraservers: Iterable[int]) -> list[str]:
    """Return filters that match the node frames of ``ultraservers`` and nothing else (an aggregator's input).

    One per UltraServer, because a bucket's wildcard (``…/b<b>/+/+``) would
    also match the batch topics of that bucket: an aggregator would hear its
    own output.  The bucket-less layout is not matched (no shard hears it).
    """
    return [f"{TELEMETRY_ROOT}/+/b{bucket_of(u)}/u{u}/+" for u in ultraservers]


def parse_topic(topic: str) -> TopicAddress | None:
    """Return what a telemetry topic addresses, or None if it is not one.

    A node topic whose bucket is not its UltraServer's is not one.
    """
    if m := _NODE_RE.fullmatch(topic):
        ultraserver = int(m[3])
        bucket = -1 if m[2] is None else int(m[2])
        if bucket >= 0 and bucket != bucket_of(ultraserver):
            return None
        return TopicAddress("node", int(m[1]), ultraserver, int(m[4]), bucket)
    if m := _BATCH_RE.fullmatch(topic):
        bucket = -1 if m[2] is None else int(m[2])
        return None if bucket >= BUCKETS else TopicAddress("batch", int(m[1]), bucket=bucket)
    if m := _FACILITY_RE.fullmatch(topic):
        return TopicAddress("facility", int(m[1]))
    return None
