"""The deployment files are checked by machines, offline: the compose file
against the compose-spec schema and its own promises (pinned images,
health-gated start order, credentials from outside, loopback ports, a broker
health probe that works against the shipped broker config), Alertmanager's
config with amtool, and the Kubernetes manifests with kubernetes-validate
plus the PrometheusRule against the rule files it is generated from."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from rainierd.promrules import RULES_DIR, prometheus_rule
from tests.helpers import (
    acl_users,
    assert_valid_strictly,
    compose_shard_users,
    kustomize,
    statefulset_shard_configs,
    tool,
)
from tests.integration.test_authorisation import ShippedBroker, shipped_broker  # noqa: F401 (a fixture)

ROOT = Path(__file__).parents[3]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


class TestCompose:
    """deploy/compose.yaml."""

    @pytest.mark.integration  # runs check-jsonschema
    def test_matches_the_compose_spec(self) -> None:
        """check-jsonschema accepts the file against the compose-spec schema it carries."""
        result = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
                                capture_output=True, text=True, check=False, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr

    def test_runs_the_whole_stack(self) -> None:
        """The stack is the broker, simulator, monitor, Prometheus, Alertmanager and Grafana."""
        assert set(compose()["services"]) == {
            "mosquitto", "simulate", "monitor", "prometheus", "alertmanager", "grafana"}

    def test_every_image_is_pinned_to_a_release(self) -> None:
        """No floating tag: every image names an exact x.y.z release, rainierd's own the package version."""
        images = {name: s["image"] for name, s in compose()["services"].items()}
        assert {name: bool(re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+", image)) for name, image in images.items()} == (
            dict.fromkeys(images, True))
        assert {images["simulate"], images["monitor"]} == {f"rainierd:{VERSION}"}

    def test_start_order_waits_for_health(self) -> None:
        """Every depends_on is long-form, and waits for service_healthy wherever the dependency has a healthcheck
        (its own or its image's), except Prometheus on the monitor: it must run to alert on an unhealthy monitor."""
        services = compose()["services"]
        checked = {name for name, s in services.items()
                   if "healthcheck" in s or s["image"].startswith("rainierd:")}  # the Dockerfile's HEALTHCHECK
        assert checked == set(services)
        conditions = {(name, dependency): how["condition"] for name, s in services.items()
                      for dependency, how in s.get("depends_on", {}).items()}
        assert all(isinstance(s.get("depends_on", {}), dict) for s in services.values())
        assert conditions == {
            ("simulate", "mosquitto"): "service_healthy", ("monitor", "mosquitto"): "service_healthy",
            ("prometheus", "alertmanager"): "service_healthy", ("prometheus", "monitor"): "service_started",
            ("grafana", "prometheus"): "service_healthy",
        }

    def test_grafana_admin_comes_from_the_environment_without_a_default(self) -> None:
        """Grafana's admin user and password must be set by whoever starts the stack: compose refuses otherwise."""
        env = compose()["services"]["grafana"]["environment"]
        assert re.fullmatch(r"\$\{GF_ADMIN_USER:\?[^}]+\}", env["GF_SECURITY_ADMIN_USER"])
        assert re.fullmatch(r"\$\{GF_ADMIN_PASSWORD:\?[^}]+\}", env["GF_SECURITY_ADMIN_PASSWORD"])

    def test_ports_are_published_on_loopback_only(self) -> None:
        """Only Prometheus, Alertmanager and Grafana publish a port, each on 127.0.0.1."""
        ports = {name: s.get("ports", []) for name, s in compose()["services"].items() if s.get("ports")}
        assert ports == {"prometheus": ["127.0.0.1:9090:9090"], "alertmanager": ["127.0.0.1:9093:9093"],
                         "grafana": ["127.0.0.1:3000:3000"]}

    def test_rainierd_containers_are_locked_down(self) -> None:
        """simulate and monitor run read-only, without capabilities or privilege escalation, with their own
        broker credentials."""
        services = compose()["services"]
        for name, user in (("simulate", "rainierd-sim"), ("monitor", "rainierd-monitor")):
            service = services[name]
            assert (service["read_only"], service["cap_drop"], service["security_opt"]) == (
                True, ["ALL"], ["no-new-privileges:true"]), name
            assert service["env_file"] == [f"./secrets/{user}.env"]

    def test_the_broker_wants_a_password(self) -> None:
        """The shipped Mosquitto refuses anonymous clients and checks the ACL."""
        conf = (DEPLOY / "mosquitto" / "mosquitto.conf").read_text()
        assert re.findall(r"^(allow_anonymous|password_file|acl_file) (.+)$", conf, re.MULTILINE) == [
            ("allow_anonymous", "false"), ("password_file", "/mosquitto/config/passwd"),
            ("acl_file", "/mosquitto/config/acl")]

    def test_prometheus_alerts_go_to_the_compose_alertmanager(self) -> None:
        """Prometheus's alerting target is the alertmanager service on its port, and the rules are loaded."""
        config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
        assert config["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": ["alertmanager:9093"]}]}]}
        assert config["rule_files"] == ["/etc/prometheus/rules/*.yml"]

    @pytest.mark.alertmanager
    def test_alertmanager_config_passes_amtool(self) -> None:
        """amtool check-config accepts deploy/alertmanager/alertmanager.yml."""
        result = subprocess.run([tool("amtool"), "check-config", str(DEPLOY / "alertmanager" / "alertmanager.yml")],
                                capture_output=True, text=True, check=False, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr

    def test_references_exist(self) -> None:
        """Every file the compose file mounts or names exists (after make-credentials for secrets and passwd)."""
        text = COMPOSE.read_text()
        assert "docs/deploy.md" in text
        assert (ROOT / "docs" / "deploy.md").exists()
        generated = {"./mosquitto/passwd"}
        mounts = {v.split(":")[0] for s in compose()["services"].values() for v in s.get("volumes", [])
                  if v.startswith(".")}
        assert {m for m in mounts - generated if not (DEPLOY / m).exists()} == set()

    @pytest.mark.mosquitto
    def test_the_broker_healthcheck_passes_for_its_user_only(
        self, shipped_broker: ShippedBroker, tmp_path: Path,  # noqa: F811 (the imported fixture)
    ) -> None:
        """The mosquitto service's healthcheck, run against the shipped broker config and make-credentials'
        users, succeeds with the healthcheck user's credentials and fails with a user the ACL denies $SYS."""
        command = compose()["services"]["mosquitto"]["healthcheck"]["test"]
        assert command[0] == "CMD-SHELL"
        shell = command[1].replace("$$", "$").replace("-p 1883", f"-p {shipped_broker.port}")

        def probe(user: str) -> int:
            lines = (tmp_path / "secrets" / f"{user}.env").read_text().splitlines()
            env = {**os.environ, **dict(line.split("=", 1) for line in lines)}
            return subprocess.run(["sh", "-c", shell], env=env, capture_output=True, check=False, timeout=20).returncode

        assert (probe("rainierd-healthcheck"), probe("rainierd-sim") != 0) == (0, True)


KUBE = DEPLOY / "kubernetes" / "base"
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}  # prometheus-operator's CRDs: not in kubernetes-validate


def kustomization() -> dict[str, Any]:
    return dict(yaml.safe_load((KUBE / "kustomization.yaml").read_text()))


def manifests() -> list[dict[str, Any]]:
    """Render the kustomization by reading its resources: it has no generators or transformers to apply."""
    return [doc for name in kustomization()["resources"] for doc in yaml.safe_load_all((KUBE / name).read_text())]


def one(kind: str, name: str) -> dict[str, Any]:
    (found,) = [m for m in manifests() if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def deployments() -> list[dict[str, Any]]:
    return [m for m in manifests() if m["kind"] == "Deployment"]


class TestKubernetes:
    """deploy/kubernetes/ (kustomize)."""

    def test_kustomization_lists_every_manifest(self) -> None:
        """Every manifest file is a resource of the kustomization, which uses nothing but resources."""
        assert set(kustomization()) == {"apiVersion", "kind", "resources"}
        assert sorted(kustomization()["resources"]) == sorted(
            p.name for p in KUBE.glob("*.yaml") if p.name != "kustomization.yaml")

    @pytest.mark.integration  # runs kubernetes-validate
    def test_builtin_kinds_pass_kubernetes_validate_strict(self, tmp_path: Path) -> None:
        """kubernetes-validate --strict accepts every manifest of a built-in kind (unknown fields rejected)."""
        builtin = [m for m in manifests() if m["kind"] not in CUSTOM_KINDS]
        assert {m["kind"] for m in builtin} == {"ConfigMap", "PersistentVolumeClaim", "Deployment", "Service"}
        assert_valid_strictly(builtin, tmp_path)

    def test_prometheusrule_is_generated_from_the_rule_files(self) -> None:
        """The shipped PrometheusRule is exactly what `rainierd rules --kubernetes` makes of rainierd/rules/*.yml:
        change a rule and this fails until it is regenerated (docs/deploy.md says how)."""
        assert (KUBE / "prometheusrule.yaml").read_text() == prometheus_rule()

    def test_prometheusrule_carries_every_group_unchanged(self) -> None:
        """Its groups are the rule files' groups, in order, every field as the files have it."""
        groups = [g for p in sorted(RULES_DIR.glob("*.yml")) for g in yaml.safe_load(p.read_text())["groups"]]
        rule = one("PrometheusRule", "rainierd")
        assert (rule["apiVersion"], list(rule["spec"])) == ("monitoring.coreos.com/v1", ["groups"])
        assert rule["spec"]["groups"] == groups

    def test_servicemonitor_scrapes_the_monitor_service_as_job_rainierd(self) -> None:
        """The ServiceMonitor selects the monitor's Service, scrapes its named metrics port, and takes the job name
        the alerting rules expect from the Service's label."""
        monitor, service = one("ServiceMonitor", "rainierd-monitor"), one("Service", "rainierd-monitor")
        spec = monitor["spec"]
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert set(spec) == {"jobLabel", "selector", "endpoints"}
        assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert service["metadata"]["labels"][spec["jobLabel"]] == "rainierd"
        assert [e["port"] for e in spec["endpoints"]] == [p["name"] for p in service["spec"]["ports"]] == ["metrics"]
        assert {k for e in spec["endpoints"] for k in e} <= {"port", "path", "interval", "scrapeTimeout"}

    def test_service_reaches_the_monitor_even_when_not_ready(self) -> None:
        """The Service selects the monitor pods, targets their metrics port, and publishes them while not ready."""
        service, deployment = one("Service", "rainierd-monitor"), one("Deployment", "rainierd-monitor")
        assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["publishNotReadyAddresses"] is True
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["ports"] == [{"name": "metrics", "containerPort": 9780, "protocol": "TCP"}]

    def test_one_image_whose_command_is_the_role(self) -> None:
        """Both Deployments run the package version's image, the role as its argument."""
        roles = {d["metadata"]["name"]: (c["image"], c["args"])
                 for d in deployments() for c in d["spec"]["template"]["spec"]["containers"]}
        assert roles == {"rainierd-monitor": (f"rainierd:{VERSION}", ["monitor"]),
                         "rainierd-simulate": (f"rainierd:{VERSION}", ["simulate"])}

    def test_pods_run_unprivileged(self) -> None:
        """Every pod runs as uid 10001, non-root, RuntimeDefault seccomp, read-only root, no capabilities,
        no privilege escalation, no service account token."""
        for deployment in deployments():
            pod = deployment["spec"]["template"]["spec"]
            assert pod["automountServiceAccountToken"] is False
            assert pod["securityContext"].items() >= {
                "runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                "seccompProfile": {"type": "RuntimeDefault"}}.items()
            for container in pod["containers"]:
                assert container["securityContext"] == {
                    "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]}}

    def test_probes_ask_health_and_readiness_where_the_role_listens(self) -> None:
        """Liveness (and the monitor's startup) probes ask /healthz, readiness /readyz, on a named port at the
        address the role is told to listen on."""
        probes = {}
        for deployment in deployments():
            (container,) = deployment["spec"]["template"]["spec"]["containers"]
            env = {e["name"]: e["value"] for e in container["env"]}
            ((port,),) = [[p["name"]] for p in container["ports"] if p["containerPort"] == 9780]
            assert env["RAINIERD_METRICS_ADDR"] == "0.0.0.0:9780"
            probes[deployment["metadata"]["name"]] = {
                k: (container[k]["httpGet"]["path"], container[k]["httpGet"]["port"] == port)
                for k in ("startupProbe", "livenessProbe", "readinessProbe") if k in container}
        assert probes == {
            "rainierd-monitor": {"startupProbe": ("/healthz", True), "livenessProbe": ("/healthz", True),
                                 "readinessProbe": ("/readyz", True)},
            "rainierd-simulate": {"livenessProbe": ("/healthz", True), "readinessProbe": ("/readyz", True)},
        }

    def test_every_container_has_measured_requests_and_a_memory_limit(self) -> None:
        """No container runs unbounded: CPU and memory requests, a memory limit at least the request."""
        for deployment in deployments():
            for container in deployment["spec"]["template"]["spec"]["containers"]:
                resources = container["resources"]
                assert set(resources["requests"]) == {"cpu", "memory"}
                assert set(resources["limits"]) == {"memory"}
                request, limit = (int(re.fullmatch(r"(\d+)Mi", v)[1])  # type: ignore[index]
                                  for v in (resources["requests"]["memory"], resources["limits"]["memory"]))
                assert limit >= request

    def test_mqtt_credentials_come_from_secrets(self) -> None:
        """Each role reads its broker credentials from its own Secret; no credential is written in a manifest."""
        secrets = {d["metadata"]["name"]: [s["secretRef"]["name"] for c in d["spec"]["template"]["spec"]["containers"]
                                           for s in c["envFrom"] if "secretRef" in s] for d in deployments()}
        assert secrets == {"rainierd-monitor": ["rainierd-monitor-mqtt"], "rainierd-simulate": ["rainierd-sim-mqtt"]}
        assert "Secret" not in {m["kind"] for m in manifests()}
        assert not re.search(r"PASSWORD|USERNAME", yaml.safe_dump_all(
            [m for m in manifests() if m["kind"] != "PrometheusRule"]).split("# ")[0].replace("RAINIERD_MQTT_URL", ""))

    @pytest.mark.kubectl
    def test_kubectl_kustomize_renders_the_same_manifests(self) -> None:
        """Where kubectl is installed, its kustomize renders exactly the files' documents."""
        if shutil.which("kubectl") is None:
            pytest.skip("kubectl is not installed: the other tests read the files, which is the same rendering")
        key = lambda m: (m["kind"], m["metadata"]["name"])  # noqa: E731
        assert sorted(kustomize(KUBE), key=key) == sorted(manifests(), key=key)


MONITOR_TOPICS = {"read rainier/v1/telemetry/#", "write rainier/v1/events/#", "read rainier/v1/jobs/#",
                  "readwrite rainier/v1/actions/#"}


def credential_users() -> list[str]:
    """Return the users deploy/mosquitto/make-credentials makes without arguments."""
    (users,) = re.findall(r"^users=\(([^)]*)\)", (DEPLOY / "mosquitto" / "make-credentials").read_text(), re.M)
    return [u for u in users.split() if not u.startswith('"$')]


class TestIdentities:
    """Every client's id is its username on the shipped broker, so each monitor shard needs its own user."""

    def test_every_listener_of_the_shipped_broker_binds_client_ids_to_usernames(self) -> None:
        """Each listener line of mosquitto.conf (the commented TLS one too) is followed, before the next
        listener, by use_username_as_clientid true: it is a per-listener option."""
        lines = [line.lstrip("# ").strip() for line in (DEPLOY / "mosquitto" / "mosquitto.conf").read_text()
                 .splitlines()]
        listeners = [i for i, line in enumerate(lines) if re.fullmatch(r"listener \d+.*", line)]
        sections = [lines[a:b] for a, b in zip(listeners, [*listeners[1:], len(lines)], strict=True)]
        assert [("use_username_as_clientid true" in section) for section in sections] == [True, True]

    def test_compose_gives_each_shard_its_own_user_that_the_acl_lets_monitor(self) -> None:
        """compose.sharded.yaml's shards read distinct credential files, one per shard, each a user
        make-credentials makes and the ACL lets read telemetry and write events."""
        users = compose_shard_users()
        assert users == {"0/2": "rainierd-monitor-0", "1/2": "rainierd-monitor-1"}
        acl = acl_users((DEPLOY / "mosquitto" / "acl").read_text())
        assert {u: acl.get(u) for u in users.values()} == dict.fromkeys(users.values(), MONITOR_TOPICS)
        assert set(users.values()) <= set(credential_users())

    def test_the_statefulset_gives_each_ordinal_its_own_user_from_a_secret(self) -> None:
        """Each pod ordinal of the shard StatefulSet reads its own settings file (rainierd-monitor-<i>.toml,
        which make-credentials writes) from a Secret, with no Secret shared as environment by every shard; its
        user is one the ACL lets monitor."""
        path = DEPLOY / "kubernetes" / "sharded" / "monitor-statefulset.yaml"
        statefulset = yaml.safe_load(path.read_text())
        configs = statefulset_shard_configs(statefulset)
        n = statefulset["spec"]["replicas"]
        assert configs == {f"{i}/{n}": ("rainierd-monitor-shards-mqtt", f"rainierd-monitor-{i}.toml")
                           for i in range(n)}
        (container,) = statefulset["spec"]["template"]["spec"]["containers"]
        assert [e for e in container["envFrom"] if "secretRef" in e] == []
        acl = acl_users((DEPLOY / "mosquitto" / "acl").read_text())
        users = [f"rainierd-monitor-{i}" for i in range(n)]
        assert {u: acl.get(u) for u in users} == dict.fromkeys(users, MONITOR_TOPICS)
        assert set(users) <= set(credential_users())


AGGREGATOR_TOPICS = {"read rainier/v1/telemetry/+/+/+/+", "write rainier/v1/telemetry/+/+/batch/+"}


class TestAggregated:
    """The aggregation tier in compose.aggregated.yaml and kubernetes/aggregated (docs/aggregation.md)."""

    def test_compose_runs_two_aggregators_each_its_own_user_and_the_monitor_hears_batches(self) -> None:
        """The overlay's aggregators take shares 0/2 and 1/2, each under a user make-credentials makes and the
        ACL lets read node frames and write batches; the monitor hears batches only, and the simulator
        publishes one frame per node."""
        overlay = yaml.safe_load((DEPLOY / "compose.aggregated.yaml").read_text())["services"]
        users = {}
        for service in overlay.values():
            if "RAINIERD_SHARD" in service.get("environment", {}):
                # Compose appends env_file lists through extends, and the last file's values stand.
                parent = overlay.get(service.get("extends", {}).get("service", ""), {})
                env_files = [*parent.get("env_file", []), *service.get("env_file", [])]
                users[service["environment"]["RAINIERD_SHARD"]] = Path(env_files[-1]).stem
        assert users == {"0/2": "rainierd-aggregate-0", "1/2": "rainierd-aggregate-1"}
        assert overlay["aggregate-0"]["command"] == ["aggregate"]
        acl = acl_users((DEPLOY / "mosquitto" / "acl").read_text())
        assert {u: acl.get(u) for u in users.values()} == dict.fromkeys(users.values(), AGGREGATOR_TOPICS)
        assert set(users.values()) <= set(credential_users())
        assert overlay["monitor"]["environment"] == {"RAINIERD_TELEMETRY_INPUT": "batches"}
        assert overlay["simulate"]["environment"] == {"RAINIERD_BATCH_NODES": "0"}
        targets = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.aggregated.yml").read_text())["scrape_configs"]
        assert {job["job_name"]: job["static_configs"][0]["targets"] for job in targets}["rainierd-aggregate"] == [
            "aggregate-0:9780", "aggregate-1:9780"]

    def test_the_statefulset_gives_each_ordinal_its_share_and_its_own_user(self) -> None:
        """Pod ordinal i is share i/N and reads rainierd-aggregate-<i>.toml from a Secret, a user the ACL lets
        aggregate; its probes ask /healthz and /readyz on its metrics port."""
        path = DEPLOY / "kubernetes" / "aggregated" / "aggregate-statefulset.yaml"
        statefulset = yaml.safe_load(path.read_text())
        n = statefulset["spec"]["replicas"]
        assert statefulset_shard_configs(statefulset) == {
            f"{i}/{n}": ("rainierd-aggregate-mqtt", f"rainierd-aggregate-{i}.toml") for i in range(n)}
        (container,) = statefulset["spec"]["template"]["spec"]["containers"]
        assert container["args"] == ["aggregate"]
        assert (container["livenessProbe"]["httpGet"]["path"], container["readinessProbe"]["httpGet"]["path"]) == (
            "/healthz", "/readyz")
        acl = acl_users((DEPLOY / "mosquitto" / "acl").read_text())
        users = [f"rainierd-aggregate-{i}" for i in range(n)]
        assert {u: acl.get(u) for u in users} == dict.fromkeys(users, AGGREGATOR_TOPICS)

    def test_the_overlay_lists_its_manifests_and_points_the_monitor_at_batches(self) -> None:
        """The kustomization takes the base, every manifest beside it, and patches the monitor to hear batches
        and the simulator to publish one frame per node."""
        kust = yaml.safe_load((DEPLOY / "kubernetes" / "aggregated" / "kustomization.yaml").read_text())
        assert sorted(kust["resources"]) == sorted(
            ["../base", *(p.name for p in (DEPLOY / "kubernetes" / "aggregated").glob("*.yaml")
                          if p.name != "kustomization.yaml")])
        patches = [yaml.safe_load(p["patch"]) for p in kust["patches"]]
        env = {p["metadata"]["name"]: p["spec"]["template"]["spec"]["containers"][0]["env"] for p in patches}
        assert env == {"rainierd-monitor": [{"name": "RAINIERD_TELEMETRY_INPUT", "value": "batches"}],
                       "rainierd-simulate": [{"name": "RAINIERD_BATCH_NODES", "value": "0"}]}

    @pytest.mark.integration  # runs kubernetes-validate
    def test_its_builtin_kinds_pass_kubernetes_validate_strict(self, tmp_path: Path) -> None:
        """kubernetes-validate --strict accepts the StatefulSet and the Service."""
        docs = [yaml.safe_load(p.read_text()) for p in (DEPLOY / "kubernetes" / "aggregated").glob("aggregate-*.yaml")]
        builtin = [d for d in docs if d["kind"] in {"StatefulSet", "Service"}]
        assert len(builtin) == 2
        assert_valid_strictly(builtin, tmp_path)


NODES = DEPLOY / "kubernetes" / "nodes"
MONITOR_JSON = DEPLOY / "neuron-monitor" / "monitor.json"
NODE_KINDS = {"ConfigMap", "DaemonSet"}  # built-in; the PodMonitor is prometheus-operator's
# neuron-monitor's groups the bridge reads: per Neuron application, and system-wide (docs/real-nodes.md).
RUNTIME_GROUPS, SYSTEM_GROUPS = ["neuroncore_counters", "memory_used", "execution_stats"], ["neuron_hw_counters"]
LOCKED_DOWN = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "allowPrivilegeEscalation": False,
               "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def node_manifests() -> list[dict[str, Any]]:
    """Render deploy/kubernetes/nodes by reading its resources (no generators or transformers)."""
    kust = yaml.safe_load((NODES / "kustomization.yaml").read_text())
    return [doc for name in kust["resources"] for doc in yaml.safe_load_all((NODES / name).read_text())]


def daemonset() -> dict[str, Any]:
    (found,) = [m for m in node_manifests() if m["kind"] == "DaemonSet"]
    return found


def pod_containers() -> dict[str, dict[str, Any]]:
    pod = daemonset()["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*pod["initContainers"], *pod["containers"]]}


def bridge_command() -> str:
    container = pod_containers()["bridge"]
    assert container["command"] == ["/bin/sh", "-c"]
    (script,) = container["args"]
    return str(script)


class TestNodes:
    """deploy/kubernetes/nodes: neuron-monitor and the bridge on every Trainium2 node."""

    def test_kustomization_lists_every_manifest(self) -> None:
        """Every manifest file is a resource of the kustomization, which uses nothing but resources."""
        kust = yaml.safe_load((NODES / "kustomization.yaml").read_text())
        assert set(kust) == {"apiVersion", "kind", "resources"}
        assert sorted(kust["resources"]) == sorted(
            p.name for p in NODES.glob("*.yaml") if p.name != "kustomization.yaml")

    @pytest.mark.integration  # runs kubernetes-validate
    def test_builtin_kinds_pass_kubernetes_validate_strict(self, tmp_path: Path) -> None:
        """kubernetes-validate --strict accepts the ConfigMaps and the DaemonSet (unknown fields rejected)."""
        builtin = [m for m in node_manifests() if m["kind"] != "PodMonitor"]
        assert {m["kind"] for m in builtin} == NODE_KINDS
        assert_valid_strictly(builtin, tmp_path)

    @pytest.mark.kubectl
    def test_kubectl_kustomize_renders_the_same_manifests(self) -> None:
        """kubectl's kustomize renders exactly the files' documents."""
        if shutil.which("kubectl") is None:
            pytest.skip("kubectl is not installed: the other tests read the files, which is the same rendering")
        key = lambda m: (m["kind"], m["metadata"]["name"])  # noqa: E731
        assert sorted(kustomize(NODES), key=key) == sorted(node_manifests(), key=key)

    def test_on_trainium2_nodes_only_tolerating_their_taint(self) -> None:
        """It schedules on trn2.48xlarge and trn2u.48xlarge nodes (any of them: a node affinity), and tolerates
        the Neuron taint."""
        pod = daemonset()["spec"]["template"]["spec"]
        (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term == {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                              "values": ["trn2.48xlarge", "trn2u.48xlarge"]}]}
        assert pod["tolerations"] == [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}]

    def test_images_are_pinned_rainierd_at_the_package_version(self) -> None:
        """Every image names an exact release: rainierd's the package version, neuron-monitor AWS's."""
        assert {name: c["image"] for name, c in pod_containers().items()} == {
            "make-fifo": f"rainierd:{VERSION}", "bridge": f"rainierd:{VERSION}",
            "neuron-monitor": "public.ecr.aws/neuron/neuron-monitor:1.3.0"}

    def test_only_neuron_monitor_is_privileged_and_the_rest_locked_down(self) -> None:
        """rainierd's containers run as uid 10001 with nothing (read-only root, no capabilities, no escalation);
        neuron-monitor alone is privileged, as AWS runs it, with no port and no credential; no pod token, the
        RuntimeDefault seccomp profile."""
        pod = daemonset()["spec"]["template"]["spec"]
        assert (pod["automountServiceAccountToken"], pod["securityContext"]["seccompProfile"]) == (
            False, {"type": "RuntimeDefault"})
        assert {name: c["securityContext"] for name, c in pod_containers().items()} == {
            "make-fifo": LOCKED_DOWN, "bridge": LOCKED_DOWN, "neuron-monitor": {"privileged": True}}
        monitor = pod_containers()["neuron-monitor"]
        assert not {"ports", "env", "envFrom"} & set(monitor)

    def test_the_fifo_joins_neuron_monitor_to_the_bridge_read_write(self) -> None:
        """The init container makes a FIFO on the shared in-memory emptyDir; neuron-monitor writes its reports
        into it, with the shipped configuration; the bridge opens it read-write as its stdin (no end-of-file
        when neuron-monitor restarts)."""
        containers, pod = pod_containers(), daemonset()["spec"]["template"]["spec"]
        fifo = "/run/neuron-monitor/reports"
        assert {name: [m["mountPath"] for m in c["volumeMounts"] if m["name"] == "reports"]
                for name, c in containers.items()} == {name: ["/run/neuron-monitor"] for name in containers}
        assert {"name": "reports", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in pod["volumes"]
        assert containers["make-fifo"]["command"][-1] == f"test -p {fifo} || mkfifo -m 0660 {fifo}"
        assert containers["neuron-monitor"]["command"][-1] == (
            f"exec /opt/aws/neuron/bin/neuron-monitor -c /etc/neuron-monitor/monitor.json > {fifo}")
        assert bridge_command().endswith(f" 0<>{fifo}")
        config = next(v for v in pod["volumes"] if v["name"] == "neuron-monitor-config")
        assert config["configMap"]["name"] == "rainierd-neuron-monitor"

    def test_the_bridge_reads_the_hosts_sysfs_read_only_and_nothing_else_of_the_host(self) -> None:
        """The only host path is /sys, mounted read-only in the bridge alone where --efa-sysfs points (the
        class/infiniband entries are symlinks into devices/, so the whole tree)."""
        pod = daemonset()["spec"]["template"]["spec"]
        assert [v for v in pod["volumes"] if "hostPath" in v] == [
            {"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}}]
        mounts = {name: [m for m in c.get("volumeMounts", []) if m["name"] == "host-sys"]
                  for name, c in pod_containers().items()}
        assert mounts == {"make-fifo": [], "neuron-monitor": [],
                          "bridge": [{"name": "host-sys", "mountPath": "/host/sys", "readOnly": True}]}
        assert " --efa-sysfs /host/sys " in bridge_command()

    def test_the_bridge_is_its_node_by_the_downward_api_with_its_own_credentials(self) -> None:
        """--node is the pod's node name (spec.nodeName), and the settings file holding its broker user is the
        one named after that node in the Secret; no credential is written in a manifest."""
        bridge = pod_containers()["bridge"]
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in bridge["env"]}
        assert env == {"NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                       "RAINIERD_CONFIG": "/etc/rainierd/mqtt/$(NODE_NAME).toml"}
        assert 'bridge neuron-monitor --node "$NODE_NAME" ' in bridge_command()
        assert {"name": "mqtt-credentials", "mountPath": "/etc/rainierd/mqtt", "readOnly": True} in (
            bridge["volumeMounts"])
        pod = daemonset()["spec"]["template"]["spec"]
        assert {"name": "mqtt-credentials", "secret": {"secretName": "rainierd-bridge-mqtt", "defaultMode": 0o440}} in (
            pod["volumes"])
        assert "Secret" not in {m["kind"] for m in node_manifests()}
        assert not re.search(r"PASSWORD|USERNAME", yaml.safe_dump_all(node_manifests()))

    def test_probes_ask_health_and_readiness_where_the_bridge_listens(self) -> None:
        """Startup and liveness ask /healthz, readiness /readyz, on the named port --listen opens on the pod IP."""
        bridge = pod_containers()["bridge"]
        assert bridge["ports"] == [{"name": "metrics", "containerPort": 9781, "protocol": "TCP"}]
        assert " --listen 0.0.0.0:9781 " in bridge_command()
        assert {k: (bridge[k]["httpGet"]["path"], bridge[k]["httpGet"]["port"])
                for k in ("startupProbe", "livenessProbe", "readinessProbe")} == {
            "startupProbe": ("/healthz", "metrics"), "livenessProbe": ("/healthz", "metrics"),
            "readinessProbe": ("/readyz", "metrics")}

    def test_every_container_has_requests_and_a_memory_limit(self) -> None:
        """No container runs unbounded: CPU and memory requests, a memory limit at least the request."""
        for name, container in pod_containers().items():
            resources = container["resources"]
            assert (set(resources["requests"]), set(resources["limits"])) == ({"cpu", "memory"}, {"memory"}), name
            request, limit = (int(re.fullmatch(r"(\d+)Mi", v)[1])  # type: ignore[index]
                              for v in (resources["requests"]["memory"], resources["limits"]["memory"]))
            assert limit >= request, name

    def test_the_podmonitor_scrapes_the_bridges_as_job_rainierd_bridge(self) -> None:
        """The PodMonitor selects the DaemonSet's pods, scrapes their named port, and names the job from the
        pods' own label."""
        (monitor,) = [m for m in node_manifests() if m["kind"] == "PodMonitor"]
        labels = daemonset()["spec"]["template"]["metadata"]["labels"]
        spec = monitor["spec"]
        assert spec["selector"]["matchLabels"].items() <= labels.items()
        assert labels[spec["jobLabel"]] == "rainierd-bridge"
        assert [e["port"] for e in spec["podMetricsEndpoints"]] == ["metrics"]


class TestNeuronMonitorConfig:
    """deploy/neuron-monitor/monitor.json, and the copies that ship it."""

    def test_it_enables_the_groups_the_bridge_reads_every_5_s_for_every_application(self) -> None:
        """Per Neuron application (every tag): neuroncore_counters, memory_used, execution_stats; system-wide:
        neuron_hw_counters; the period neuron-monitor defaults to, 5 s, written out."""
        config = json.loads(MONITOR_JSON.read_text())
        assert config == {"period": "5s",
                          "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": g} for g in RUNTIME_GROUPS]}],
                          "system_metrics": [{"type": g} for g in SYSTEM_GROUPS]}

    def test_the_kubernetes_configmap_carries_it_unchanged(self) -> None:
        """The ConfigMap's monitor.json is the file, byte for byte: change one and this fails until both agree."""
        (configmap,) = [m for m in node_manifests() if m["metadata"]["name"] == "rainierd-neuron-monitor"]
        assert configmap["data"] == {"monitor.json": MONITOR_JSON.read_text()}


SYSTEMD = DEPLOY / "systemd"
UNITS = ("rainierd-bridge.service", "rainierd-neuron-monitor.service")


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """Return a unit file's directives by section, each a list of its values in order (systemd.syntax(7):
    comments start with # or ;, a key may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in (SYSTEMD / name).read_text().splitlines():
        if not line.strip() or line.lstrip().startswith(("#", ";")):
            continue
        if header := re.fullmatch(r"\[(\w+)\]", line.strip()):
            current = sections.setdefault(header[1], {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


class TestSystemd:
    """deploy/systemd: the bridge and neuron-monitor as hardened services joined by a FIFO."""

    @pytest.mark.systemd
    def test_systemd_analyze_verify_finds_nothing(self) -> None:
        """systemd-analyze verify loads both units without an error or a warning (an unknown directive or a
        bad value is a warning)."""
        result = subprocess.run([tool("systemd-analyze"), "verify", *(str(SYSTEMD / u) for u in UNITS)],
                                capture_output=True, text=True, check=False, timeout=60)
        assert (result.returncode, result.stdout + result.stderr) == (0, "")

    @pytest.mark.systemd
    def test_the_bridges_exposure_is_low(self) -> None:
        """systemd-analyze security rates the bridge's sandbox 1.2 of 10 ("OK"): pinned, so a weakening shows."""
        result = subprocess.run([tool("systemd-analyze"), "security", "--offline=yes", str(SYSTEMD / UNITS[0])],
                                capture_output=True, text=True, check=False, timeout=60)
        (level,) = re.findall(r"Overall exposure level for rainierd-bridge.service: ([\d.]+)", result.stdout)
        assert float(level) <= 1.2, result.stdout

    def test_the_bridge_runs_as_nobody_with_nothing(self) -> None:
        """A dynamic user, no capabilities, no new privileges, a read-only system, no home, private /tmp and
        devices, the kernel's tunables, modules and logs out of reach, IPv4/6 and Unix sockets only, the
        system-service syscalls less the privileged ones."""
        service = unit("rainierd-bridge.service")["Service"]
        hardening = {k: service.get(k) for k in (
            "DynamicUser", "CapabilityBoundingSet", "AmbientCapabilities", "NoNewPrivileges", "ProtectSystem",
            "ProtectHome", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables", "ProtectKernelModules",
            "ProtectKernelLogs", "RestrictAddressFamilies", "SystemCallFilter")}
        assert hardening == {
            "DynamicUser": ["yes"], "CapabilityBoundingSet": [""], "AmbientCapabilities": [""],
            "NoNewPrivileges": ["yes"], "ProtectSystem": ["strict"], "ProtectHome": ["yes"], "PrivateTmp": ["yes"],
            "PrivateDevices": ["yes"], "ProtectKernelTunables": ["yes"], "ProtectKernelModules": ["yes"],
            "ProtectKernelLogs": ["yes"], "RestrictAddressFamilies": ["AF_INET AF_INET6 AF_UNIX"],
            "SystemCallFilter": ["@system-service", "~@privileged"]}

    def test_the_password_is_a_credential_not_an_environment_variable(self) -> None:
        """The node's settings file (make-credentials' n<id>.toml) is loaded as a systemd credential and named by
        RAINIERD_CONFIG; the environment file holds the broker's address only (no password in the unit)."""
        service = unit("rainierd-bridge.service")["Service"]
        assert service["LoadCredential"] == ["mqtt.toml:/etc/rainierd/bridge-mqtt.toml"]
        assert "RAINIERD_CONFIG=%d/mqtt.toml" in service["Environment"][0].split()
        assert not re.search(r"PASSWORD", (SYSTEMD / "rainierd-bridge.service").read_text().split("\n[Service]")[1]
                             .replace("RAINIERD_MQTT_URL", ""))

    def test_neuron_monitor_writes_into_the_fifo_the_bridge_reads_read_write(self) -> None:
        """The bridge makes the FIFO in its runtime directory (kept across its restarts) and opens it read-write
        as stdin; neuron-monitor writes into it only if it is a FIFO, starts after the bridge, stops with it,
        and never gives up restarting."""
        bridge, monitor = unit("rainierd-bridge.service"), unit("rainierd-neuron-monitor.service")
        fifo = "%t/rainierd-bridge/reports"
        assert (bridge["Service"]["RuntimeDirectory"], bridge["Service"]["RuntimeDirectoryPreserve"]) == (
            ["rainierd-bridge"], ["restart"])
        assert f"mkfifo -m 0600 {fifo}" in bridge["Service"]["ExecStartPre"][0]
        assert bridge["Service"]["ExecStart"][0].endswith(f" 0<>{fifo}'")
        assert " --listen 127.0.0.1:9781 " in bridge["Service"]["ExecStart"][0]
        assert monitor["Service"]["ExecStart"] == [
            f"/bin/sh -c 'test -p {fifo} && exec /opt/aws/neuron/bin/neuron-monitor -c "
            f"/etc/rainierd/neuron-monitor.json > {fifo}'"]
        assert {k: monitor["Unit"][k] for k in ("After", "PartOf", "StartLimitIntervalSec")} == {
            "After": ["rainierd-bridge.service"], "PartOf": ["rainierd-bridge.service"], "StartLimitIntervalSec": ["0"]}
        assert "rainierd-neuron-monitor.service" in bridge["Unit"]["Wants"][0].split()
