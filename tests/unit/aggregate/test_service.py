"""Specification of the aggregation tier's pure part and its edges without a
broker: node frames in, batch frames out, every entry's publisher, seq and
sample time kept, every message's fate counted; and the topic layout that
keeps an aggregator's input, its output and a monitor's input apart."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter

import aiomqtt
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paho.mqtt.client import topic_matches_sub
from prometheus_client import CollectorRegistry

from rainierd.aggregate import Aggregator, AggregatorCollector, Batcher, TickResult, batch_name
from rainierd.aggregate._batcher import head_of, said_of
from rainierd.core import FleetState, Ingest, IngestStats, Received
from rainierd.errors import FrameError
from rainierd.fleet.topology import build_topology
from rainierd.mqtt.broker import EmbeddedBroker
from rainierd.mqtt.config import Broker, MqttConfig
from rainierd.mqtt.supervisor import _client
from rainierd.sim.fleet import FleetModel
from rainierd.sim.frames import tick_frames
from rainierd.wire import NodeBatch, NodeFrame, Peek, decode_binary, decode_json, encode_binary, encode_json, peek
from rainierd.wire.topics import Shard, batch_topic, facility_topic, node_filters, node_topic, telemetry_filters
from tests.unit.core.ingest.test_hostile_input import CORPUS, mutate

TOPO = build_topology("sites=2,ultraservers=4")  # 2 sites x 4 UltraServers x 4 nodes: 32 nodes, 8 buckets


def tick(t: int, *, publisher: str = "agent", encode: object = encode_binary) -> list[tuple[str, bytes]]:
    """One tick of the fleet as per-node messages (topic, payload), each node under its own agent's id."""
    model = FleetModel(TOPO, np.random.default_rng(1), tick_s=1.0, start_s=1_000.0)
    for k in range(t):
        model.step(k)
    sample = model.step(t)
    return [(topic, encode(dataclasses.replace(frame, publisher=f"{publisher}-{frame.node}")))  # type: ignore[operator]
            for topic, frame in tick_frames(TOPO, sample, publisher=publisher) if isinstance(frame, NodeFrame)]


def decoded(result: TickResult) -> list[tuple[str, NodeBatch]]:
    out = []
    for batch in result.batches:
        frame = decode_binary(batch.payload)
        assert isinstance(frame, NodeBatch)
        out.append((batch.topic, frame))
    return out


def entries(result: TickResult) -> list[tuple[int, str, int, int, float]]:
    """Every entry of every batch: (node, publisher, seq, tick, t_s)."""
    return [(int(n), p, int(s), int(k), float(t)) for _, b in decoded(result)
            for n, p, s, k, t in zip(b.node, b.entry_publishers(), b.node_seq, b.node_tick, b.node_t_s, strict=True)]


def batcher(**kwargs: object) -> Batcher:
    return Batcher(TOPO, **({"shard": Shard(), "name": "agg-0"} | kwargs))  # type: ignore[arg-type]


class TestBatching:
    def test_each_entry_keeps_its_agents_publisher_seq_tick_and_sample_time(self) -> None:
        """A tick of 32 node frames becomes one batch per site and bucket, holding every frame once with its own
        publisher, seq, tick and t_s."""
        messages = tick(3)
        result = batcher().tick(messages, now_s=2_000.0)
        frames = [decode_binary(p) for _, p in messages]
        want = sorted((f.node, f.publisher, f.seq, f.tick, f.t_s) for f in frames)  # type: ignore[union-attr]
        assert sorted(entries(result)) == want
        assert (result.frames, dict(result.dropped), len(result.batches)) == (32, {}, 8)
        for topic, batch in decoded(result):
            us = batch.node // TOPO.nodes_per_ultraserver
            assert topic == batch_topic(batch.site, int(us[0]) % 256, "agg-0-0")
            assert set((us % 256).tolist()) == {int(us[0]) % 256}  # one bucket a batch
            assert set(TOPO.ultraserver_site[us].tolist()) == {batch.site}

    @pytest.mark.parametrize("encode", [encode_binary, encode_json])
    def test_the_monitor_applies_the_batches_exactly_as_the_frames_alone(self, encode: object) -> None:
        """Two ticks, fed to one monitor core as node frames and to another as the aggregator's batches (binary
        and JSON input), leave the same state and accounting: the same frames applied, none lost, no
        publisher change."""
        alone, batched = Ingest(FleetState(TOPO), IngestStats()), Ingest(FleetState(TOPO), IngestStats())
        agg = batcher()
        for t in range(2):
            messages = tick(t, encode=encode)
            items = [Received(1_000.0 + t, None, (decode_binary if encode is encode_binary else decode_json)(p))
                     for _, p in messages]
            alone.record(alone.apply(items))
            result = agg.tick(messages, now_s=1_000.0 + t)
            batched.record(batched.apply([Received(1_000.0 + t, None, b) for _, b in decoded(result)]))
        for a, b in ((alone.accounting.stats, batched.accounting.stats),):
            assert (a.frames_applied, a.frames_lost, a.publisher_changes) == (b.frames_applied, 0, 0) == (64, 0, 0)
        for kind, table in alone.state.tables().items():
            other = batched.state.tables()[kind]
            for name, values in {**table.gauges, **table.totals}.items():
                mine = other.gauges[name] if name in other.gauges else other.totals[name]
                assert np.array_equal(values, mine, equal_nan=True), (kind, name)

    def test_two_frames_of_a_node_in_one_tick_go_in_two_batches_in_order(self) -> None:
        """A node heard twice in one tick (its agent's clock a little fast) is in two batches, first frame first:
        a batch listing a node twice would be refused by the monitor."""
        first, second = tick(0), tick(1)
        result = batcher().tick([*first, second[0]], now_s=2_000.0)
        node = decode_binary(second[0][1]).node  # type: ignore[union-attr]
        order = [(t, s) for t, b in decoded(result) for n, s in zip(b.node, b.node_seq, strict=True) if n == node]
        assert [s for _, s in order] == [0, 1]
        assert order[0][0] != order[1][0] or len(result.batches) == 9
        assert all(len(set(b.node.tolist())) == b.n_nodes for _, b in decoded(result))

    def test_an_exact_duplicate_is_dropped_and_counted(self) -> None:
        """The same (node, publisher, seq) twice in a tick (a QoS 1 redelivery) is batched once, and counted."""
        messages = tick(0)
        result = batcher().tick([*messages, messages[5]], now_s=2_000.0)
        assert (result.frames, dict(result.dropped)) == (32, {"duplicate": 1})

    def test_a_node_of_another_share_is_refused_and_counted(self) -> None:
        """Shard 0/2 takes the UltraServers of even buckets; the others' frames are dropped as not_in_share."""
        messages = tick(0)
        result = batcher(shard=Shard(0, 2)).tick(messages, now_s=2_000.0)
        assert (result.frames, dict(result.dropped)) == (16, {"not_in_share": 16})
        assert {int(n) // 4 % 2 for n, *_ in entries(result)} == {0}

    def test_every_refusal_has_its_reason(self) -> None:
        """A frame on another node's topic, an unknown node, a payload that does not decode, a batch on a node
        topic and a topic that is not a node's: each dropped, counted once under its reason."""
        (topic, payload), (other, _) = tick(0)[:2]
        batch_payload = encode_binary(decode_binary(batcher().tick(tick(0), now_s=0.0).batches[0].payload))
        result = batcher().tick([
            (other, payload), (node_topic(1, 7, 31 + 4), payload), (topic, payload[:50]),
            (topic, batch_payload), (facility_topic(0), payload), (topic, payload),
        ], now_s=2_000.0)
        assert dict(result.dropped) == {"topic_mismatch": 2, "unknown_node": 1, "malformed": 1, "bad_topic": 1}
        assert (dict(result.decode_errors), result.frames) == ({"truncated": 1}, 1)

    def test_batches_respect_the_node_and_byte_limits(self) -> None:
        """At most max_nodes entries a batch, and no batch over max_frame_bytes."""
        messages = tick(0)
        few = batcher(max_nodes=3).tick(messages, now_s=0.0)
        assert max(b.frames for b in few.batches) == 3
        assert few.frames == 32
        small = batcher(max_frame_bytes=12_000).tick(messages, now_s=0.0)
        assert max(len(b.payload) for b in small.batches) <= 12_000
        assert small.frames == 32

    def test_fields_a_json_agent_leaves_out_stay_unknown(self) -> None:
        """Frames that leave a field out are batched without its column (unknown, not zero); a frame whose
        records disagree on a field is batched without it and counted as narrowed."""
        messages = tick(0, encode=encode_json)
        docs = []
        for topic, payload in messages[:2]:
            frame = decode_json(payload)
            assert isinstance(frame, NodeFrame)
            docs.append((topic, frame))
        known = {"chips": np.full(16, 0b1111111011, np.uint16)}  # clock_ratio left out of every chip
        partial = dataclasses.replace(docs[0][1], known=known)
        mixed = known["chips"].copy()
        mixed[0] = 0b1111111111
        ragged = dataclasses.replace(docs[1][1], known={"chips": mixed})
        result = batcher().tick([(docs[0][0], encode_json(partial)), (docs[1][0], encode_json(ragged))], now_s=0.0)
        assert result.narrowed == 1
        for _, batch in decoded(result):
            assert "clock_ratio" not in batch.columns["chips"]
            assert "util" in batch.columns["chips"]


    def test_binary_and_json_agents_batch_apart_and_keep_their_fields(self) -> None:
        """A binary node frame carries wire v1's records and a JSON one may carry fields added since: batched
        in one tick, neither is read in the other's layout, the JSON agents' added field arrives and the
        binary agents' is not made up."""
        binary = tick(0)
        jsonl = []
        for topic, payload in tick(0, encode=encode_json)[:4]:
            doc = json.loads(payload)
            for chip in doc["chips"]:
                chip["exec_errors_total"] = 7
            jsonl.append((topic, json.dumps(doc).encode()))
        json_nodes = {int(json.loads(p)["node"]) for _, p in jsonl}
        messages = [m for m in binary if int(m[0].rsplit("/n", 1)[1]) not in json_nodes] + jsonl
        result = batcher().tick(messages, now_s=0.0)
        carried: set[int] = set()
        for _, batch in decoded(result):
            if "exec_errors_total" in batch.columns["chips"]:
                assert set(batch.node.tolist()) <= json_nodes
                assert batch.columns["chips"]["exec_errors_total"].tolist() == [7] * int(batch.counts["chips"].sum())
                carried |= set(batch.node.tolist())
            np.testing.assert_array_equal(batch.columns["chips"]["chip"] // 16,
                                          np.repeat(batch.node, batch.counts["chips"]))
        assert carried == json_nodes
        assert result.frames == len(messages)


class TestHeaderReadOnce:
    @given(st.data())
    @settings(max_examples=300, deadline=None)
    def test_the_header_read_for_both_says_what_peek_says(self, data: st.DataObject) -> None:
        """For real frames mangled and for random bytes: what ``head_of`` refuses ``peek`` refuses for the same
        reason, and of a binary node frame it says through ``said_of`` exactly what ``peek`` says; of anything
        else it reads nothing (the admission peeks for itself)."""
        if data.draw(st.booleans()):
            payload = data.draw(st.binary(max_size=512))
        else:
            payload = mutate(CORPUS[data.draw(st.integers(0, len(CORPUS) - 1))][1], data)
        try:
            said: object = peek(payload)
        except FrameError as exc:
            said = exc.reason
        try:
            head = head_of(payload)
        except FrameError as exc:
            read: object = exc.reason
        else:
            read = said_of(head) if head is not None else None
        if read is None:  # not a binary node frame's header: the admission peeks for itself
            assert not said_of_node(said)
        else:
            assert read == said

    def test_the_tick_makes_the_same_batches_with_the_heads_read_on_arrival(self) -> None:
        """Given each message's header as read on arrival, a tick's batches are byte for byte those it makes
        reading the headers itself."""
        messages = tick(2)
        heads = [head_of(p) for _, p in messages]
        alone = batcher().tick(messages, now_s=2_000.0)
        given_heads = batcher().tick(messages, now_s=2_000.0, heads=heads)
        assert [(b.topic, b.payload) for b in given_heads.batches] == [(b.topic, b.payload) for b in alone.batches]


def said_of_node(said: object) -> bool:
    """Return whether ``peek`` read a binary node frame."""
    return isinstance(said, Peek) and said.encoding == "binary" and said.kind == "node"


class TestAggregatorEdges:
    def test_what_it_cannot_hold_is_counted_as_it_arrives(self) -> None:
        """A retained message, an oversize one, a broken one (by its topic, else as malformed with the decoding's
        reason) and one beyond the backlog bound are dropped as they arrive, each under its reason; the rest wait
        for the tick."""
        agg = Aggregator(TOPO, shard=Shard(), name="a", tick_s=1.0, batch_nodes=128, max_frame_bytes=10_000, qos=0)
        agg._max_pending = agg._max_unconfirmed = 2  # before any tick every frame is unconfirmed
        frames = tick(0)
        agg.hear(*frames[0], True)
        agg.hear(frames[0][0], b"x" * 10_001, False)
        agg.hear(frames[0][0], b"RNRW\x09 a version nobody speaks", False)
        agg.hear("t", b"RNRW\x09 on no topic", False)
        for topic, payload in frames[:3]:
            agg.hear(topic, payload, False)
        assert (agg.received, dict(agg.dropped), dict(agg.decode_errors), agg.status.pending) == (
            7, {"retained": 1, "oversize": 1, "malformed": 1, "bad_topic": 1, "backlog_full": 1},
            {"bad_version": 1}, 0)
        assert len(agg._pending) == 2

    async def test_a_tick_accounts_for_every_message_and_metrics_say_so(self) -> None:
        """After a tick, received == batched + dropped, the batches wait in the outbox, and the collector
        exports those counts by reason."""
        agg = Aggregator(TOPO, shard=Shard(0, 2), name="a", tick_s=1.0, batch_nodes=4, max_frame_bytes=1 << 20,
                         qos=0)
        for topic, payload in tick(0):
            agg.hear(topic, payload, False)
        await agg.tick()
        assert (agg.received, agg.batched, dict(agg.dropped), agg.outbox.qsize()) == (
            32, 16, {"not_in_share": 16}, 4)
        registry = CollectorRegistry()
        registry.register(AggregatorCollector(lambda: agg.status))
        sample = registry.get_sample_value
        assert [sample("rainier_aggregator_messages_received_total"),
                sample("rainier_aggregator_frames_batched_total"),
                sample("rainier_aggregator_frames_dropped_total", {"reason": "not_in_share"}),
                sample("rainier_aggregator_frames_dropped_total", {"reason": "outbox_full"}),
                sample("rainier_aggregator_batch_nodes_bucket", {"le": "4"}),
                sample("rainier_aggregator_share_ultraservers")] == [32, 16, 16, 0, 4, 4]

    async def test_frame_age_is_absent_after_a_tick_without_frames(self) -> None:
        """The age quantiles describe the last tick's frames: present after a tick that batched some, absent
        (not NaN) after one that batched none."""
        agg = Aggregator(TOPO, shard=Shard(), name="a", tick_s=1.0, batch_nodes=128, max_frame_bytes=1 << 20, qos=0)
        registry = CollectorRegistry()
        registry.register(AggregatorCollector(lambda: agg.status))

        def ages() -> list[float | None]:
            return [registry.get_sample_value("rainier_aggregator_frame_age_seconds", {"quantile": q})
                    for q in ("0.5", "0.99", "1")]

        for topic, payload in tick(0):
            agg.hear(topic, payload, False)
        await agg.tick()
        assert all(age is not None and age >= 0 for age in ages())
        await agg.tick()
        assert ages() == [None, None, None]

    async def test_a_full_outbox_drops_the_oldest_batches_counting_their_frames(self) -> None:
        """With the broker away the outbox fills; each batch dropped to make room counts its frames as
        outbox_full, so batched == published + dropped + waiting."""
        agg = Aggregator(TOPO, shard=Shard(), name="a", tick_s=1.0, batch_nodes=128, max_frame_bytes=1 << 20, qos=0)
        agg.outbox = type(agg.outbox)(3)
        for t in range(2):
            for topic, payload in tick(t):
                agg.hear(topic, payload, False)
            await agg.tick()
        waiting = sum(b.frames for b in agg.outbox._queue)  # type: ignore[attr-defined]
        assert agg.batched == 64 == agg.dropped["outbox_full"] + waiting

    def test_probes(self) -> None:
        """Ready only while connected; healthy while its ticks advance."""
        agg = Aggregator(TOPO, shard=Shard(), name="a", tick_s=1.0, batch_nodes=128, max_frame_bytes=1 << 20, qos=0)
        assert (agg.ready().ok, agg.healthy().ok) == (False, True)
        agg.connection.connected = True
        assert agg.ready().ok

    def test_batch_names_are_valid_topic_levels(self) -> None:
        """A client id becomes a batch name of the allowed characters."""
        assert [batch_name("rainierd-aggregate-0"), batch_name("agg/0 #+"), batch_name("")] == [
            "rainierd-aggregate-0", "agg_0___", "aggregator"]


class TestShedPerSource:
    """What one node's topic floods costs that topic's share, never another node's frame (issue 35: a junk flood
    on n3's topic filled the tick's list, 168 other frames dropped; a flood of valid n3 frames raised events on
    other nodes behind the aggregator)."""

    @staticmethod
    async def aggregator_after_a_tick() -> Aggregator:
        agg = Aggregator(TOPO, shard=Shard(), name="a", tick_s=1.0, batch_nodes=128, max_frame_bytes=1 << 20, qos=0,
                         monotonic_s=lambda: 0.5)  # one share window throughout, wherever the clock stands
        for topic, payload in tick(0):
            agg.hear(topic, payload, False)
        await agg.tick()
        return agg

    async def test_a_junk_flood_on_one_nodes_topic_costs_the_others_nothing(self) -> None:
        """5,000 junk payloads on node 3's topic (broken headers, replays of its last frame) ahead of the next tick:
        every node's frame of that tick is batched; the junk is dropped as malformed or over node 3's share, but
        for one replay its share let through (the monitor refuses it as stale: the aggregator judges no seq)."""
        agg = await self.aggregator_after_a_tick()
        topic3, replay = tick(0)[3]
        for _ in range(2_500):
            agg.hear(topic3, b"RNRW\x09 junk", False)
            agg.hear(topic3, replay, False)
        for topic, payload in tick(1):
            agg.hear(topic, payload, False)
        await agg.tick()
        assert agg.batched == 2 * TOPO.n_nodes + 1
        assert dict(agg.dropped) == {"malformed": 2_500, "over_share_unconfirmed": 2_500 - 10, "duplicate": 9}
        assert dict(agg.decode_errors) == {"bad_version": 2_500}

    async def test_a_flood_of_one_nodes_valid_frames_is_shed_to_its_share(self) -> None:
        """5,000 valid frames of node 3, seq and sample time rising, ahead of the next tick: every other node's
        frame is batched once; node 3 gets its share's burst (20) and the rest is dropped as over_share."""
        agg = await self.aggregator_after_a_tick()
        topic3, payload3 = tick(1)[3]
        frame3 = decode_binary(payload3)
        assert isinstance(frame3, NodeFrame)
        for k in range(5_000):
            agg.hear(topic3, encode_binary(dataclasses.replace(frame3, seq=frame3.seq + k, t_s=frame3.t_s + k * 1e-4)),
                     False)
        for topic, payload in tick(1):
            if topic != topic3:
                agg.hear(topic, payload, False)
        await agg.tick()
        result = agg._last
        assert result is not None
        nodes = Counter(entry[0] for entry in entries(result))
        assert [nodes[n] for n in range(TOPO.n_nodes) if n != 3] == [1] * (TOPO.n_nodes - 1)
        assert nodes[3] == 20
        assert dict(agg.dropped) == {"over_share": 5_000 - 20}


class TestTopicSpace:
    def test_an_aggregator_hears_node_frames_of_its_share_and_never_a_batch(self) -> None:
        """Its filters (one per UltraServer) match its UltraServers' node topics, no other node's, and no batch
        topic, its own output included."""
        filters = node_filters([1, 300])
        def heard(topic: str) -> bool:
            return any(topic_matches_sub(f, topic) for f in filters)
        assert [heard(node_topic(0, 1, 4)), heard(node_topic(2, 300, 1203)), heard(node_topic(0, 2, 8)),
                heard(batch_topic(0, 1, "agg-0.0")), heard(batch_topic(0, 44, "n1-2"))] == [
            True, True, False, False, False]

    @pytest.mark.parametrize("shard", [Shard(), Shard(1, 4)])
    def test_a_monitor_behind_aggregators_hears_batches_and_facilities_never_node_frames(self, shard: Shard) -> None:
        """With batches only, a monitor's filters match its buckets' batch topics and its sites' facility topics,
        and no node topic: a node's frame is never heard both alone and in a batch."""
        filters = telemetry_filters(shard, n_sites=4, batches_only=True)
        def heard(topic: str) -> bool:
            return any(topic_matches_sub(f, topic) for f in filters)
        ours = [u for u in range(12) if shard.owns_ultraserver(u)]
        assert all(heard(batch_topic(0, u, "agg.0")) for u in ours)
        assert not any(heard(node_topic(0, u, 4 * u)) for u in range(12))
        assert heard(facility_topic(1)) == shard.owns_site_facility(1)
        assert Counter(heard(batch_topic(0, u, "x")) for u in range(256))[True] == len(shard.buckets)


def test_drain_publishes_nothing_without_a_session_but_returns_in_time() -> None:
    """On a stop with no broker the drain batches what it holds and gives up after DRAIN_S, never hangs."""
    agg = Aggregator(TOPO, shard=Shard(), name="a", tick_s=1.0, batch_nodes=128, max_frame_bytes=1 << 20, qos=0)
    for topic, payload in tick(0):
        agg.hear(topic, payload, False)

    async def go() -> None:
        async with asyncio.timeout(3):
            await agg.drain()

    asyncio.run(go())
    assert agg.batched == 32
    assert agg.outbox.qsize() > 0


class TestPublishing:
    @pytest.mark.parametrize("qos", [0, 1])
    async def test_the_batches_waiting_go_out_in_order_and_are_counted_once_written(self, qos: int) -> None:
        """A tick's batches waiting in the outbox are published together (all but the last without waiting, at
        either QoS): a subscriber gets every one, in order, and each is counted published, none unpublished."""
        agg = Aggregator(TOPO, shard=Shard(), name="a", tick_s=1.0, batch_nodes=128, max_frame_bytes=1 << 20, qos=qos)
        for topic, payload in tick(0):
            agg.hear(topic, payload, False)
        await agg.tick()
        waiting = [agg.outbox.get_nowait() for _ in range(agg.outbox.qsize())]
        for batch in waiting:
            agg.outbox.task_done()
            agg.outbox.put_nowait(batch)
        sent = [(b.topic, b.payload) for b in waiting]
        got: list[tuple[str, bytes]] = []
        async with EmbeddedBroker() as broker, aiomqtt.Client("127.0.0.1", broker.port, identifier="sub") as sub:
            await sub.subscribe([(f, qos) for f in telemetry_filters()])
            config = MqttConfig(brokers=(Broker("127.0.0.1", broker.port),), client_id="agg")
            async with _client(config, config.brokers[0]) as client:
                session = asyncio.create_task(agg.session(client))
                async with asyncio.timeout(10):
                    async for message in sub.messages:
                        assert isinstance(message.payload, bytes)
                        got.append((message.topic.value, message.payload))
                        if len(got) == len(sent):
                            break
                    await agg.outbox.join()
                session.cancel()
        assert (got, agg.published_batches, agg.published_frames, agg.dropped["unpublished"]) == (
            sent, len(sent), 32, 0)
