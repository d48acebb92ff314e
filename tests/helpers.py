"""Helpers only the tests need: test-sized rules and a Prometheus config for
them, the deployment checkers (kubectl kustomize, kubernetes-validate), and
what the job adapters' tests read back (retained job documents, the
adapter's counts), and a message handed to a monitor as its MQTT session
hands it (``hear``).
What the benchmarks need too (free ports, brokers, Prometheus, scrapes,
waits) is the process harness, harness/."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
import yaml

from harness.procs import Broker, free_port
from rainierd.monitor import Monitor
from rainierd.monitor.jobs import is_job_topic
from rainierd.promrules import RULES_DIR, write_overridden
from rainierd.wire.jobs import JOBS_FILTER, JobBook, encode_job

__all__ = ["acl_users", "assert_valid_strictly", "compose_shard_users", "hear", "kustomize", "published",
           "rainierd_prometheus_config", "retained_jobs", "rules_for_tests", "statefulset_shard_configs", "tool"]

DEPLOY = Path(__file__).parents[1] / "deploy"


def hear(monitor: Monitor, topic: str, payload: bytes, *, retained: bool = False) -> None:
    """Hand ``monitor`` one MQTT message as its session does (``monitor/session.py``), without a broker: a job
    document to the job feed, anything else to the inbox for the next analysis."""
    if is_job_topic(topic):
        monitor.jobs.hear(topic, payload)
    else:
        monitor.inbox.put(topic, payload, retained=retained)


def rules_for_tests(target: Path, duration: str = "2s") -> list[Path]:
    """Write the shipped rules with every ``for:`` set to ``duration``, but RainierdTargetMissing's (1m).

    Until Prometheus's first scrape there is no ``up`` series, and a test-sized
    ``for:`` would fire the absent-target alert while Prometheus starts on a busy
    machine: right for the rule, noise for a test of another alert.
    """
    paths = write_overridden(RULES_DIR, target, duration)
    for path in paths:
        text = path.read_text()
        path.write_text(re.sub(r"(- alert: RainierdTargetMissing\n(?:[^\n]*\n)*?\s*for:\s*)\S+", r"\g<1>1m", text))
    return paths


def rainierd_prometheus_config(metrics_port: int, rules_dir: Path, *more_jobs: dict[str, Any],
                               scrape_s: float = 1.0) -> dict[str, object]:
    """Return a Prometheus config that scrapes a rainierd on ``metrics_port`` (job ``rainierd``) and ``more_jobs``
    every ``scrape_s`` and evaluates the shipped rules every second, written test-sized to ``rules_dir``
    (rules_for_tests)."""
    return {
        "global": {"scrape_interval": f"{scrape_s:g}s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rules_for_tests(rules_dir)],
        "scrape_configs": [{"job_name": "rainierd", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]},
                           *more_jobs],
    }


def tool(name: str) -> str:
    """Return the path of ``name`` in the venv or on PATH; fail naming how to install it."""
    here = Path(sys.executable).parent / name
    path = str(here) if here.exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: pip install -e .[test] (check-jsonschema, kubernetes-validate), "
                    "apt-get install prometheus-alertmanager (amtool)")
    return path


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """Return the documents ``kubectl kustomize directory`` renders; fail if kubectl is missing or refuses."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is missing: apt-get install kubernetes-client (scripts/test does)")
    result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return [m for m in yaml.safe_load_all(result.stdout) if m]


def assert_valid_strictly(manifests: list[dict[str, Any]], workdir: Path) -> None:
    """Assert that kubernetes-validate --strict accepts each of ``manifests`` (built-in kinds; unknown fields
    rejected), written to ``workdir``/rendered.yaml."""
    path = workdir / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(manifests))
    result = subprocess.run([tool("kubernetes-validate"), "--strict", str(path)],
                            capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" passed for resource ") == len(manifests), result.stdout


def compose_shard_users() -> dict[str, str]:
    """Return each shard (``i/N``) of deploy/compose.sharded.yaml and the broker user whose credentials it reads,
    as compose resolves them: ``env_file`` lists are appended (over compose.yaml's, and through ``extends``)
    and the last file's values stand."""
    base = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    override = yaml.safe_load((DEPLOY / "compose.sharded.yaml").read_text())["services"]
    users = {}
    for name, service in override.items():
        shard = service.get("environment", {}).get("RAINIERD_SHARD")
        if shard is None:
            continue
        parent = base[name] if name in base else base[service["extends"]["service"]]
        env_files = [*parent.get("env_file", []), *service.get("env_file", [])]
        users[shard] = Path(env_files[-1]).stem
    return users


def statefulset_shard_configs(statefulset: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Return, for each pod ordinal of the monitor-shard StatefulSet, its shard (``i/N``) and the Secret key its
    RAINIERD_CONFIG names, expanding ``$(RAINIERD_POD_INDEX)`` as the kubelet does; fail if the path is not in
    a mounted Secret volume."""
    spec = statefulset["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    env = {e["name"]: e.get("value", "") for e in container["env"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"] if m["name"] in secrets}
    configs = {}
    for ordinal in range(statefulset["spec"]["replicas"]):
        def expand(value: str, i: int = ordinal) -> str:
            return value.replace("$(RAINIERD_POD_INDEX)", str(i))
        path = Path(expand(env["RAINIERD_CONFIG"]))
        assert str(path.parent) in mounts, f"{path} is in no Secret volume ({mounts})"
        configs[expand(env["RAINIERD_SHARD"])] = (secrets[mounts[str(path.parent)]], path.name)
    return configs


def acl_users(text: str) -> dict[str, set[str]]:
    """Return each ``user`` block of a Mosquitto ACL file and its ``topic`` lines."""
    users: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in text.splitlines():
        words = line.split(maxsplit=1)
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "user":
            current = users.setdefault(words[1], set())
        elif words[0] == "topic" and current is not None:
            current.add(words[1])
        elif words[0] == "pattern":
            current = None
    return users


def retained_jobs(broker: Broker) -> dict[str, Any]:
    """Return the retained job documents on the broker, by job id, as a new subscriber gets them."""

    async def read() -> dict[str, bytes]:
        got: dict[str, bytes] = {}
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier="jobs-reader") as reader:
            await reader.subscribe(JOBS_FILTER, qos=1)
            with contextlib.suppress(TimeoutError):  # retained messages come at once; then, quiet
                async with asyncio.timeout(1.0):
                    async for message in reader.messages:
                        if message.retain:  # a live message published meanwhile is not what a new subscriber gets
                            got[message.topic.value] = bytes(message.payload)  # type: ignore[arg-type]
        return got

    book = JobBook()  # as a monitor would read them: a broken document is refused, not returned
    for topic, payload in asyncio.run(read()).items():
        assert payload, f"{topic}: an empty message is never delivered as retained"
        book.apply(topic, payload)
    return {job_id: json.loads(encode_job(doc)) for job_id, doc in book.jobs.items()}  # as on the wire


def published(log: str) -> dict[str, int]:
    """Return the published/removed counts of the adapter's last "jobs published" line."""
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    (last,) = [line for line in lines if line["event"] == "jobs published"][-1:]
    return {"published": last["published"], "removed": last["removed"]}


def start_whole_and_two_shards(start_rainierd: Any, broker_url: str, *, tick_s: float, topology: str) -> dict[str, int]:
    """Start one unsharded monitor (``whole``) and two shards (``s0``, ``s1``) on ``broker_url``; return each one's
    metrics port.  Staleness off and no reconnect grace: the shard tests compare figures, not silences."""
    ports = {name: free_port() for name in ("whole", "s0", "s1")}
    shards = {"whole": "0/1", "s0": "0/2", "s1": "1/2"}
    for name, port in ports.items():
        start_rainierd(
            "monitor", "--mqtt-url", broker_url, "--metrics-addr", f"127.0.0.1:{port}", "--tick", str(tick_s),
            "--topology", topology, "--shard", shards[name], "--stale-after-ticks", "1000",
            "--reconnect-grace", "0", name=f"monitor-{name}")
    return ports
