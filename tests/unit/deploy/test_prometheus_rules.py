"""The Prometheus rules ship checked: promtool accepts them, every alert's
unit tests pass, the job rules price the step as pace.py does and give one
monitor back its own figures (its jobs' and its fleet's lost FP8 headline),
and every runbook link lands on a section of docs/runbooks.md."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rainierd.errors import ConfigError
from rainierd.exporter import build_exporter
from rainierd.exporter.jobs import JobFamilies
from rainierd.fleet.pace import CAUSES, SHARES
from rainierd.promrules import (
    RULES_DIR,
    RUNBOOK_BASE,
    rebase_runbooks,
    set_job_goodput_objective,
    write_overridden,
)
from tests.unit.exporter.test_jobs import THREE_JOBS, TOPO, analysed, snapshot_of

ROOT = Path(__file__).parents[3]
RULES = sorted((ROOT / "deploy" / "prometheus" / "rules").glob("*.yml"))
TESTS = sorted((ROOT / "deploy" / "prometheus" / "tests").glob("*.yml"))


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: apt-get install prometheus (scripts/test does)")
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, check=False, timeout=120)


@pytest.mark.prometheus
def test_rules_pass_promtool_check() -> None:
    """promtool check rules accepts every rule file."""
    result = run("check", "rules", *map(str, RULES))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.prometheus
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
    text = "".join(p.read_text() for p in RULES)
    blocks = text.split("- alert: ")[1:]
    assert len(blocks) >= 3
    for block in blocks:
        for key in ("severity:", "summary:", "description:", "runbook_url:"):
            assert key in block, (block.split()[0], key)


def runbook_urls(text: str) -> list[str]:
    return re.findall(r"runbook_url:\s*(\S+)", text)


def test_runbook_links_resolve() -> None:
    """Every runbook_url is docs/runbooks.md of the public repository, absolute, at one of its headings."""
    headings = re.findall(r"^## (.+)$", (ROOT / "docs" / "runbooks.md").read_text(), re.MULTILINE)
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
    urls = runbook_urls("".join(p.read_text() for p in RULES))
    assert RUNBOOK_BASE.startswith("https://")
    assert RUNBOOK_BASE.endswith("/docs/runbooks.md")
    assert {url.partition("#")[0] for url in urls} == {RUNBOOK_BASE}
    assert len(urls) == len(re.findall(r"- alert: ", "".join(p.read_text() for p in RULES)))
    assert {url.partition("#")[2] for url in urls} <= anchors


@pytest.mark.prometheus
def test_runbook_base_moves_every_link_and_nothing_else(tmp_path: Path) -> None:
    """`--runbook-base` points each alert at the same section of the user's document and leaves every other line."""
    written = write_overridden(RULES_DIR, tmp_path, None, runbook_base="https://wiki.example.com/ops/rainierd")
    for source, copy in zip(sorted(RULES_DIR.glob("*.yml")), written, strict=True):
        before, after = source.read_text().splitlines(), copy.read_text().splitlines()
        changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
        assert changed == [(a, a.replace(RUNBOOK_BASE, "https://wiki.example.com/ops/rainierd"))
                           for a in before if RUNBOOK_BASE in a]
    assert {url.partition("#")[0] for p in written for url in runbook_urls(p.read_text())} == {
        "https://wiki.example.com/ops/rainierd"}
    result = run("check", "rules", *map(str, written))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("base", ["docs/runbooks.md", "ftp://wiki.example.com/r", "https://wiki.example.com/r#x"])
def test_runbook_base_must_be_an_absolute_http_url(base: str) -> None:
    """A relative, non-http or fragment-carrying base is refused before anything is written."""
    with pytest.raises(ConfigError, match="--runbook-base"):
        rebase_runbooks("runbook_url: x\n", base)


@pytest.mark.prometheus
def test_job_goodput_objective_moves_the_constant_and_nothing_else(tmp_path: Path) -> None:
    """`--job-goodput-objective 0.995` rewrites the one objective rule's value and leaves every other line."""
    written = write_overridden(RULES_DIR, tmp_path, None, job_goodput_objective=0.995)
    changed = [
        (a, b)
        for source, copy in zip(sorted(RULES_DIR.glob("*.yml")), written, strict=True)
        for a, b in zip(source.read_text().splitlines(), copy.read_text().splitlines(), strict=True)
        if a != b
    ]
    assert changed == [("        expr: vector(0.99)", "        expr: vector(0.995)")]
    result = run("check", "rules", *map(str, written))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.prometheus
@pytest.mark.parametrize(("objective", "firing"), [
    (None, ["RainierJobGoodputBudgetBurnFast", "RainierJobGoodputBudgetBurnSlow"]),
    (0.95, []),
])
def test_job_goodput_objective_reaches_the_burn_rate_alerts(
    tmp_path: Path, objective: float | None, firing: list[str],
) -> None:
    """A job losing 20 % of its FP8 burns a 0.99 objective's budget 20 times (both alerts fire) and a 0.95
    objective's 4 times (neither): the objective written by the option is the one the alerts divide by."""
    rules = write_overridden(RULES_DIR, tmp_path / "rules", "0s", job_goodput_objective=objective)
    job = 'training_job="a/1",instance="m1:9780",job="rainierd"'
    alerts = ["RainierJobGoodputBudgetBurnFast", "RainierJobGoodputBudgetBurnSlow"]
    test = {
        "rule_files": [str(p) for p in rules if p.name == "rainierd-jobs.yml"],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [  # a straggler at 3/4 pace: 80 x 0.75 x (4/3 - 1) = 20 lost
                {"series": f"rainier_job_fp8_effective_flops{{{job}}}", "values": "80x40"},
                {"series": f"rainier_job_slowest_speed{{{job}}}", "values": "0.75x40"},
                {"series": f"rainier_job_slowest_is_straggler{{{job}}}", "values": "1x40"},
                {"series": f'rainier_job_path_fraction{{{job},path="neuronlink"}}', "values": "1x40"},
                {"series": f'rainier_job_path_fraction{{{job},path="efa"}}', "values": "1x40"},
                {"series": f"rainier_job_stalled{{{job}}}", "values": "0x40"},
                {"series": f"rainier_job_member_failed{{{job}}}", "values": "0x40"},
                {"series": f"rainier_job_fp8_learned_healthy_flops{{{job}}}", "values": "100x40"},
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": name,
                 "exp_alerts": [{"exp_labels": {"severity": severity, "training_job": "a/1"}, "exp_annotations": {
                     "summary": f"Training job a/1 lost 20% of its FP8 over {window}, most to straggler",
                     "description": f"Training job a/1 (no job document) burns its goodput error budget at {rate} "
                                    f"times or more over both {words}: at this rate a 30-day budget is gone in {days} "
                                    "days. Its costliest culprit now: none named.",
                     "runbook_url": f"{RUNBOOK_BASE}#training-job-goodput-budget-burn"}}]
                 if name in firing else []}
                for name, severity, window, rate, words, days in [
                    (alerts[0], "critical", "1h", "14.4", "the last hour and the last 5 minutes", 2),
                    (alerts[1], "warning", "6h", "6", "the last 6 hours and the last 30 minutes", 5),
                ]
            ],
        }],
    }
    (tmp_path / "test.yml").write_text(json.dumps(test))
    result = run("test", "rules", str(tmp_path / "test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_job_rules_price_the_step_with_pace_s_shares() -> None:
    """The per-job rules' constants are rainierd/fleet/pace.py's shares of a healthy step (compute, NeuronLink, EFA), so
    the rules price a job spanning shards with the formula each monitor prices its share with."""
    text = (RULES_DIR / "rainierd-jobs.yml").read_text()
    found = re.findall(r"\(([0-9.]+) \* \(1 / rainier:job_(?:slowest_speed|path_fraction):min"
                       r"(?:\{path=\"(\w+)\"\})? - 1\)\)", text)
    assert sorted((term or "compute", float(share)) for share, term in found) == sorted([
        ("compute", 1.0 - SHARES.comm_share), ("compute", 1.0 - SHARES.comm_share),  # throttle and straggler
        ("efa", SHARES.comm_efa_share), ("neuronlink", SHARES.comm_nl_share)])


@pytest.mark.prometheus
def test_one_monitor_s_job_figures_come_back_through_the_rules(tmp_path: Path) -> None:
    """Fed one monitor's rendered job families (three jobs, a degraded NeuronLink and a straggler), the rules give
    back exactly its lost FP8 by cause and its slowest speeds: a single monitor's figures are unchanged."""
    analysis, _peak = analysed(THREE_JOBS)
    text = JobFamilies(TOPO, lambda: snapshot_of(analysis)).render().decode()
    found = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples
             if s.name.startswith("rainier_job_") and "training_job" in s.labels]

    def series(name: str, labels: dict[str, str]) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in {**labels, "instance": "m1:9780"}.items()) + "}"

    def exp(rule: str, family: str) -> list[dict[str, object]]:
        return [{"labels": rule + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "value": value}
                for name, labels, value in found if name == family]
    test = {
        "rule_files": [str(RULES_DIR / "rainierd-jobs.yml")],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [{"series": series(name, labels), "values": f"{value!r}x4"}
                             for name, labels, value in found if name != "rainier_job_info"],
            "promql_expr_test": [
                {"expr": "rainier:job_fp8_lost_flops:sum_by_cause", "eval_time": "30s",
                 "exp_samples": exp("rainier:job_fp8_lost_flops:sum_by_cause", "rainier_job_fp8_lost_flops")},
                {"expr": "rainier:job_slowest_speed:min", "eval_time": "30s",
                 "exp_samples": exp("rainier:job_slowest_speed:min", "rainier_job_slowest_speed")},
            ],
        }],
    }
    assert any(v > 0 for name, _labels, v in found if name == "rainier_job_fp8_lost_flops")
    (tmp_path / "test.yml").write_text(json.dumps(test))
    result = run("test", "rules", str(tmp_path / "test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.prometheus
def test_one_monitor_s_fleet_headline_comes_back_through_the_rules(tmp_path: Path) -> None:
    """Fed one monitor's whole scrape (two jobs, one with a degraded NeuronLink, and an UltraServer's two nodes in no
    job holding a straggler), the rules give back its own lost FP8 by cause, every cause (0 included), and its
    goodput: the whole jobs' losses plus the capacity in no job's are the monitor's headline."""
    analysis, _peak = analysed(THREE_JOBS[:2])
    text = build_exporter(TOPO, lambda: snapshot_of(analysis), process_metrics=False).render().decode()
    found = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
    own = {s: {labels.get("cause"): value for name, labels, value in found if name == s}
           for s in ("rainier_fleet_fp8_lost_flops", "rainier_fleet_fp8_unallocated_lost_flops",
                     "rainier_fleet_goodput_ratio")}
    read = [(name, labels, value) for name, labels, value in found
            if (name.startswith("rainier_job_") and "training_job" in labels)
            or name in ("rainier_fleet_fp8_unallocated_lost_flops", "rainier_fleet_fp8_effective_flops")]

    def series(name: str, labels: dict[str, str]) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in {**labels, "instance": "m1:9780"}.items()) + "}"

    rule = "rainier:fleet_fp8_lost_flops:sum_by_cause"
    test = {
        "rule_files": [str(RULES_DIR / "rainierd-jobs.yml")],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [{"series": series(name, labels), "values": f"{value!r}x4"}
                             for name, labels, value in read if name != "rainier_job_info"],
            "promql_expr_test": [
                {"expr": rule, "eval_time": "30s", "exp_samples": [
                    {"labels": f'{rule}{{cause="{cause}"}}', "value": value}
                    for cause, value in own["rainier_fleet_fp8_lost_flops"].items()]},
                {"expr": "rainier:fleet_goodput:ratio", "eval_time": "30s", "exp_samples": [
                    {"labels": "rainier:fleet_goodput:ratio", "value": own["rainier_fleet_goodput_ratio"][None]}]},
            ],
        }],
    }
    assert set(own["rainier_fleet_fp8_lost_flops"]) == set(CAUSES)
    assert own["rainier_fleet_fp8_unallocated_lost_flops"]["straggler"] > 0
    assert own["rainier_fleet_fp8_lost_flops"]["degraded_neuronlink"] > 0
    (tmp_path / "test.yml").write_text(json.dumps(test))
    result = run("test", "rules", str(tmp_path / "test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("objective", [0.0, 1.0, 1.5, -0.01])
def test_job_goodput_objective_must_lie_strictly_between_0_and_1(objective: float) -> None:
    """An objective of 0, 1 or outside them is refused: 1 leaves no budget and the burn rates would divide by 0."""
    with pytest.raises(ConfigError, match="--job-goodput-objective"):
        set_job_goodput_objective("", objective)


def test_job_goodput_objective_needs_the_objective_rule(tmp_path: Path) -> None:
    """Rule files without the objective's rule refuse an objective rather than silently keep their own."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "r.yml").write_text("groups: []\n")
    with pytest.raises(ConfigError, match="found 0"):
        write_overridden(tmp_path / "src", tmp_path / "out", None, job_goodput_objective=0.9)


@pytest.mark.integration  # runs `python -m rainierd rules`
def test_rules_command_writes_test_sized_rebased_copies(tmp_path: Path) -> None:
    """`rainierd rules OUT --for 5s --runbook-base URL` writes promtool-clean copies with both applied."""
    result = subprocess.run(
        [sys.executable, "-m", "rainierd", "rules", str(tmp_path), "--for", "5s",
         "--runbook-base", "https://wiki.example.com/r"],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "rainierd-alerts.yml").read_text()
    assert set(re.findall(r"for: (\S+)", text)) == {"5s"}
    assert {url.partition("#")[0] for url in runbook_urls(text)} == {"https://wiki.example.com/r"}


@pytest.mark.prometheus
def test_deploy_prometheus_config_is_valid() -> None:
    """The compose deployment's Prometheus configuration passes promtool check config."""
    result = run("check", "config", str(ROOT / "deploy" / "prometheus" / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_deployed_rules_are_the_ones_the_package_ships() -> None:
    """deploy/prometheus/rules is the package's rules: `rainierd rules` from a wheel writes the same files."""
    assert (ROOT / "deploy" / "prometheus" / "rules").resolve() == RULES_DIR.resolve()
    assert [p.name for p in RULES] == sorted(p.name for p in RULES_DIR.glob("*.yml"))
    assert len(RULES) >= 2
