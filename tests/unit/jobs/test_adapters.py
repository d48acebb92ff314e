"""Specification of the scheduler adapters' reading (no I/O but the sample
files): Slurm hostlists and squeue --json, Kubernetes pod lists and watch
streams, static jobs files, and the command line that runs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rainierd.cli import _parse
from rainierd.core.jobs import NameIndex
from rainierd.errors import ConfigError, JobError
from rainierd.fleet.inventory import load_inventory
from rainierd.jobs.hostlist import expand_hostlist
from rainierd.jobs.kubernetes import DEFAULT_GROUP_LABELS, PodWatch, kubernetes_jobs, placement
from rainierd.jobs.slurm import slurm_jobs
from rainierd.jobs.static import static_jobs
from rainierd.mqtt.config import MAX_PACKET_OVERHEAD
from rainierd.settings import load_settings, role_settings
from rainierd.wire.jobs import MAX_JOB_BYTES

DATA = Path(__file__).parents[2] / "data"
INDEX = NameIndex.of(load_inventory(DATA / "inventory-two-sites.toml"))
EKS = ".us-east-2.compute.internal"


def sample(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def summary(docs: list[Any]) -> dict[str, tuple[str, str, list[str], float]]:
    return {d.id: (d.name, d.owner, d.nodes, d.start_s) for d in docs}


class TestHostlist:
    @pytest.mark.parametrize(("expression", "hosts"), [
        ("trn2-[001-003]", ["trn2-001", "trn2-002", "trn2-003"]),
        ("a[1-3,7],b5", ["a1", "a2", "a3", "a7", "b5"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("n[008-011]", ["n008", "n009", "n010", "n011"]),
        ("n[9-11]", ["n9", "n10", "n11"]),
        ("single", ["single"]),
        ("a1 a2", ["a1", "a2"]),
        ("ip-10-0-17-[8-9],ip-10-0-18-8", ["ip-10-0-17-8", "ip-10-0-17-9", "ip-10-0-18-8"]),
        ("x[5]", ["x5"]),
        ("", []),
        ("a,,b,", ["a", "b"]),
    ])
    def test_expressions_expand_as_slurm_does(self, expression: str, hosts: list[str]) -> None:
        """Ranges, lists inside brackets, padding kept from the lower bound, several brackets, several names."""
        assert expand_hostlist(expression, max_hosts=100) == hosts

    @pytest.mark.parametrize("expression", ["a[1-3", "a1-3]", "a[[1]]", "a[3-1]", "a[x-y]", "a[]", "a[1-2-3]",
                                            "a[-1]"])
    def test_malformed_expressions_are_refused(self, expression: str) -> None:
        """Unbalanced or nested brackets, backwards or non-numeric ranges: JobError (hostlist)."""
        with pytest.raises(JobError) as caught:
            expand_hostlist(expression, max_hosts=100)
        assert caught.value.reason == "hostlist"

    def test_a_huge_expression_is_refused_before_it_is_built(self) -> None:
        """n[0-999999999] (10^9 hosts) is refused at once against the bound, as is the bound plus one."""
        with pytest.raises(JobError, match="more than 65,536"):
            expand_hostlist("n[0-999999999]", max_hosts=65_536)
        with pytest.raises(JobError):
            expand_hostlist("a[1-3],b[1-2]", max_hosts=4)
        assert len(expand_hostlist("a[1-3],b[1]", max_hosts=4)) == 4


_PREFIX = st.text("abcxyz-.", min_size=1, max_size=6).filter(lambda p: p[0] not in "-.")
_RANGE = st.tuples(st.integers(0, 500), st.integers(0, 20), st.integers(1, 4))  # low, length - 1, width


class TestHostlistProperties:
    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.tuples(_PREFIX, st.lists(_RANGE, min_size=1, max_size=3)), min_size=1, max_size=4))
    def test_a_compressed_list_expands_to_its_hosts(self, items: list[tuple[str, list[tuple[int, int, int]]]]) -> None:
        """prefix[low-high,…],… built from known hosts expands to exactly those hosts, in order, padding kept."""
        expression = ",".join(
            prefix + "[" + ",".join(f"{low:0{width}d}-{low + extra:0{width}d}" for low, extra, width in ranges) + "]"
            for prefix, ranges in items)
        expected = [f"{prefix}{n:0{width}d}" for prefix, ranges in items
                    for low, extra, width in ranges for n in range(low, low + extra + 1)]
        assert expand_hostlist(expression, max_hosts=10_000) == expected

    @settings(max_examples=300, deadline=None)
    @given(st.text("ab01-9[],", max_size=30))
    def test_any_text_expands_within_the_bound_or_is_refused(self, expression: str) -> None:
        """Whatever the text, expansion returns at most max_hosts names or raises JobError, nothing else."""
        try:
            hosts, reason = expand_hostlist(expression, max_hosts=1_000), None
        except JobError as exc:
            hosts, reason = [], exc.reason
        assert reason in (None, "hostlist")
        assert len(hosts) <= 1_000
        assert all(h and "[" not in h and "]" not in h and "," not in h for h in hosts)


class TestSlurm:
    def test_running_jobs_of_slurm_23_11_become_documents(self) -> None:
        """squeue-running.json: the two RUNNING jobs, ids cluster/job_id, nodes expanded and named as the
        inventory does (the unknown one kept); the PENDING one is left out."""
        docs, skipped = slurm_jobs(sample("squeue-running.json"), source="slurm", index=INDEX)
        assert skipped == []
        assert summary(docs) == {
            "trn-east/41871": ("llm-pretrain-70b", "alice", ["ip-10-0-17-8", "ip-10-0-17-9", "ip-10-0-17-10",
                                                             "ip-10-0-17-11", "ip-10-0-18-8", "ip-10-0-18-10"],
                               1_764_547_200.0),
            "trn-east/41872": ("eval-sweep", "bob", ["ip-10-2-1-8", "ip-10-2-1-9", "ip-10-2-1-11", "ip-10-9-9-9"],
                               1_764_630_000.0),
        }
        assert {(d.scheduler, d.source) for d in docs} == {("slurm", "slurm")}

    def test_slurm_22_05_strings_and_integers_read_the_same(self) -> None:
        """The older shape (job_state a string, start_time an integer) gives the same document of 41871."""
        old, _ = slurm_jobs(sample("squeue-22.05.json"), source="slurm", index=INDEX)
        new, _ = slurm_jobs(sample("squeue-running.json"), source="slurm", index=INDEX)
        assert old == [new[0]]

    def test_an_unreadable_job_is_skipped_and_the_others_kept(self) -> None:
        """A running job with a broken hostlist, one with no start time and one that is not an object are
        skipped with their reasons; the good job stays."""
        output = sample("squeue-running.json")
        good = output["jobs"][0]
        output["jobs"] = [good, good | {"job_id": 7, "nodes": "a[1-"},
                          good | {"job_id": 8, "start_time": {"set": False, "infinite": False, "number": 0}}, "x"]
        docs, skipped = slurm_jobs(output, source="slurm")
        assert [d.id for d in docs] == ["trn-east/41871"]
        assert [e.reason for e in skipped] == ["hostlist", "bad_job", "bad_job"]

    @pytest.mark.parametrize("output", [[], {"jobs": {}}, {"meta": {}},
                                        {"jobs": [], "errors": [{"error": "Unable to contact slurm controller"}]}])
    def test_output_that_is_not_squeues_raises(self, output: Any) -> None:
        """Not a jobs list, or squeue's own errors: bad_input, so a failed squeue never ends every job."""
        with pytest.raises(JobError) as caught:
            slurm_jobs(output, source="slurm")
        assert caught.value.reason == "bad_input"


class TestKubernetes:
    def test_pods_group_into_jobs_by_label(self) -> None:
        """pods-running.json: the JobSet whole (not its child Job), the PyTorchJob with its Pending-on-a-node
        pod, the indexed Job with its unknown node; coredns, the unscheduled and the finished pod in no job."""
        docs, skipped = kubernetes_jobs(sample("pods-running.json"), source="eks", index=INDEX)
        assert skipped == []
        assert summary(docs) == {
            "eval/nightly-eval": ("nightly-eval", "eval", ["ip-10-2-1-11", f"ip-10-9-9-9{EKS}"], 1_764_633_000.0),
            "research/bert-ft": ("bert-ft", "research", ["ip-10-2-1-8", "ip-10-2-1-9"], 1_764_631_800.0),
            "training/llama-70b": ("llama-70b", "training",
                                   ["ip-10-0-17-10", "ip-10-0-17-11", "ip-10-0-17-8", "ip-10-0-17-9"], 1_764_626_400.0),
        }

    def test_a_job_with_a_pod_not_yet_running_is_restarting(self) -> None:
        """The PyTorchJob's pod Pending on its node (pulling its image) keeps the job from stepping: starting or
        restarting; the JobSet and the indexed Job, every pod Running, are not."""
        docs, _ = kubernetes_jobs(sample("pods-running.json"), source="eks", index=INDEX)
        assert {d.id: d.restarting for d in docs} == {
            "eval/nightly-eval": False, "research/bert-ft": True, "training/llama-70b": False}

    @pytest.mark.parametrize("waiting", ["CrashLoopBackOff", "ContainerCreating"])
    def test_a_running_pod_with_a_container_waiting_restarts_its_job(self, waiting: str) -> None:
        """A container restarted by its pod's restartPolicy (CrashLoopBackOff) or being created again leaves the
        pod Running but the job restarting."""
        items = sample("pods-running.json")["items"]
        (pod,) = [p for p in items if p["metadata"]["name"] == "bert-ft-master-0"]
        statuses = [c | {"state": {"waiting": {"reason": waiting}}, "ready": False, "restartCount": 3}
                    for c in pod["status"]["containerStatuses"]]
        broken = pod | {"status": pod["status"] | {"containerStatuses": statuses}}
        placed = placement(broken)
        assert placed is not None
        assert not placed.running
        assert placement(pod) is not None
        assert placement(pod).running  # type: ignore[union-attr]

    def test_the_label_order_is_configurable(self) -> None:
        """With the batch Job label first, the JobSet's pods group by their child Job instead."""
        labels = ("batch.kubernetes.io/job-name", *DEFAULT_GROUP_LABELS)
        docs, _ = kubernetes_jobs(sample("pods-running.json"), source="eks", labels=labels)
        assert sorted(d.id for d in docs) == ["eval/nightly-eval", "research/bert-ft", "training/llama-70b-workers-0"]

    def test_finished_deleting_and_unplaced_pods_hold_no_node(self) -> None:
        """Succeeded, Failed, being deleted, Pending without a node, without a job label: no placement."""
        (pod,) = [p for p in sample("pods-running.json")["items"] if p["metadata"]["name"] == "bert-ft-master-0"]
        assert placement(pod) is not None
        cases = [
            pod | {"status": pod["status"] | {"phase": "Succeeded"}},
            pod | {"status": pod["status"] | {"phase": "Failed"}},
            pod | {"metadata": pod["metadata"] | {"deletionTimestamp": "2025-12-02T00:00:00Z"}},
            pod | {"spec": {k: v for k, v in pod["spec"].items() if k != "nodeName"},
                   "status": pod["status"] | {"phase": "Pending"}},
            pod | {"metadata": pod["metadata"] | {"labels": {"app": "x"}}},
            "not a pod", {"metadata": 3},
        ]
        assert [placement(case) for case in cases] == [None] * len(cases)

    @pytest.mark.parametrize("output", [[], {"kind": "Pod"}, {"kind": "List", "items": {}}])
    def test_output_that_is_not_a_pod_list_raises(self, output: Any) -> None:
        """Not a List or PodList of items: bad_input, so a failed kubectl never ends every job."""
        with pytest.raises(JobError):
            kubernetes_jobs(output, source="eks")


def watch_objects() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / "pods-watch-jobset.jsonl").read_text().splitlines()]


class TestPodWatch:
    def test_kubectls_pretty_stream_in_small_pieces_is_read_whole(self) -> None:
        """The stream as kubectl prints it (indented objects, one after another), fed 100 bytes at a time:
        after the initial listing one job of 4 nodes; after the deletions none."""
        objects = watch_objects()
        text = "".join(json.dumps(o, indent=4) + "\n" for o in objects)
        first = sum(len(json.dumps(o, indent=4)) + 1 for o in objects[:5])
        watch = PodWatch()
        for i in range(0, first, 100):
            watch.feed(text[i:min(i + 100, first)])
        docs, _ = watch.documents(source="eks", index=INDEX)
        assert [(d.id, len(d.nodes)) for d in docs] == [("training/llama-70b", 4)]
        for i in range(first, len(text), 100):
            watch.feed(text[i:i + 100])
        assert (watch.documents(source="eks"), watch.objects, watch.skipped) == (([], []), 11, 0)

    def test_one_object_a_line_reads_the_same(self) -> None:
        """The compact form (jq -c), fed line by line: one job after the 5 lines of the listing, none (and no pod
        held: coredns is in no job) at the end."""
        watch = PodWatch()
        lines = (DATA / "pods-watch-jobset.jsonl").read_text().splitlines(keepends=True)
        for line in lines[:5]:
            watch.feed(line)
        assert len(watch.pods) == 4
        for line in lines[5:]:
            watch.feed(line)
        assert (watch.objects, watch.skipped, watch.pods) == (11, 0, {})

    def test_garbage_between_objects_is_skipped_and_counted(self) -> None:
        """A line of text and a broken object between two good ones: both good ones are read, two skips."""
        objects = watch_objects()
        good = [json.dumps(objects[0], indent=4), json.dumps(objects[1], indent=4)]
        watch = PodWatch()
        watch.feed(good[0] + "\nerror: the server doesn't have a resource type\n{\n  \"broken\": \n" + good[1] + "\n")
        assert (watch.objects, watch.skipped, len(watch.pods)) == (2, 2, 2)

    def test_a_pod_list_in_the_stream_is_its_pods(self) -> None:
        """A List (kubectl get without --watch) fed to the watch gives the same jobs as the one-shot reading."""
        watch = PodWatch()
        watch.feed((DATA / "pods-running.json").read_text())
        assert watch.documents(source="eks") == kubernetes_jobs(sample("pods-running.json"), source="eks")
        assert watch.objects == 1

    def test_an_object_that_never_ends_is_dropped_at_the_bound(self) -> None:
        """An opening brace followed by 17 MiB without a close is dropped, not buffered for ever."""
        watch = PodWatch()
        watch.feed('{"metadata": "' + "x" * (17 * 2**20))
        assert (watch.skipped, watch._buffer) == (1, "")


class TestStatic:
    def test_toml_and_json_files_give_the_same_jobs(self) -> None:
        """jobs-static.toml and .json: a hostlist and n11 named as the inventory does; a whole UltraServer."""
        toml_docs = static_jobs(DATA / "jobs-static.toml", source="static", index=INDEX)
        assert summary(toml_docs) == {
            "eval/nightly": ("nightly evaluation", "ml-eval", ["ip-10-2-1-8", "ip-10-2-1-9", "ip-10-2-1-11"],
                             1_764_626_400.0),
            "reserved-u0017": ("reserved-u0017", "sre", [], 1_764_547_200.0),
        }
        assert toml_docs[1].ultraservers == ["u0017"]
        assert static_jobs(DATA / "jobs-static.json", source="static", index=INDEX) == toml_docs

    @pytest.mark.parametrize(("text", "message"), [
        ('[[job]]\nid = "a"\nowner = "o"\nstart = 1\n', "holds no node"),
        ('[[job]]\nid = "a"\nowner = "o"\nnodes = ["n1"]\n', "job.0.start"),
        ('[[job]]\nid = "a/+"\nowner = "o"\nnodes = ["n1"]\nstart = 1\n', "id"),
        ('[[job]]\nid = "a"\nowner = "o"\nnodes = ["n1"]\nstart = 2026-12-01T00:00:00\n', "no time zone"),
        ('[[job]]\nid = "a"\nowner = "o"\nnodes = ["n[1-"]\nstart = 1\n', "'\\['"),
        ('[[job]]\nid = "a"\nowner = "o"\nnodes = ["n1"]\nstart = 1\n' * 2, "appears twice"),
        ('[[job]]\nid = "a"\nowner = "o"\nnodes = ["n1"]\nstart = 1\ncolour = "red"\n', "colour"),
        ("[[job]\n", "jobs file"),
    ])
    def test_a_bad_file_is_one_clear_error(self, tmp_path: Path, text: str, message: str) -> None:
        """Each mistake stops with a ConfigError naming the file and what is wrong."""
        path = tmp_path / "jobs.toml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            static_jobs(path, source="static")


class TestCommandLine:
    def test_each_adapter_parses_with_the_bridges_settings(self) -> None:
        """rainierd jobs slurm/kubernetes/static take their own options and the MQTT, fleet and log settings."""
        slurm = _parse(["jobs", "slurm", "--topology", "fleet.toml", "--mqtt-url", "mqtts://b:8883", "--source", "c"])
        kube = _parse(["jobs", "kubernetes", "--watch", "--group-label", "a", "--group-label", "b"])
        static = _parse(["jobs", "static", "jobs.toml"])
        assert (slurm.jobs, slurm.source, slurm.topology, slurm.mqtt_url) == ("slurm", "c", "fleet.toml",
                                                                             "mqtts://b:8883")
        assert (kube.jobs, kube.watch, kube.group_labels) == ("kubernetes", True, ["a", "b"])
        assert (static.jobs, static.input) == ("static", Path("jobs.toml"))
        listening = ("bridge_listen", "ecc_counts", "sample_max_lag_s", "web_config_file", "http_max_connections",
                     "http_max_handshakes", "http_unauthenticated_idle_s")  # the bridge's own and its HTTP side's
        assert role_settings("jobs") == [s for s in role_settings("bridge") if s not in listening]

    def test_the_settings_reach_the_runner_as_its_own_config(self) -> None:
        """Settings.jobs_config: the source names the publisher and its default client id, the topology gives the
        names, the broker settings the connection, and retained documents are bounded as the wire bounds them."""
        inventory = str(DATA / "inventory-two-sites.toml")
        settings = load_settings({"topology": inventory, "mqtt_url": "mqtts://b:8883", "mqtt_qos": 1})
        config = settings.jobs_config(source="eks-trn2")
        assert (config.source, config.mqtt.client_id, config.mqtt.url, config.mqtt.qos, config.mqtt.max_packet_bytes,
                config.index.node_hosts) == ("eks-trn2", "rainierd-jobs-eks-trn2", "mqtts://b:8883", 1,
                                             MAX_JOB_BYTES + MAX_PACKET_OVERHEAD, INDEX.node_hosts)
        named = load_settings({"mqtt_client_id": "scheduler-7"}).jobs_config(source="slurm")
        assert (named.source, named.mqtt.client_id) == ("slurm", "scheduler-7")
