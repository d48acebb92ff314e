"""The scheduler adapters end to end: `rainierd jobs slurm|kubernetes|static`
as real processes reading the sample files, a real Mosquitto, and a
subscriber that reads the retained job documents a monitor would get.  Each
adapter is run twice: the second input without a job leaves that job's
topic with no retained message (the empty retained removal), and a job of
another source is never touched."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import subprocess
import sys
from pathlib import Path

import aiomqtt
import pytest

from harness.procs import Broker
from harness.timing import within
from harness.waits import poll_until
from rainierd.wire.jobs import JOBS_FILTER
from tests.conftest import Daemon, SecureBroker
from tests.helpers import published, retained_jobs

DATA = Path(__file__).parents[1] / "data"
INVENTORY = DATA / "inventory-two-sites.toml"


def publish_retained(broker: Broker, topic: str, payload: bytes) -> None:
    async def publish() -> None:
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier="jobs-other") as client:
            await client.publish(topic, payload, qos=1, retain=True)

    asyncio.run(publish())


def run_jobs(broker: Broker, *args: str, stdin: Path | None = None, expect: int = 0) -> str:
    """Run ``rainierd jobs ARGS`` (the sample on stdin) to its end; return its log."""
    with (stdin or Path("/dev/null")).open("rb") as given:
        done = subprocess.run(
            [sys.executable, "-m", "rainierd", "jobs", *args, "--topology", str(INVENTORY),
             "--mqtt-url", broker.url, "--log-format", "json"],
            stdin=given, capture_output=True, timeout=within(60), check=False,
        )
    log = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == expect, log
    return log


OTHER = {"v": 1, "id": "trn-west/9", "name": "elsewhere", "owner": "carol", "scheduler": "slurm",
         "source": "slurm-west", "nodes": ["ip-10-2-1-11"], "start_s": 1_764_500_000.0}


@pytest.mark.mosquitto
def test_slurm_running_jobs_are_retained_and_an_ended_one_removed(mosquitto: Broker) -> None:
    """squeue --json's two RUNNING jobs become retained documents named as the inventory does; on the next
    run without job 41872 its document is removed, 41871 is left as it was, another source's job stays, and a
    broken document someone retained is logged as refused, not a failure."""
    publish_retained(mosquitto, "rainier/v1/jobs/trn-west/9", json.dumps(OTHER).encode())
    publish_retained(mosquitto, "rainier/v1/jobs/trn-west/broken", b'{"v": 1, "id": "trn-west/broken"')
    log = run_jobs(mosquitto, "slurm", stdin=DATA / "squeue-running.json")
    assert published(log) == {"published": 2, "removed": 0}
    refused = [json.loads(line) for line in log.splitlines() if '"job document refused"' in line]
    assert [(r["topic"], r["reason"]) for r in refused] == [("rainier/v1/jobs/trn-west/broken", "malformed")]
    jobs = retained_jobs(mosquitto)
    assert sorted(jobs) == ["trn-east/41871", "trn-east/41872", "trn-west/9"]
    assert jobs["trn-east/41872"] == {
        "v": 1, "id": "trn-east/41872", "name": "eval-sweep", "owner": "bob", "scheduler": "slurm",
        "source": "slurm", "nodes": ["ip-10-2-1-8", "ip-10-2-1-9", "ip-10-2-1-11", "ip-10-9-9-9"],
        "ultraservers": [], "start_s": 1_764_630_000.0}
    assert "job names nodes the inventory does not know" in log

    log = run_jobs(mosquitto, "slurm", stdin=DATA / "squeue-one-ended.json")
    assert published(log) == {"published": 0, "removed": 1}
    after = retained_jobs(mosquitto)
    assert sorted(after) == ["trn-east/41871", "trn-west/9"]
    assert after["trn-east/41871"] == jobs["trn-east/41871"]


@pytest.mark.mosquitto
def test_unreadable_scheduler_output_publishes_and_removes_nothing(mosquitto: Broker) -> None:
    """A squeue that failed (its error JSON, or no JSON at all) exits 2 (bad input, one line) and every job stays
    retained."""
    run_jobs(mosquitto, "slurm", stdin=DATA / "squeue-running.json")
    run_jobs(mosquitto, "slurm", stdin=DATA / "README.md", expect=2)
    run_jobs(mosquitto, "slurm", stdin=None, expect=2)
    assert sorted(retained_jobs(mosquitto)) == ["trn-east/41871", "trn-east/41872"]


@pytest.mark.mosquitto
def test_kubernetes_pod_lists_become_jobs_and_an_ended_one_is_removed(mosquitto: Broker) -> None:
    """kubectl's pod list gives the JobSet, the PyTorchJob and the indexed Job; the next list, with the
    PyTorchJob's pods finished, removes it."""
    log = run_jobs(mosquitto, "kubernetes", "--source", "eks-trn2", stdin=DATA / "pods-running.json")
    jobs = retained_jobs(mosquitto)
    assert sorted(jobs) == ["eval/nightly-eval", "research/bert-ft", "training/llama-70b"]
    assert jobs["training/llama-70b"]["nodes"] == ["ip-10-0-17-10", "ip-10-0-17-11", "ip-10-0-17-8", "ip-10-0-17-9"]
    assert {job["source"] for job in jobs.values()} == {"eks-trn2"}
    assert published(log) == {"published": 3, "removed": 0}
    log = run_jobs(mosquitto, "kubernetes", "--source", "eks-trn2", stdin=DATA / "pods-one-ended.json")
    assert published(log) == {"published": 0, "removed": 1}
    assert sorted(retained_jobs(mosquitto)) == ["eval/nightly-eval", "training/llama-70b"]


@pytest.mark.mosquitto
def test_a_kubectl_watch_stream_publishes_a_job_then_removes_it(mosquitto: Broker, tmp_path: Path) -> None:
    """kubectl's watch stream, as kubectl prints it (indented objects, one after another): once the initial
    listing is in, the JobSet's document is retained; when its pods are deleted it is removed, and the end of
    the stream ends the adapter with 0."""
    objects = [json.loads(line) for line in (DATA / "pods-watch-jobset.jsonl").read_text().splitlines()]
    with (tmp_path / "watch.log").open("w") as log:  # the child keeps its own copy open
        proc = subprocess.Popen(
            [sys.executable, "-m", "rainierd", "jobs", "kubernetes", "--watch", "--topology", str(INVENTORY),
             "--mqtt-url", mosquitto.url, "--log-format", "json"],
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
        )
    assert proc.stdin is not None
    try:
        for obj in objects[:5]:
            proc.stdin.write(json.dumps(obj, indent=4).encode() + b"\n")
        proc.stdin.flush()
        poll_until(lambda: "training/llama-70b" in retained_jobs(mosquitto), 30,
                   f"the JobSet's document\n{(tmp_path / 'watch.log').read_text()[-2000:]}")
        assert retained_jobs(mosquitto)["training/llama-70b"]["nodes"] == [
            "ip-10-0-17-10", "ip-10-0-17-11", "ip-10-0-17-8", "ip-10-0-17-9"]
        for obj in objects[5:]:
            proc.stdin.write(json.dumps(obj, indent=4).encode() + b"\n")
        proc.stdin.flush()
        poll_until(lambda: retained_jobs(mosquitto) == {}, 30, "the JobSet's removal")
        proc.stdin.close()
        assert proc.wait(timeout=within(20)) == 0, (tmp_path / "watch.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()


@pytest.mark.mosquitto
def test_a_static_file_is_the_whole_truth_for_its_source(mosquitto: Broker) -> None:
    """jobs-static.toml's two jobs are retained; the same file without eval/nightly removes it; running the
    unchanged file again publishes nothing."""
    log = run_jobs(mosquitto, "static", str(DATA / "jobs-static.toml"))
    assert published(log) == {"published": 2, "removed": 0}
    jobs = retained_jobs(mosquitto)
    assert (sorted(jobs), jobs["reserved-u0017"]["ultraservers"]) == (["eval/nightly", "reserved-u0017"], ["u0017"])
    assert jobs["eval/nightly"]["nodes"] == ["ip-10-2-1-8", "ip-10-2-1-9", "ip-10-2-1-11"]
    log = run_jobs(mosquitto, "static", str(DATA / "jobs-static-one-ended.toml"))
    assert published(log) == {"published": 0, "removed": 1}
    assert sorted(retained_jobs(mosquitto)) == ["reserved-u0017"]
    assert published(run_jobs(mosquitto, "static", str(DATA / "jobs-static-one-ended.toml"))) == {
        "published": 0, "removed": 0}


@pytest.mark.mosquitto
def test_a_saved_stream_redirected_to_the_watch_is_read_to_its_end(mosquitto: Broker) -> None:
    """--watch with stdin redirected from a regular file (which the event loop cannot watch) reads it whole:
    the listing's three jobs are retained and the adapter exits 0."""
    log = run_jobs(mosquitto, "kubernetes", "--watch", stdin=DATA / "pods-running.json")
    assert published(log) == {"published": 3, "removed": 0}
    assert sorted(retained_jobs(mosquitto)) == ["eval/nightly-eval", "research/bert-ft", "training/llama-70b"]


def test_an_adapter_publishes_over_tls_with_a_password(secure_mosquitto: SecureBroker, start_rainierd: object) -> None:
    """rainierd jobs static over mqtts:// with a CA file, a username and RAINIERD_MQTT_PASSWORD retains its jobs
    (read back over the same TLS), and its log holds no password."""
    broker = secure_mosquitto
    daemon: Daemon = start_rainierd(  # type: ignore[operator]
        "jobs", "static", str(DATA / "jobs-static.toml"), "--topology", str(INVENTORY), "--mqtt-url", broker.url,
        "--mqtt-ca-file", str(broker.ca_file), "--mqtt-username", broker.username,
        env={"RAINIERD_MQTT_PASSWORD": broker.password}, name="jobs")
    assert daemon.proc.wait(timeout=within(60)) == 0, daemon.log()
    assert broker.password not in daemon.log()

    async def read() -> list[str]:
        got: set[str] = set()
        tls = ssl.create_default_context(cafile=str(broker.ca_file))
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier="jobs-reader", username=broker.username,
                                  password=broker.password, tls_context=tls) as reader:
            await reader.subscribe(JOBS_FILTER, qos=1)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    async for message in reader.messages:
                        got.add(message.topic.value)
        return sorted(got)

    assert asyncio.run(read()) == ["rainier/v1/jobs/eval/nightly", "rainier/v1/jobs/reserved-u0017"]
