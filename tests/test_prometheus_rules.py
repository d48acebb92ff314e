"""The Prometheus rules ship checked: promtool accepts them, every alert's
unit tests pass, and every runbook link lands on a section of docs/runbooks.md."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rainierd.promrules import RULES_DIR

ROOT = Path(__file__).parents[1]
RULES = sorted((ROOT / "deploy" / "prometheus" / "rules").glob("*.yml"))
TESTS = sorted((ROOT / "deploy" / "prometheus" / "tests").glob("*.yml"))


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: apt-get install prometheus (scripts/test does)")
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, check=False, timeout=120)


def test_rules_pass_promtool_check() -> None:
    """promtool check rules accepts every rule file."""
    result = run("check", "rules", *map(str, RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_unit_tests_pass() -> None:
    """promtool test rules passes for every alert (fires, ignores a blip, resolves) and the recording rules."""
    result = run("test", "rules", *map(str, TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test() -> None:
    """Each alert of the rule files is exercised by name in the unit tests."""
    alerts = set(re.findall(r"- alert: (\w+)", "".join(p.read_text() for p in RULES)))
    tested = set(re.findall(r'"alertname": "(\w+)"', "".join(p.read_text() for p in TESTS)))
    assert alerts == tested


def test_every_alert_has_severity_summary_description_and_runbook() -> None:
    """No alert ships without a severity, a summary, a description and a runbook link."""
    text = (ROOT / "deploy" / "prometheus" / "rules" / "rainierd-alerts.yml").read_text()
    blocks = text.split("- alert: ")[1:]
    for block in blocks:
        for key in ("severity:", "summary:", "description:", "runbook_url:"):
            assert key in block, (block.split()[0], key)


def test_runbook_links_resolve() -> None:
    """Every runbook_url anchor is a heading of docs/runbooks.md."""
    headings = re.findall(r"^## (.+)$", (ROOT / "docs" / "runbooks.md").read_text(), re.MULTILINE)
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
    links = set(re.findall(r"runbook_url: docs/runbooks\.md#([\w-]+)", "".join(p.read_text() for p in RULES)))
    assert links
    assert links <= anchors


def test_deploy_prometheus_config_is_valid() -> None:
    """The compose deployment's Prometheus configuration passes promtool check config."""
    result = run("check", "config", str(ROOT / "deploy" / "prometheus" / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_deployed_rules_are_the_ones_the_package_ships() -> None:
    """deploy/prometheus/rules is the package's rules: `rainierd rules` from a wheel writes the same files."""
    assert (ROOT / "deploy" / "prometheus" / "rules").resolve() == RULES_DIR.resolve()
    assert [p.name for p in RULES] == sorted(p.name for p in RULES_DIR.glob("*.yml"))
    assert len(RULES) >= 2
