"""Specification of the job contract (rainier/v1/jobs/<id>: the document, its
schema, what is refused and why) and of resolving documents against the
fleet into one frozen JobMembership (unknown names, conflicts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema  # check-jsonschema's own validator (the test extra)
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rainierd.core.jobs import NO_JOB, JobMembership, NameIndex, resolve_jobs
from rainierd.errors import JobError
from rainierd.fleet.inventory import load_inventory
from rainierd.fleet.topology import build_topology
from rainierd.wire.jobs import (
    JOB_REJECT_REASONS,
    MAX_JOB_BYTES,
    MAX_JOB_NODES,
    JobBook,
    JobDocument,
    decode_job,
    encode_job,
    job_topic,
    jobs_schema,
)

ROOT = Path(__file__).parents[3]
DATA = ROOT / "tests" / "data"
INVENTORY = load_inventory(DATA / "inventory-two-sites.toml")
SAMPLES = sorted(DATA.glob("job-*.json"))


def document(job_id: str = "trn-east/1", **fields: Any) -> dict[str, Any]:
    """A valid document as a JSON object, with ``fields`` changed."""
    base: dict[str, Any] = {"v": 1, "id": job_id, "name": "llm", "owner": "alice", "scheduler": "slurm",
                            "source": "slurm", "nodes": ["ip-10-0-17-8"], "start_s": 1_764_547_200}
    return base | fields


def job(job_id: str, nodes: list[str], start_s: float, ultraservers: list[str] | None = None) -> JobDocument:
    return JobDocument.model_validate(document(job_id, nodes=nodes, ultraservers=ultraservers or [], start_s=start_s))


def reason(topic: str, payload: bytes) -> str:
    with pytest.raises(JobError) as caught:
        decode_job(topic, payload)
    return caught.value.reason


# Documents the schema refuses, each for one reason; the model must refuse every one too.
REFUSED: dict[str, dict[str, Any]] = {
    "an unknown field": document(priority=5),
    "a missing start": {k: v for k, v in document().items() if k != "start_s"},
    "a string for a number": document(start_s="1764547200"),
    "true for the version": document(v=True),
    "version 2": document(v=2),
    "a scheduler nobody knows": document(scheduler="lsf"),
    "a wildcard in the id": document("trn-east/+"),
    "three levels of id": document("a/b/c"),
    "an id of 129 characters": document("j" * 129),
    "a node name with a space": document(nodes=["ip 10"]),
    "a node name of 254 characters": document(nodes=["n" * 254]),
    "a node as a number": document(nodes=[17]),
    "a negative start": document(start_s=-1),
    "no node and no UltraServer": document(nodes=[]),
    "too many nodes": document(nodes=["n1"] * (MAX_JOB_NODES + 1)),
    "an empty display name": document(name=""),
}


class TestSchema:
    def test_the_checked_in_schema_is_current(self) -> None:
        """docs/jobs.schema.json is what `rainierd schema --jobs` generates from the model."""
        assert json.loads((ROOT / "docs" / "jobs.schema.json").read_text()) == jobs_schema()

    def test_the_schema_is_a_valid_draft_2020_12_schema(self) -> None:
        """jsonschema's own meta-schema check passes."""
        jsonschema.Draft202012Validator.check_schema(jobs_schema())

    @pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
    def test_every_sample_document_is_valid_for_the_schema_and_the_model(self, sample: Path) -> None:
        """The shipped samples pass the JSON Schema and decode on their own topic."""
        payload = sample.read_bytes().strip()
        jsonschema.validate(json.loads(payload), jobs_schema())
        doc = json.loads(payload)
        decoded = decode_job(job_topic(doc["id"]), payload)
        assert decoded is not None
        assert decoded.model_dump() == JobDocument.model_validate(doc).model_dump()

    def test_there_are_samples(self) -> None:
        """Three sample documents: Slurm, Kubernetes and UltraServers."""
        assert len(SAMPLES) == 3

    @pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
    def test_what_the_schema_refuses_the_model_refuses(self, case: str) -> None:
        """Each document the JSON Schema finds invalid is refused by decode_job as schema, not believed."""
        doc = REFUSED[case]
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, jobs_schema())
        topic = job_topic(doc["id"]) if isinstance(doc.get("id"), str) and len(doc["id"]) < 129 \
            and "+" not in doc["id"] and doc["id"].count("/") < 2 else "rainier/v1/jobs/trn-east/1"
        assert reason(topic, json.dumps(doc).encode()) in ("schema", "topic_mismatch")


class TestDecode:
    def test_a_document_round_trips(self) -> None:
        """encode_job then decode_job gives the same document; equal documents give equal bytes."""
        doc = job("trn-east/41871", ["ip-10-0-17-8", "ip-10-0-17-9"], 1_764_547_200.0)
        payload = encode_job(doc)
        assert decode_job("rainier/v1/jobs/trn-east/41871", payload) == doc
        assert encode_job(JobDocument.model_validate(json.loads(payload))) == payload

    def test_an_empty_message_is_the_removal(self) -> None:
        """An empty retained message on a job's topic decodes as None: the job ended."""
        assert decode_job("rainier/v1/jobs/training/llama-70b", b"") is None

    def test_refusals_by_reason(self) -> None:
        """Oversize, not JSON, not an object, duplicate keys, deep nesting, a topic of another id, a topic that
        is no job's: each is refused with its own reason."""
        topic = "rainier/v1/jobs/trn-east/1"
        good = json.dumps(document()).encode()
        got = {
            "oversize": reason(topic, b" " * (MAX_JOB_BYTES + 1)),
            "not JSON": reason(topic, b"{nope"),
            "not UTF-8": reason(topic, b'{"v": "\xff"}'),
            "a list": reason(topic, b"[1]"),
            "duplicate key": reason(topic, good[:-1] + b',"v":1}'),
            "deep nesting": reason(topic, b"[" * 200_000 + b"]" * 200_000),
            "other id": reason("rainier/v1/jobs/trn-east/2", good),
            "no job topic": reason("rainier/v1/jobs/", good),
            "a wildcard topic": reason("rainier/v1/jobs/a/b/c", good),
        }
        assert got == {"oversize": "oversize", "not JSON": "malformed", "not UTF-8": "malformed",
                       "a list": "malformed", "duplicate key": "malformed", "deep nesting": "malformed",
                       "other id": "topic_mismatch", "no job topic": "bad_topic", "a wildcard topic": "bad_topic"}
        assert set(got.values()) <= set(JOB_REJECT_REASONS)

    def test_a_job_id_that_is_no_topic_level_is_refused(self) -> None:
        """job_topic refuses an id with a wildcard or an empty level."""
        for bad in ("a/+", "#", "a//b", "", "/a"):
            with pytest.raises(JobError):
                job_topic(bad)


class TestDecodeProperties:
    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=400) | st.builds(lambda d: json.dumps(d).encode(), st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(
            ["v", "id", "name", "owner", "scheduler", "source", "nodes", "ultraservers", "start_s", "x"]), inner,
            max_size=9), max_leaves=30)))
    def test_any_payload_is_a_document_a_removal_or_a_counted_refusal(self, payload: bytes) -> None:
        """Whatever bytes arrive on a job topic, JobBook keeps a valid document, forgets on an empty one, or
        counts a refusal by one of the documented reasons: it never raises."""
        book = JobBook()
        error = book.apply("rainier/v1/jobs/trn-east/1", payload)
        if error is None:
            assert (book.jobs == {}) == (payload == b"")
        else:
            assert error.reason in JOB_REJECT_REASONS
            assert book.jobs == {}


class TestJobBook:
    def test_documents_and_removals_and_refusals_are_kept_apart(self) -> None:
        """A document is kept, an empty message forgets its job, a broken update is counted and leaves the
        job's last document standing."""
        book = JobBook()
        a, b = job("a", ["n1"], 1.0), job("b", ["n2"], 2.0)
        assert book.apply(job_topic("a"), encode_job(a)) is None
        assert book.apply(job_topic("b"), encode_job(b)) is None
        assert book.apply(job_topic("a"), b"") is None
        error = book.apply(job_topic("b"), b"{broken")
        assert error is not None
        assert error.reason == "malformed"
        assert (book.jobs, dict(book.rejected)) == ({"b": b}, {"malformed": 1})

    def test_jobs_beyond_the_bound_are_refused(self) -> None:
        """With max_jobs 2, a third job is refused (too_many_jobs) while the two can still change."""
        book = JobBook(max_jobs=2)
        for name in ("a", "b", "c"):
            book.apply(job_topic(name), encode_job(job(name, ["n1"], 1.0)))
        assert book.apply(job_topic("a"), encode_job(job("a", ["n2"], 1.0))) is None
        assert (sorted(book.jobs), dict(book.rejected)) == (["a", "b"], {"too_many_jobs": 1})


class TestNames:
    def test_a_node_is_found_by_each_of_its_names(self) -> None:
        """Hostname, instance id, n<id>, its canonical id and an EKS fully qualified name all resolve to node 6."""
        index = NameIndex.of(INVENTORY)
        names = ["ip-10-0-18-10", "i-0a1b2c3d4e5f60722", "n6", "s0/u1/n6", "ip-10-0-18-10.us-east-2.compute.internal"]
        assert [index.node(n) for n in names] == [6, 6, 6, 6, 6]

    def test_what_names_no_present_node_is_none(self) -> None:
        """An unknown host, an absent node's n<id>, a node past the fleet and a look-alike are unknown."""
        index = NameIndex.of(INVENTORY)
        names = ("ip-10-9-9-9", "n5", "n12", "n٣", "nx", "n06", "n", "ip-10-9-9-9.ec2.internal", "s0/u1/n5",
                 "s0/u0/n6", "s0/u1/n6/chip1")
        assert [index.node(n) for n in names] == [None] * len(names)

    def test_adapters_name_nodes_as_the_inventory_does(self) -> None:
        """hostname() gives the inventory's hostname for any of a node's names, and leaves an unknown one."""
        index = NameIndex.of(INVENTORY)
        assert [index.hostname(n) for n in ("n6", "ip-10-0-18-10.x.internal", "ip-10-9-9-9")] == [
            "ip-10-0-18-10", "ip-10-0-18-10", "ip-10-9-9-9"]
        assert NameIndex.of(build_topology("demo")).hostname("n3") == "n3"

    def test_an_ultraserver_is_its_present_nodes(self) -> None:
        """u0018 (inventory name), u1 and s0/u1 are nodes 4 and 6 (5 and 7 are absent); u3 does not exist."""
        index = NameIndex.of(INVENTORY)
        assert [index.ultraserver_nodes(name) for name in ("u0018", "u1", "s0/u1", "u3", "s0/u3")] == [
            [4, 6], [4, 6], [4, 6], None, None]


class TestResolve:
    def test_nodes_and_ultraservers_become_one_node_to_job_array(self) -> None:
        """Two jobs, one by hostnames, one by an UltraServer: node_job holds their numbers (in id order), -1
        elsewhere; the value is frozen."""
        index = NameIndex.of(INVENTORY)
        membership = resolve_jobs(index, [job("b", [], 2.0, ["u0018"]), job("a", ["ip-10-0-17-8", "n9"], 1.0)])
        expected = np.full(INVENTORY.n_nodes, NO_JOB, np.int32)
        expected[[0, 9]] = 0
        expected[[4, 6]] = 1
        assert membership.ids == ("a", "b")
        assert membership.node_job.dtype == np.int32
        np.testing.assert_array_equal(membership.node_job, expected)
        assert membership.nodes_held.tolist() == [2, 2]
        assert not membership.node_job.flags.writeable
        with pytest.raises(AttributeError):
            membership.ids = ()  # type: ignore[misc]

    def test_a_document_may_name_nodes_and_ultraservers_by_their_ids(self) -> None:
        """A job naming node s0/u0/n0 and UltraServer s0/u1 by the ids every surface prints holds nodes 0, 4 and 6
        (docs/ids.md)."""
        membership = resolve_jobs(NameIndex.of(INVENTORY), [job("a", ["s0/u0/n0"], 1.0, ["s0/u1"])])
        assert np.flatnonzero(membership.node_job == 0).tolist() == [0, 4, 6]

    def test_unknown_names_are_counted_per_job(self) -> None:
        """A host and an UltraServer the inventory does not know are counted in their own job, never placed."""
        index = NameIndex.of(INVENTORY)
        membership = resolve_jobs(index, [job("a", ["ip-10-9-9-9", "n5", "ip-10-0-17-8"], 1.0, ["u77"]),
                                          job("b", ["ip-10-2-1-8"], 1.0)])
        assert (membership.unknown_nodes.tolist(), membership.unknown_ultraservers.tolist()) == ([2, 0], [1, 0])
        assert membership.nodes_held.tolist() == [1, 1]

    def test_a_node_claimed_twice_goes_to_the_later_start(self) -> None:
        """Job old (start 1) and job new (start 5) both claim nodes 1 and 2: new holds them, old keeps node 0
        and counts 2 lost; two nodes conflicted."""
        index = NameIndex.of(INVENTORY)
        membership = resolve_jobs(index, [job("new", ["n1", "n2"], 5.0), job("old", ["n0", "n1", "n2"], 1.0)])
        old, new = membership.ids.index("old"), membership.ids.index("new")
        assert membership.node_job[:4].tolist() == [old, new, new, -1]
        assert (membership.lost_nodes[old], membership.lost_nodes[new], membership.conflicted_nodes) == (2, 0, 2)

    def test_a_tie_goes_to_the_larger_id_whatever_the_order(self) -> None:
        """Equal starts: the larger id holds the node, given in either order."""
        index = NameIndex.of(INVENTORY)
        docs = [job("a", ["n1"], 3.0), job("b", ["n1"], 3.0)]
        assert {resolve_jobs(index, order).node_job[1] for order in (docs, docs[::-1])} == {1}

    def test_a_node_named_twice_by_one_job_is_one_node(self) -> None:
        """A node listed by two names and inside a listed UltraServer counts once, and is no conflict."""
        index = NameIndex.of(INVENTORY)
        membership = resolve_jobs(index, [job("a", ["n0", "ip-10-0-17-8"], 1.0, ["u0017"])])
        assert (membership.nodes_claimed.tolist(), membership.conflicted_nodes) == ([4], 0)

    def test_no_documents_is_no_job(self) -> None:
        """An empty fleet of jobs: every node -1, no ids."""
        assert JobMembership.empty(8).node_job.tolist() == [-1] * 8
        assert resolve_jobs(NameIndex.of(INVENTORY), []).n_jobs == 0

    def test_a_whole_rainier_job_resolves_fast_enough_to_not_matter(self) -> None:
        """One job over all 31,200 nodes of rainier and 100 small ones resolve with every node placed."""
        index = NameIndex.of(build_topology("rainier"))
        whole = job("all", [f"n{i}" for i in range(index.n_nodes)], 1.0)
        small = [job(f"s{i}", [f"n{i}"], 2.0) for i in range(100)]
        membership = resolve_jobs(index, [whole, *small])
        assert (membership.node_job >= 0).all()
        assert membership.conflicted_nodes == 100
        assert membership.job_nodes(membership.ids.index("s7")).tolist() == [7]
