"""Helpers only the tests need: test-sized rules and a Prometheus config for
them, and the deployment checkers (kubectl kustomize, kubernetes-validate).
What the benchmarks need too (free ports, brokers, Prometheus, scrapes,
waits) is the process harness, harness/."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rainierd.promrules import RULES_DIR, write_overridden

__all__ = ["assert_valid_strictly", "kustomize", "rainierd_prometheus_config", "rules_for_tests", "tool"]


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
