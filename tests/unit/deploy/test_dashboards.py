"""Specification of the Grafana dashboards (grafana/dashboards/): valid JSON
with stable uids, generated from grafana/generate.py without drift, no
hard-coded datasource, a unit on every panel and one unit per axis, readable
tables, alert and health-event annotations, the drill-down link, and every
query valid PromQL as a real Prometheus parses it after Grafana's variable
substitution.  tests/e2e/test_dashboards.py asks the same
queries of a Prometheus scraping a running rainierd, for data.
"""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.procs import start_prometheus
from rainierd.core.detect import STATE_NAMES

ROOT = Path(__file__).parents[3]
DASHBOARDS = ROOT / "grafana" / "dashboards"
UIDS = {"rainierd-fleet.json": "rainierd-fleet", "rainierd-ultraserver.json": "rainierd-ultraserver",
        "rainierd-self.json": "rainierd-self", "rainierd-aggregate.json": "rainierd-aggregate",
        "rainierd-jobs.json": "rainierd-jobs"}
LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.*),\s*)?(?P<label>\w+)\)$")


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((DASHBOARDS / name).read_text()))


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' nested panels included, rows themselves not."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def grafana_intervals(scrape_interval_s: float) -> dict[str, str]:
    """Grafana's built-in interval variables for a 1-minute range at Prometheus's default step and
    ``scrape_interval_s``: ``$__rate_interval`` is max(4 x scrape interval, step + scrape interval)."""
    step_s = 2.0
    rate_s = max(4 * scrape_interval_s, step_s + scrape_interval_s)
    return {"__rate_interval": f"{rate_s:g}s", "__interval": f"{step_s:g}s", "__range": "60s"}


def substitute(expr: str, values: dict[str, list[str]], scrape_interval_s: float = 1.0) -> str:
    """Return ``expr`` as Grafana sends it: built-in intervals, then ``$var``/``${var}``; a multi-value
    variable becomes a regex alternation ``(a|b)``, as Grafana formats one for Prometheus."""
    for name, value in grafana_intervals(scrape_interval_s).items():
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        chosen = values[name]
        return chosen[0] if len(chosen) == 1 else "(" + "|".join(chosen) + ")"

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """Return (where, expr) of every panel target and annotation of ``dashboard``."""
    out = [(f"panel {p['title']!r} {t['refId']}", t["expr"]) for p in panels(dashboard) for t in p.get("targets", [])]
    out += [(f"annotation {a['name']!r}", a["expr"]) for a in dashboard["annotations"]["list"] if "expr" in a]
    return out


def variables(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return list(dashboard["templating"]["list"])


def variable_selector(variable: dict[str, Any]) -> tuple[str, str]:
    """Return (series selector, label) of a ``label_values(selector, label)`` variable."""
    match = LABEL_VALUES.match(variable["query"]["query"])
    assert match is not None, variable["query"]
    return match.group("selector") or "", match.group("label")


def prometheus_get(port: int, path: str, params: dict[str, str] | list[tuple[str, str]]) -> dict[str, Any]:
    """GET a Prometheus API path; return its JSON, error responses (400, 422) included."""
    url = f"http://127.0.0.1:{port}{path}?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return dict(json.load(response))
    except urllib.error.HTTPError as error:
        return dict(json.load(error))


class TestFiles:
    def test_the_dashboards_and_their_stable_uids(self) -> None:
        """Five dashboards, each valid JSON whose uid is fixed (links and bookmarks use it)."""
        assert {path.name: load(path.name)["uid"] for path in DASHBOARDS.glob("*.json")} == UIDS

    def test_generated_without_drift(self) -> None:
        """The committed JSON is exactly what grafana/generate.py writes."""
        generate = runpy.run_path(str(ROOT / "grafana" / "generate.py"))
        assert generate["render"]() == {name: (DASHBOARDS / name).read_text() for name in UIDS}

    def test_health_state_mappings_are_the_detectors_states(self) -> None:
        """Each ``rainier_<entity>_health_state`` panel maps code i to the detectors' i-th state name."""
        expected = {f"rainier_{'efa_port' if e == 'efa' else e}_health_state": list(names)
                    for e, names in STATE_NAMES.items()}
        found = {}
        for panel in panels(load("rainierd-ultraserver.json")):
            for mapping in panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
                metric = re.search(r"rainier_\w+_health_state", panel["targets"][0]["expr"])
                options = sorted(mapping["options"].items(), key=lambda item: int(item[0]))
                found[metric.group(0) if metric else panel["title"]] = [option["text"] for _code, option in options]
        assert found
        assert {metric: expected[metric] for metric in found} == found

    @pytest.mark.parametrize("name", sorted(UIDS))
    def test_no_hard_coded_datasource(self, name: str) -> None:
        """Every datasource reference anywhere is the ``${datasource}`` variable (or Grafana's own)."""
        found = []

        def walk(node: object) -> None:
            if isinstance(node, dict):
                if isinstance(node.get("datasource"), dict):
                    found.append(node["datasource"].get("uid"))
                elif "datasource" in node:
                    found.append(node["datasource"])
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(load(name))
        assert set(found) <= {"${datasource}", "-- Grafana --"}
        assert "${datasource}" in found

    @pytest.mark.parametrize("name", sorted(UIDS))
    def test_every_panel_titled_with_a_unit_and_one_unit_an_axis(self, name: str) -> None:
        """Each panel has a title naming its unit in brackets and a unit; no override gives a time series a
        second unit (frames/s and a ratio never share an axis)."""
        for panel in panels(load(name)):
            unit = panel["fieldConfig"]["defaults"].get("unit")
            assert unit, panel["title"]
            assert re.search(r"\(.+\)$", panel["title"]), panel["title"]
            if panel["type"] == "timeseries":
                assert not [p for o in panel["fieldConfig"]["overrides"] for p in o["properties"]
                            if p["id"] == "unit"], panel["title"]

    @pytest.mark.parametrize("name", sorted(UIDS))
    def test_variables_and_annotations(self, name: str) -> None:
        """A datasource variable, query variables on it, and alert and health-event annotations."""
        dashboard = load(name)
        kinds = {v["name"]: v["type"] for v in variables(dashboard)}
        assert kinds["datasource"] == "datasource"
        expected = {"rainierd-fleet.json": {"site"}, "rainierd-ultraserver.json": {"site", "ultraserver"},
                    "rainierd-self.json": {"job"}, "rainierd-aggregate.json": {"job", "instance"},
                    "rainierd-jobs.json": {"training_job"}}[name]
        assert {k for k, v in kinds.items() if v == "query"} == expected
        exprs = {a["name"]: a.get("expr") for a in dashboard["annotations"]["list"]}
        assert exprs["Firing alerts"] == 'ALERTS{alertstate="firing"}'
        if name != "rainierd-aggregate.json":  # the tier judges no entity: only its alerts are annotated
            assert "rainier_health_events_total" in exprs["Health events"]

    def test_the_fleet_shows_shard_coverage(self) -> None:
        """The fleet dashboard's top row shows monitor shards reporting against expected and the chips no shard
        watches, from the recording rules the RainierdShardMissing runbook reads."""
        top = [p for p in load("rainierd-fleet.json")["panels"] if p["gridPos"]["y"] == 1]
        shown = {p["title"]: [t["expr"] for t in p["targets"]] for p in top}
        assert shown["Monitor shards reporting (shards)"] == ["rainier:shards_reporting", "rainier:shards_expected"]
        assert shown["Chips no shard monitors (chips)"] == ["rainier:fleet_chips_unmonitored"]
        assert sum(p["gridPos"]["w"] for p in top) == 24

    def test_the_fleet_s_lost_fp8_is_the_headline_rule(self) -> None:
        """The fleet dashboard's lost FP8 is the recording rule that prices a job spanning monitor shards whole,
        beside its parts in jobs and in no job, the fleet's costliest entities as a table, and goodput (fleet and
        by site, from the recording rules); only the by-site panel reads the site figures, and none the monitors'
        own fleet figure (each shard's view)."""
        fleet = list(panels(load("rainierd-fleet.json")))
        found = {p["title"]: (p["type"], [t["expr"] for t in p["targets"]]) for p in fleet}
        assert len(found) == len(fleet)  # titles name one panel each
        parts = ["sum(rainier:job_fp8_lost_flops:sum) or vector(0)", "sum(rainier_fleet_fp8_unallocated_lost_flops)"]
        expected = {
            "Fleet goodput (%)": ("gauge", ["rainier:fleet_goodput:ratio"]),
            "Lost FP8 (FLOP/s)": ("stat", ["sum(rainier:fleet_fp8_lost_flops:sum_by_cause)"]),
            "Lost FP8 now, in jobs and in no job (FLOP/s)": ("stat", parts),
            "Lost FP8 in jobs and in no job (FLOP/s)": ("timeseries", parts),
            "Lost FP8 by cause (FLOP/s)": ("timeseries", ["rainier:fleet_fp8_lost_flops:sum_by_cause"]),
            "Costliest entities in the fleet (FLOP/s)": (
                "table", ["topk(20, sum by (entity, id, training_job) (rainier_fleet_culprit_flops))"]),
            "Goodput, fleet and by site (%)": (
                "timeseries", ["rainier:fleet_goodput:ratio", 'rainier:site_goodput:ratio{site=~"$site"}']),
        }
        assert {title: found.get(title) for title in expected} == expected
        exprs = [expr for _type, targets in found.values() for expr in targets]
        assert [e for e in exprs if "rainier_fleet_fp8_lost_flops" in e or "_goodput_ratio" in e] == []
        assert [e for e in exprs if "rainier_site_fp8_lost_flops" in e] == [
            'sum by (site) (rainier_site_fp8_lost_flops{site=~"$site"})']

    def test_tables_have_readable_columns_and_the_worst_table_drills_down(self) -> None:
        """Every table renames its columns (organize); the fleet's worst-UltraServer table links each
        UltraServer to the drill-down dashboard with the datasource, site and UltraServer."""
        for name in UIDS:
            for panel in panels(load(name)):
                if panel["type"] == "table":
                    renames = [t["options"]["renameByName"] for t in panel["transformations"] if t["id"] == "organize"]
                    assert any(renames), panel["title"]
        worst = next(p for p in panels(load("rainierd-fleet.json")) if p["title"].startswith("Worst UltraServers"))
        links = [prop["value"] for o in worst["fieldConfig"]["overrides"] if o["matcher"]["options"] == "ultraserver"
                 for prop in o["properties"] if prop["id"] == "links"]
        assert links[0][0]["url"].startswith("/d/rainierd-ultraserver/rainierd-ultraserver?var-datasource=${datasource}"
                                             "&var-site=${__data.fields.site}&var-ultraserver=${__data.fields.ultraserver}")


class TestJobs:
    def test_the_job_label_is_training_job_never_job(self) -> None:
        """Every per-job query selects or groups by ``training_job``: Prometheus owns ``job`` (the scrape
        config's name), and a scraped ``job`` label would arrive renamed ``exported_job``."""
        exprs = [expr for _where, expr in queries(load("rainierd-jobs.json")) if "rainier_job" in expr]
        assert exprs
        assert [e for e in exprs if re.search(r"\bjob\b\s*(=|!|\)|,)", e) or "exported_job" in e] == []
        assert [e for e in exprs if "training_job" not in e and "rainier_jobs" not in e
                and "rainier_job_documents" not in e and "error_budget" not in e] == []

    def test_jobs_table_is_worst_first_and_drills_into_one_job(self) -> None:
        """The goodput table sorts ascending (worst first) and links each training job to this dashboard with
        only that job selected, keeping the datasource and time range."""
        worst = next(p for p in panels(load("rainierd-jobs.json")) if p["title"].startswith("Jobs by goodput"))
        assert worst["options"]["sortBy"] == [{"displayName": "Goodput", "desc": False}]
        links = [prop["value"] for o in worst["fieldConfig"]["overrides"] if o["matcher"]["options"] == "training_job"
                 for prop in o["properties"] if prop["id"] == "links"]
        assert links == [[{"title": "Only ${__value.text}",
                           "url": "/d/rainierd-jobs/rainierd-jobs?var-datasource=${datasource}"
                                  "&var-training_job=${__data.fields.training_job}&${__url_time_range}"}]]

    def test_firing_alerts_are_annotated_with_their_training_job(self) -> None:
        """The jobs dashboard's alert annotations carry the alerts' ``training_job`` label, not site and
        UltraServer."""
        alerts = next(a for a in load("rainierd-jobs.json")["annotations"]["list"] if a["name"] == "Firing alerts")
        assert (alerts["tagKeys"], alerts["textFormat"]) == ("severity,training_job", "{{alertname}} {{training_job}}")


@pytest.fixture(scope="module")
def empty_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real Prometheus with nothing to scrape: a PromQL parser and evaluator."""
    proc: subprocess.Popen[bytes]
    proc, port = start_prometheus(tmp_path_factory.mktemp("prometheus"), {"scrape_configs": []})
    yield port
    proc.terminate()
    proc.wait(timeout=10)


ANY_VALUES = {"site": ["s0", "s1"], "ultraserver": ["u1"], "job": ["rainierd", "rainierd-ultraserver"],
              "instance": ["127.0.0.1:9780", "127.0.0.1:9781"], "training_job": ["trn-east/41871", "default/llm"]}


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_query_is_valid_promql(empty_prometheus: int, name: str) -> None:
    """Every panel, annotation and variable query, substituted as Grafana would, parses and evaluates in a real
    Prometheus (no bad_data error)."""
    dashboard = load(name)
    exprs = [(where, substitute(expr, ANY_VALUES)) for where, expr in queries(dashboard)]
    for variable in variables(dashboard):
        if variable["type"] == "query":
            selector, _label = variable_selector(variable)
            exprs.append((f"variable {variable['name']}", substitute(selector, ANY_VALUES)))
    assert not [e for _w, e in exprs if "$" in e]
    errors = {}
    for where, expr in exprs:
        result = prometheus_get(empty_prometheus, "/api/v1/query", {"query": expr})
        if result["status"] != "success":
            errors[where] = (expr, result.get("error"))
    assert errors == {}
