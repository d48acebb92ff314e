"""Write rainierd's Grafana dashboards (grafana/dashboards/*.json) from one
description, so every dashboard shares its datasource, site and UltraServer
variables, its alert and health-event annotations and its panel conventions
(a unit on every panel, one unit per axis, readable table columns).

    python grafana/generate.py          # rewrite the JSON files
    python grafana/generate.py --check  # exit 1 if they differ from what this writes

tests/unit/deploy/test_dashboards.py fails when the committed JSON drifts from this file.
The health state names and their codes are the detectors' own
(``rainierd.core.detect.STATE_NAMES``), so a state added there reaches the
dashboards' value mappings on the next run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rainierd.core.detect import STATE_NAMES

OUT = Path(__file__).parent / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
SITE = 'site=~"$site"'
US = 'ultraserver="$ultraserver"'
RATE = "$__rate_interval"
DRILL = "/d/rainierd-ultraserver/rainierd-ultraserver?var-datasource=${datasource}&var-site=${__data.fields.site}" \
        "&var-ultraserver=${__data.fields.ultraserver}&${__url_time_range}"

JOB_DRILL = "/d/rainierd-jobs/rainierd-jobs?var-datasource=${datasource}" \
            "&var-training_job=${__data.fields.training_job}&${__url_time_range}"

Panel = dict[str, Any]

_COLOURS = ["green", "yellow", "orange", "purple", "red"]


def state_mappings(entity: str) -> list[dict[str, Any]]:
    """Value mappings of a ``rainier_<entity>_health_state`` code to its name and a colour."""
    names = STATE_NAMES[entity]
    # A node's fourth state, path_degraded, is a warning like its cooling's (its loss stays red); an EFA port's,
    # stale (its device gone), is unknown like a stale chip's.
    colours = {"node": ["green", "orange", "red", "yellow"], "efa": ["green", "orange", "red", "purple"]}.get(
        entity, _COLOURS if len(names) == 5 else ["green", "orange", "red"])
    return [{"type": "value", "options": {str(i): {"text": name, "color": colours[i], "index": i}
                                          for i, name in enumerate(names)}}]


def target(expr: str, legend: str = "", *, ref: str = "A", instant: bool = False, table: bool = False) -> Panel:
    """A Prometheus query of a panel."""
    out: Panel = {"datasource": DS, "refId": ref, "expr": expr, "legendFormat": legend or "__auto"}
    if instant:
        out |= {"instant": True, "range": False}
    if table:
        out["format"] = "table"
    return out


def p99(histogram: str, selector: str) -> str:
    """The 99th percentile of ``histogram`` over the rate interval, every series matching ``selector`` pooled."""
    return f"histogram_quantile(0.99, sum by (le) (rate({histogram}_bucket{{{selector}}}[{RATE}])))"


class Layout:
    """Places panels left to right, rows of height ``h`` on a 24-column grid."""

    def __init__(self) -> None:
        self.x = self.y = self.row_h = 0
        self.next_id = 1
        self.panels: list[Panel] = []

    def add(self, panel: Panel, w: int, h: int) -> None:
        if self.x + w > 24:
            self.x, self.y = 0, self.y + self.row_h
            self.row_h = 0
        panel["id"] = self.next_id
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)
        self.panels.append(panel)

    def row(self, title: str) -> None:
        self.x, self.y = 0, self.y + self.row_h
        self.row_h = 1
        self.panels.append({"type": "row", "title": title, "id": self.next_id, "collapsed": False, "panels": [],
                            "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1}})
        self.next_id += 1
        self.x = 24  # the next panel starts a new line


def panel(kind: str, title: str, unit: str, targets: list[Panel], *, description: str = "",
          mappings: list[dict[str, Any]] | None = None, overrides: list[dict[str, Any]] | None = None,
          options: dict[str, Any] | None = None, custom: dict[str, Any] | None = None,
          transformations: list[dict[str, Any]] | None = None, thresholds: list[tuple[float | None, str]] | None = None,
          decimals: int | None = None) -> Panel:
    """A panel with its unit, datasource variable and any mappings, overrides and transformations."""
    defaults: dict[str, Any] = {"unit": unit, "mappings": mappings or []}
    if custom:
        defaults["custom"] = custom
    if decimals is not None:
        defaults["decimals"] = decimals
    if thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": [{"value": v, "color": c} for v, c in thresholds]}
    out: Panel = {"type": kind, "title": title, "datasource": DS, "targets": targets,
                  "fieldConfig": {"defaults": defaults, "overrides": overrides or []}}
    if description:
        out["description"] = description
    if options:
        out["options"] = options
    if transformations:
        out["transformations"] = transformations
    return out


def table(title: str, unit: str, expr: str, columns: dict[str, str], *, value: str, description: str = "",
          mappings: list[dict[str, Any]] | None = None, drill: bool = True) -> Panel:
    """An instant table with readable column names (organize), the value column last, and a drill-down link
    on its UltraServer column."""
    names = columns | {"Value": value}
    order = {name: i for i, name in enumerate(names)}
    overrides = [{"matcher": {"id": "byName", "options": "Value"},
                  "properties": [{"id": "unit", "value": unit}, {"id": "mappings", "value": mappings or []}]}]
    if drill:
        overrides.append({"matcher": {"id": "byName", "options": "ultraserver"}, "properties": [
            {"id": "links", "value": [{"title": "Drill into ${__value.text}", "url": DRILL}]}]})
    organize = {"id": "organize", "options": {
        "excludeByName": {k: True for k in ("Time", "__name__", "instance", "job") if k not in columns},
        "indexByName": order, "renameByName": names}}
    return panel("table", title, unit, [target(expr, instant=True, table=True)], description=description,
                 overrides=overrides, transformations=[organize], options={"showHeader": True})


def timeseries(title: str, unit: str, *targets: Panel, description: str = "", stack: bool = False,
               min_zero: bool = True) -> Panel:
    custom: dict[str, Any] = {"lineWidth": 1, "fillOpacity": 10 if stack else 0, "showPoints": "never"}
    if stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    out = panel("timeseries", title, unit, list(targets), description=description, custom=custom,
                options={"legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull"]},
                         "tooltip": {"mode": "multi", "sort": "desc"}})
    if min_zero:
        out["fieldConfig"]["defaults"]["min"] = 0
    return out


def refs(*targets: Panel) -> list[Panel]:
    return [t | {"refId": chr(ord("A") + i)} for i, t in enumerate(targets)]


def datasource_var() -> Panel:
    return {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
            "current": {}, "hide": 0, "refresh": 1, "options": [], "regex": ""}


def query_var(name: str, label: str, query: str, *, multi: bool, include_all: bool) -> Panel:
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "definition": query, "query": {"query": query, "refId": f"{name}-var"},
            "refresh": 2, "sort": 3, "multi": multi, "includeAll": include_all, "current": {}, "options": [],
            "hide": 0, "regex": ""}


def dashboard_annotations(*, health_events: bool = True, job_phases: bool = False,
                          alert_labels: tuple[str, ...] = ("site", "ultraserver")) -> dict[str, Any]:
    """Firing alerts (from ``ALERTS``, tagged and described by ``alert_labels``), health events (a rise of
    ``rainier_health_events_total``) and, on the jobs dashboard, jobs out of their running phase."""
    shown = ({"Annotations & Alerts", "Firing alerts"} | ({"Health events"} if health_events else set())
             | ({"Job phases"} if job_phases else set()))
    return {"list": [a for a in [
        {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
         "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"},
        {"name": "Firing alerts", "datasource": DS, "enable": True, "iconColor": "red",
         "expr": 'ALERTS{alertstate="firing"}', "step": "30s", "titleFormat": "{{alertname}}",
         "tagKeys": ",".join(("severity", *alert_labels)),
         "textFormat": " ".join(("{{alertname}}", *(f"{{{{{label}}}}}" for label in alert_labels))),
         "useValueForTime": False},
        {"name": "Health events", "datasource": DS, "enable": True, "iconColor": "orange",
         "expr": f'sum by (entity, state) (increase(rainier_health_events_total[{RATE}])) > 0',
         "step": "30s", "titleFormat": "{{entity}} → {{state}}", "tagKeys": "entity,state",
         "textFormat": "{{entity}} entities became {{state}}"},
        {"name": "Job phases", "datasource": DS, "enable": True, "iconColor": "purple",
         "expr": 'max by (training_job, phase) (rainier_job_phase{phase!="running"}) == 1',
         "step": "30s", "titleFormat": "{{training_job}}: {{phase}}", "tagKeys": "training_job,phase",
         "textFormat": "{{training_job}} in {{phase}} (its members quiet together: a phase, not faults)"},
    ] if a["name"] in shown]}


def dashboard(uid: str, title: str, panels: list[Panel], variables: list[Panel], description: str, *,
              health_events: bool = True, job_phases: bool = False,
              alert_labels: tuple[str, ...] = ("site", "ultraserver")) -> Panel:
    return {
        "uid": uid, "title": title, "description": description, "tags": ["rainierd", "trainium2"],
        "timezone": "utc", "schemaVersion": 39, "version": 1, "editable": True, "graphTooltip": 1,
        "refresh": "30s", "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": variables},
        "annotations": dashboard_annotations(health_events=health_events, job_phases=job_phases,
                                             alert_labels=alert_labels),
        "panels": panels,
        "links": [{"title": "rainierd dashboards", "type": "dashboards", "tags": ["rainierd"], "asDropdown": True,
                   "includeVars": False, "keepTime": True}],
    }


def site_vars() -> list[Panel]:
    return [datasource_var(),
            query_var("site", "Site", "label_values(rainier_site_fp8_peak_flops, site)", multi=True,
                      include_all=True)]


def loss_row(lay: Layout) -> None:
    """The fleet's lost FP8 (docs/metrics.md, "Lost FP8 and goodput"): one model at every level, every job priced
    whole and the capacity in no job per UltraServer; the headline from the recording rule that prices a job
    spanning monitor shards whole (rainier:fleet_fp8_lost_flops:sum_by_cause), its part in no job, what costs
    most, and where (by site)."""
    lay.row("Lost FP8 (the fleet's, whatever the site variable says, but by site)")
    goodput = panel("gauge", "Fleet goodput (%)", "percentunit", [target("rainier:fleet_goodput:ratio")],
                    thresholds=[(None, "red"), (0.9, "orange"), (0.99, "green")],
                    description="Effective FP8 over effective plus lost, the whole fleet's.")
    goodput["fieldConfig"]["defaults"] |= {"min": 0, "max": 1}
    lay.add(goodput, 6, 5)
    lay.add(panel("stat", "Lost FP8 (FLOP/s)", "flops", [target("sum(rainier:fleet_fp8_lost_flops:sum_by_cause)")],
                  thresholds=[(None, "text")],
                  description="Every job's loss, its step priced whole across monitor shards, plus what the "
                              "capacity in no job loses, priced per UltraServer."), 6, 5)
    jobs_and_free = refs(target("sum(rainier:job_fp8_lost_flops:sum) or vector(0)", "in jobs"),
                         target("sum(rainier_fleet_fp8_unallocated_lost_flops)", "in no job"))
    lay.add(panel("stat", "Lost FP8 now, in jobs and in no job (FLOP/s)", "flops", jobs_and_free,
                  thresholds=[(None, "text")],
                  description="The two parts of the fleet's lost FP8: the jobs' (docs/jobs.md) and the capacity "
                              "no job holds (all of it while the monitors know no job)."), 12, 5)
    lay.add(timeseries("Lost FP8 by cause (FLOP/s)", "flops",
                       target("rainier:fleet_fp8_lost_flops:sum_by_cause", "{{cause}}"), stack=True,
                       description="The fleet's lost FP8 by cause: every job's loss and the capacity in no job's "
                                   "(docs/throughput-model.md)."), 12, 8)
    lay.add(timeseries("Lost FP8 in jobs and in no job (FLOP/s)", "flops", *jobs_and_free, stack=True), 12, 8)
    culprits = table("Costliest entities in the fleet (FLOP/s)", "flops",
                     "topk(20, sum by (entity, id, training_job) (rainier_fleet_culprit_flops))",
                     {"entity": "Entity", "id": "Id", "training_job": "Training job"}, value="Costs", drill=False,
                     description="The entities costing the fleet most, each with the FP8 it costs what it slows: "
                                 "its job (training job) or its UltraServer's capacity in no job (training job "
                                 "empty). On monitor shards each names its share's, priced on its share of a job "
                                 "spanning shards.")
    culprits["options"]["sortBy"] = [{"displayName": "Costs", "desc": True}]
    lay.add(culprits, 12, 8)
    lay.add(timeseries("Lost FP8 by site (FLOP/s)", "flops",
                       target(f"sum by (site) (rainier_site_fp8_lost_flops{{{SITE}}})", "{{site}}"), stack=True,
                       description="What the fleet loses to what is in each site: every loss placed on the site of "
                                   "what causes it (a job's whole loss to a fault in this site). On monitor shards "
                                   "each shard places its own view of a job spanning shards."), 12, 8)


def fleet() -> Panel:
    lay = Layout()
    lay.row("Throughput")
    lay.add(panel("stat", "Effective FP8 (FLOP/s)", "flops",
                  [target(f"sum(rainier_site_fp8_effective_flops{{{SITE}}})")]), 6, 5)
    ratio = panel("gauge", "Effective / peak (%)", "percentunit",
                  [target(f"sum(rainier_site_fp8_effective_flops{{{SITE}}}) "
                          f"/ sum(rainier_site_fp8_peak_flops{{{SITE}}})")],
                  thresholds=[(None, "red"), (0.9, "orange"), (0.97, "green")])
    ratio["fieldConfig"]["defaults"] |= {"min": 0, "max": 1}
    lay.add(ratio, 6, 5)
    lay.add(panel("stat", "Unhealthy entities now (count)", "short",
                  [target("sum by (entity) (rainier:unhealthy:sum_by_entity_state)", "{{entity}}")],
                  thresholds=[(None, "green"), (1, "orange")]), 6, 5)
    lay.add(panel("stat", "Monitor shards reporting (shards)", "short",
                  refs(target("rainier:shards_reporting", "reporting"),
                       target("rainier:shards_expected", "expected")),
                  thresholds=[(None, "text")], decimals=0,
                  description="Monitor shards exporting metrics, of the shards the fleet is split into "
                              "(--shard i/N); fewer reporting than expected is alert RainierdShardMissing."), 3, 5)
    lay.add(panel("stat", "Chips no shard monitors (chips)", "short", [target("rainier:fleet_chips_unmonitored")],
                  thresholds=[(None, "green"), (1, "red")], decimals=0,
                  description="Chips of the inventory that no reporting monitor shard watches: left out of "
                              "every fleet and site figure, undetected. Fleet-wide, whatever the site "
                              "variable says."), 3, 5)
    lay.add(timeseries("FP8 peak, delivered, effective (FLOP/s)", "flops", *refs(
        target(f"sum(rainier_site_fp8_peak_flops{{{SITE}}})", "peak"),
        target(f"sum(rainier_site_fp8_delivered_flops{{{SITE}}})", "delivered"),
        target(f"sum(rainier_site_fp8_effective_flops{{{SITE}}})", "effective"),
        target(f"sum(rate(rainier_site_fp8_flop_total{{{SITE}}}[{RATE}]))", "executed (FLOP counter rate)"),
    ), min_zero=False), 12, 8)
    lay.add(timeseries("Goodput, fleet and by site (%)", "percentunit", *refs(
        target("rainier:fleet_goodput:ratio", "fleet"),
        target(f"rainier:site_goodput:ratio{{{SITE}}}", "{{site}}"),
    ), description="Effective FP8 over effective plus lost: the share of what the chips would deliver healthy "
                   "that they deliver. The fleet's line is the whole fleet's, whatever the site variable says."),
            12, 8)
    lay.add(table("Worst UltraServers by effective / peak (%)", "percentunit",
                  f"bottomk(10, rainier:ultraserver_fp8_effective:ratio{{{SITE}}})",
                  {"ultraserver": "UltraServer", "site": "Site"}, value="Effective / peak",
                  description="Click an UltraServer for its chips, NeuronLinks and EFA ports."), 12, 8)
    lay.add(timeseries("Unhealthy entities by state (count)", "short",
                       target("sum by (entity, state) (rainier:unhealthy:sum_by_entity_state)",
                              "{{entity}} {{state}}"), stack=True), 12, 8)
    loss_row(lay)
    lay.row("Unhealthy entities")
    lay.add(table("Unhealthy NeuronLinks (state)", "short", f"rainier_neuronlink_unhealthy{{{SITE}}}",
                  {"id": "NeuronLink", "kind": "Kind", "state": "State", "link": "Index", "site": "Site",
                   "ultraserver": "UltraServer", "node": "Node"}, value="Unhealthy"), 8, 8)
    lay.add(table("Unhealthy EFA ports (state)", "short", f"rainier_efa_port_unhealthy{{{SITE}}}",
                  {"id": "EFA port", "state": "State", "port": "Index", "site": "Site", "ultraserver": "UltraServer",
                   "node": "Node"}, value="Unhealthy"), 8, 8)
    lay.add(table("Unhealthy chips (state)", "short", f"rainier_chip_unhealthy{{{SITE}}}",
                  {"id": "Chip", "state": "State", "chip": "Index", "site": "Site", "ultraserver": "UltraServer",
                   "node": "Node"}, value="Unhealthy"), 8, 8)
    lay.add(timeseries("Lowest NeuronLink bandwidth / kind median (%)", "percentunit",
                       target(f"rainier_neuronlink_worst_bandwidth_ratio{{{SITE}}}", "{{id}}")),
            12, 8)
    lay.add(timeseries("Lowest EFA port traffic / UltraServer median (%)", "percentunit",
                       target(f"rainier_efa_port_worst_traffic_ratio{{{SITE}}}", "{{id}}")),
            12, 8)
    lay.row("Cooling and chips (per site; hottest UltraServers)")
    lay.add(timeseries("Chip temperature, hottest and mean (°C)", "celsius", *refs(
        target(f"max by (site) (rainier_site_chip_max_temperature_celsius{{{SITE}}})", "{{site}} hottest"),
        target(f"avg by (site) (rainier_site_chip_mean_temperature_celsius{{{SITE}}})", "{{site}} mean"),
    ), min_zero=False), 8, 8)
    lay.add(timeseries("Node inlet and outlet air, warmest and mean (°C)", "celsius", *refs(
        target(f"max by (site) (rainier_site_node_max_inlet_temperature_celsius{{{SITE}}})", "{{site}} inlet max"),
        target(f"avg by (site) (rainier_site_node_mean_inlet_temperature_celsius{{{SITE}}})", "{{site}} inlet mean"),
        target(f"max by (site) (rainier_site_node_max_outlet_temperature_celsius{{{SITE}}})", "{{site}} outlet max"),
        target(f"avg by (site) (rainier_site_node_mean_outlet_temperature_celsius{{{SITE}}})",
               "{{site}} outlet mean"),
        target(f"avg by (site) (rainier_site_outside_temperature_celsius{{{SITE}}})", "{{site}} outside"),
    ), min_zero=False), 8, 8)
    lay.add(timeseries("Node fan speed, fastest and mean (rpm)", "rotrpm", *refs(
        target(f"max by (site) (rainier_site_node_max_fan_rpm{{{SITE}}})", "{{site}} fastest"),
        target(f"avg by (site) (rainier_site_node_mean_fan_rpm{{{SITE}}})", "{{site}} mean"),
    )), 8, 8)
    lay.add(timeseries("Chip power, largest and mean (W)", "watt", *refs(
        target(f"max by (site) (rainier_site_chip_max_power_watts{{{SITE}}})", "{{site}} largest"),
        target(f"avg by (site) (rainier_site_chip_mean_power_watts{{{SITE}}})", "{{site}} mean"),
    )), 8, 8)
    lay.add(timeseries("HBM in use per chip, largest and mean (bytes)", "bytes", *refs(
        target(f"max by (site) (rainier_site_chip_max_hbm_used_bytes{{{SITE}}})", "{{site}} largest"),
        target(f"avg by (site) (rainier_site_chip_mean_hbm_used_bytes{{{SITE}}})", "{{site}} mean"),
    )), 8, 8)
    lay.add(timeseries("ECC errors (errors/s)", "cps", *refs(
        target(f"sum by (site) (rate(rainier_site_chip_ecc_corrected_errors_total{{{SITE}}}[{RATE}]))",
               "{{site}} corrected"),
        target(f"sum by (site) (rate(rainier_site_chip_ecc_uncorrected_errors_total{{{SITE}}}[{RATE}]))",
               "{{site}} uncorrected"),
    )), 8, 8)
    lay.add(table("Hottest UltraServers (°C)", "celsius",
                  f"topk(10, rainier_ultraserver_chip_max_temperature_celsius{{{SITE}}})",
                  {"ultraserver": "UltraServer", "site": "Site"}, value="Hottest chip"), 8, 8)
    lay.add(table("UltraServers with uncorrected ECC errors in the last hour (errors)", "short",
                  f"topk(10, increase(rainier_ultraserver_chip_ecc_uncorrected_errors_total{{{SITE}}}[1h]))",
                  {"ultraserver": "UltraServer", "site": "Site"}, value="Uncorrected ECC errors"), 8, 8)
    lay.add(timeseries("Water assist (on/off)", "bool_on_off",
                       target(f"rainier_site_cooling_water_assist{{{SITE}}}", "{{site}}")), 8, 8)
    lay.row("Water and energy (per site)")
    lay.add(timeseries("Cooling water (L/h)", "litreh",
                       target(f"sum by (site) (rate(rainier_site_water_cubic_meters_total{{{SITE}}}[{RATE}])) "
                              f"* 1000 * 3600", "{{site}}")), 8, 8)
    lay.add(timeseries("IT power (W)", "watt",
                       target(f"sum by (site) (rate(rainier_site_it_energy_joules_total{{{SITE}}}[{RATE}]))",
                              "{{site}}")), 8, 8)
    lay.add(timeseries("Water usage effectiveness over the last hour (L/kWh)", "suffix: L/kWh",
                       target(f"sum by (site) (increase(rainier_site_water_cubic_meters_total{{{SITE}}}[1h])) * 1000"
                              f" / (sum by (site) (increase(rainier_site_it_energy_joules_total{{{SITE}}}[1h])) "
                              f"/ 3.6e6)", "{{site}}"),
                       description="Water the cooling used per kWh of IT energy (AWS quotes 0.15 L/kWh for its "
                                   "fleet; the industry 0.375). 0 while the sites run on outside air alone."),
            8, 8)
    return dashboard("rainierd-fleet", "rainierd: Trainium2 fleet", lay.panels, site_vars(),
                     "Fleet FP8 throughput, goodput, lost FP8 and what costs it, health and cooling from rainierd. "
                     "Drill into an UltraServer from the tables.")


def ultraserver() -> Panel:
    lay = Layout()
    lay.row("UltraServer $ultraserver")
    lay.add(timeseries("FP8 peak and effective (FLOP/s)", "flops", *refs(
        target(f"sum(rainier_ultraserver_fp8_peak_flops{{{US}}})", "peak"),
        target(f"sum(rainier_ultraserver_fp8_effective_flops{{{US}}})", "effective"),
        target(f"sum(rate(rainier_ultraserver_fp8_flop_total{{{US}}}[{RATE}]))", "executed (FLOP counter rate)"),
    )), 8, 8)
    lay.add(timeseries("Lost FP8 by cause (FLOP/s)", "flops",
                       target(f"sum by (cause) (rainier_ultraserver_fp8_lost_flops{{{US}}})", "{{cause}}"),
                       stack=True,
                       description="What the fleet loses to what is in this UltraServer: the whole loss of every "
                                   "job its faults slow (one spanning several UltraServers included) and what its "
                                   "capacity in no job loses."), 8, 8)
    lay.add(timeseries("Chip temperature, hottest and mean (°C)", "celsius", *refs(
        target(f"max(rainier_ultraserver_chip_max_temperature_celsius{{{US}}})", "hottest"),
        target(f"avg(rainier_ultraserver_chip_mean_temperature_celsius{{{US}}})", "mean"),
    ), min_zero=False), 8, 8)
    heat: dict[str, Any] = {"calculate": False, "yAxis": {"axisPlacement": "left", "reverse": False},
            "rowsFrame": {"layout": "auto"}, "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Turbo", "steps": 64, "exponent": 0.5, "fill": "dark-orange"},
            "tooltip": {"show": True, "yHistogram": False}, "legend": {"show": True}}
    lay.row("Chips (drill-down probe)")
    lay.add(panel("heatmap", "Chip temperature, chip by chip (°C)", "celsius",
                  [target(f"rainier_chip_temperature_celsius{{{US}}}", "{{chip}}")],
                  options=heat | {"yAxis": {"axisLabel": "chip", "axisPlacement": "left"}},
                  description="One row per chip of the UltraServer, from the /probe scrape job."), 12, 10)
    lay.add(panel("heatmap", "Chip utilisation, chip by chip (%)", "percentunit",
                  [target(f"rainier_chip_utilization_ratio{{{US}}}", "{{chip}}")],
                  options=heat | {"color": heat["color"] | {"scheme": "Greens"},
                                  "yAxis": {"axisLabel": "chip", "axisPlacement": "left"}}), 12, 10)
    lay.add(panel("status-history", "Chip health states (state)", "none",
                  [target(f"rainier_chip_health_state{{{US}}}", "{{id}}")],
                  mappings=state_mappings("chip"), options={"showValue": "never", "rowHeight": 0.9}), 12, 10)
    lay.add(timeseries("Chip power (W)", "watt", target(f"rainier_chip_power_watts{{{US}}}", "{{id}}")),
            12, 10)
    lay.row("NeuronLinks (drill-down probe)")
    lay.add(panel("status-history", "NeuronLink health states (state)", "none",
                  [target(f"rainier_neuronlink_health_state{{{US}}}", "{{id}} {{kind}}")],
                  mappings=state_mappings("neuronlink"), options={"showValue": "never", "rowHeight": 0.9}), 12, 12)
    lay.add(table("NeuronLinks, worst state first (state)", "none",
                  f"sort_desc(rainier_neuronlink_health_state{{{US}}})",
                  {"id": "NeuronLink", "kind": "Kind", "link": "Index", "node": "Node"},
                  value="State", mappings=state_mappings("neuronlink"), drill=False), 12, 12)
    lay.add(timeseries("NeuronLink bandwidth (bytes/s)", "Bps",
                       target(f"rainier_neuronlink_bandwidth_bytes_per_second{{{US}}}", "{{id}} {{kind}}")), 8, 8)
    lay.add(timeseries("NeuronLink lanes up (lanes)", "short",
                       target(f"min by (node) (rainier_neuronlink_lanes_up{{{US}}})", "fewest on {{node}}")), 8, 8)
    lay.add(timeseries("NeuronLink replays and CRC errors (events/s)", "cps", *refs(
        target(f"sum by (node) (rate(rainier_neuronlink_replays_total{{{US}}}[{RATE}]))", "replays {{node}}"),
        target(f"sum by (node) (rate(rainier_neuronlink_crc_errors_total{{{US}}}[{RATE}]))", "CRC {{node}}"),
    )), 8, 8)
    lay.row("EFA ports (drill-down probe)")
    lay.add(panel("status-history", "EFA port health states (state)", "none",
                  [target(f"rainier_efa_port_health_state{{{US}}}", "{{id}}")],
                  mappings=state_mappings("efa"), options={"showValue": "never", "rowHeight": 0.9}), 12, 10)
    lay.add(table("EFA ports, worst state first (state)", "none", f"sort_desc(rainier_efa_port_health_state{{{US}}})",
                  {"id": "EFA port", "port": "Index", "node": "Node"}, value="State", mappings=state_mappings("efa"),
                  drill=False), 12, 10)
    lay.add(timeseries("EFA traffic sent (bytes/s)", "Bps",
                       target(f"rate(rainier_efa_port_transmit_bytes_total{{{US}}}[{RATE}])", "{{id}}")), 8, 8)
    lay.add(timeseries("EFA retransmitted packets (packets/s)", "pps",
                       target(f"rate(rainier_efa_port_retransmit_packets_total{{{US}}}[{RATE}])", "{{id}}")),
            8, 8)
    lay.add(timeseries("EFA latency (s)", "s",
                       target(f"rainier_efa_port_latency_seconds{{{US}}}", "{{id}}")), 8, 8)
    lay.row("Nodes: cooling (drill-down probe)")
    lay.add(panel("state-timeline", "Node health states (state)", "none",
                  [target(f"rainier_node_health_state{{{US}}}", "{{id}}")], mappings=state_mappings("node")), 6, 8)
    lay.add(timeseries("Node inlet and outlet air (°C)", "celsius", *refs(
        target(f"rainier_node_inlet_temperature_celsius{{{US}}}", "{{id}} inlet"),
        target(f"rainier_node_outlet_temperature_celsius{{{US}}}", "{{id}} outlet"),
    ), min_zero=False), 6, 8)
    lay.add(timeseries("Node fan speed (rpm)", "rotrpm", target(f"rainier_node_fan_rpm{{{US}}}", "{{id}}")), 6, 8)
    lay.add(timeseries("Node power (W)", "watt", target(f"rainier_node_power_watts{{{US}}}", "{{id}}")), 6, 8)
    variables = [*site_vars(), query_var(
        "ultraserver", "UltraServer", 'label_values(rainier_ultraserver_fp8_peak_flops{site=~"$site"}, ultraserver)',
        multi=False, include_all=False)]
    return dashboard("rainierd-ultraserver", "rainierd: UltraServer drill-down", lay.panels, variables,
                     "One UltraServer's 64 chips, 192 NeuronLinks, 64 EFA ports and 4 nodes from rainierd's "
                     "/probe?target=<ultraserver> scrape job (docs/metrics.md: the UltraServers with an unhealthy "
                     "entity are probed automatically); its aggregates from /metrics.")


def self_health() -> Panel:
    job = 'job=~"$job"'
    lay = Layout()

    def add(title: str, unit: str, *queries: tuple[str, str], stack: bool = False) -> None:
        """Add an 8 x 8 time series of ``queries``, (expression, legend) pairs: every self-health panel's size."""
        lay.add(timeseries(title, unit, *refs(*(target(expr, legend) for expr, legend in queries)), stack=stack), 8, 8)

    lay.row("Ingest")
    add("Frames decoded (frames/s)", "suffix: frames/s",
        (f"sum by (encoding) (rate(rainier_ingest_frames_total{{{job}}}[{RATE}]))", "{{encoding}}"))
    add("Telemetry received (bytes/s)", "Bps", (f"sum(rate(rainier_ingest_bytes_total{{{job}}}[{RATE}]))", "payload"))
    add("Frames lost / decoded (%)", "percentunit",
        (f"sum(rate(rainier_ingest_frames_lost_total{{{job}}}[{RATE}])) / "
         f"clamp_min(sum(rate(rainier_ingest_frames_total{{{job}}}[{RATE}])), 1)", "lost"))
    add("Rejected frames by reason (frames/s)", "suffix: frames/s",
        (f"sum by (reason) (rate(rainier_ingest_decode_errors_total{{{job}}}[{RATE}]))", "{{reason}}"), stack=True)
    add("Frames missing now (frames)", "short", (f"sum(rainier_ingest_frames_missing{{{job}}})", "missing"))
    add("Inbox drops (messages/s)", "suffix: messages/s",
        (f"sum(rate(rainier_monitor_backlog_dropped_messages_total{{{job}}}[{RATE}]))", "dropped"))
    lay.row("Lag and backlog")
    add("Processing lag and sample lag p99 (s)", "s",
        (f"max(rainier_monitor_lag_seconds{{{job}}})", "processing lag"),
        (p99("rainier_monitor_sample_lag_seconds", job), "sample lag p99"),
        (f"max(rainier_monitor_backlog_seconds{{{job}}})", "oldest message waited"))
    add("Backlog (messages)", "short", (f"sum(rainier_monitor_backlog_messages{{{job}}})", "messages"))
    add("Backlog (bytes)", "bytes", (f"sum(rainier_monitor_backlog_bytes{{{job}}})", "bytes"))
    add("Overloaded (on/off)", "bool_on_off", (f"max(rainier_monitor_overloaded{{{job}}})", "overloaded"))
    add("MQTT session up (on/off)", "bool_on_off", (f"min(rainier_mqtt_connected{{{job}}})", "connected"))
    add("MQTT connection failures (failures/s)", "cps",
        (f"sum(rate(rainier_mqtt_connection_failures_total{{{job}}}[{RATE}]))", "failures"))
    lay.row("Cost")
    add("Analysis duration (s)", "s", (f"max(rainier_monitor_analysis_duration_seconds{{{job}}})", "analysis"))
    add("Event-loop lag: worst over 10 s and p99 (s)", "s",
        (f"max(rainier_event_loop_lag_seconds{{{job}}})", "worst (10 s)"),
        (p99("rainier_event_loop_probe_lag_seconds", job), "p99"))
    add("Scrape duration (s)", "s",
        (f"max by (job) (scrape_duration_seconds{{{job}}})", "{{job}} scrape"),
        (f"max by (collector) (rainier_exporter_collector_duration_seconds{{{job}}})", "collector {{collector}}"),
        (f"max(rainier_probe_duration_seconds{{{job}}})", "drill-down probe build"))
    add("Samples per scrape (series)", "short", (f"sum by (job) (scrape_samples_scraped{{{job}}})", "{{job}}"))
    add("CPU (cores)", "short", (f"sum by (job) (rate(process_cpu_seconds_total{{{job}}}[{RATE}]))", "{{job}}"))
    add("Resident memory (bytes)", "bytes", (f"max by (job) (process_resident_memory_bytes{{{job}}})", "{{job}}"))
    add("Per-entity series over budget (series/s)", "suffix: series/s",
        (f"sum by (family) (rate(rainier_exporter_series_dropped_total{{{job}}}[{RATE}]))", "{{family}}"))
    lay.add(table("Build (version)", "short", f"rainier_build_info{{{job}}}",
                  {"instance": "Instance", "version": "Version", "wire_version": "Wire version"}, value="Up",
                  drill=False), 8, 8)
    variables = [datasource_var(), query_var(
        "job", "Job", 'label_values({__name__=~"rainier_build_info|rainier_probe_duration_seconds"}, job)',
        multi=True, include_all=True)]
    return dashboard("rainierd-self", "rainierd: self-health", lay.panels, variables,
                     "Is rainierd keeping up? Ingest, losses and rejections, lag, backlog and what it costs.")


def aggregate() -> Panel:
    """The aggregation tier (docs/aggregation.md), by aggregator: what each heard, batched, published and
    dropped and why, how late, and what it costs."""
    sel = 'job=~"$job", instance=~"$instance"'
    lay = Layout()

    def add(title: str, unit: str, *queries: tuple[str, str], stack: bool = False, description: str = "") -> None:
        lay.add(timeseries(title, unit, *refs(*(target(expr, legend) for expr, legend in queries)), stack=stack,
                           description=description), 8, 8)

    def by_instance(metric: str) -> str:
        return f"sum by (instance) (rate({metric}{{{sel}}}[{RATE}]))"

    lay.row("Frames")
    add("Node frames heard and published (frames/s)", "suffix: frames/s",
        (by_instance("rainier_aggregator_messages_received_total"), "{{instance}} heard"),
        (by_instance("rainier_aggregator_frames_published_total"), "{{instance}} published"))
    add("Dropped by reason (frames/s)", "suffix: frames/s",
        (f"sum by (reason) (rate(rainier_aggregator_frames_dropped_total{{{sel}}}[{RATE}]))", "{{reason}}"),
        stack=True, description="Each dropped frame is a sequence gap the monitor counts lost "
                                "(docs/aggregation.md has every reason).")
    add("Dropped / heard (%)", "percentunit",
        (f"{by_instance('rainier_aggregator_frames_dropped_total')} / "
         f"clamp_min({by_instance('rainier_aggregator_messages_received_total')}, 1e-9)", "{{instance}}"))
    add("Malformed node frames by decoder reason (frames/s)", "suffix: frames/s",
        (f"sum by (reason) (rate(rainier_aggregator_decode_errors_total{{{sel}}}[{RATE}]))", "{{reason}}"),
        stack=True)
    add("Frames batched without a field some records lacked (frames/s)", "suffix: frames/s",
        (by_instance("rainier_aggregator_frames_narrowed_total"), "{{instance}}"))
    add("Batches published (batches/s)", "suffix: batches/s",
        (by_instance("rainier_aggregator_batches_published_total"), "{{instance}}"))
    lay.row("Time")
    add("Frame age when batched: p99 and oldest (s)", "s",
        (f'max by (instance) (rainier_aggregator_frame_age_seconds{{{sel}, quantile="0.99"}})', "{{instance}} p99"),
        (f'max by (instance) (rainier_aggregator_frame_age_seconds{{{sel}, quantile="1"}})', "{{instance}} oldest"),
        description="now - t_s of the frames of its last tick: the agents' transport and the wait for the tick.")
    add("Tick duration: decode, batch, encode (s)", "s",
        (f"max by (instance) (rainier_aggregator_tick_duration_seconds{{{sel}}})", "{{instance}}"))
    add("Ticks batched late (ticks/s)", "suffix: ticks/s",
        (by_instance("rainier_aggregator_ticks_late_total"), "{{instance}}"))
    lay.row("Batches and backlog")
    add("Node entries per batch: p50 and p99 (nodes)", "short",
        (f"histogram_quantile(0.5, sum by (le) (rate(rainier_aggregator_batch_nodes_bucket{{{sel}}}[{RATE}])))",
         "p50"),
        (p99("rainier_aggregator_batch_nodes", sel), "p99"))
    add("Frames waiting for the tick (frames)", "short",
        (f"sum by (instance) (rainier_aggregator_pending_frames{{{sel}}})", "{{instance}}"))
    add("Batches waiting to be published (batches)", "short",
        (f"sum by (instance) (rainier_aggregator_outbox_batches{{{sel}}})", "{{instance}}"))
    lay.row("Session, share and cost")
    add("MQTT session up (on/off)", "bool_on_off",
        (f"min by (instance) (rainier_aggregator_mqtt_connected{{{sel}}})", "{{instance}}"))
    add("MQTT connection failures (failures/s)", "cps",
        (by_instance("rainier_aggregator_mqtt_connection_failures_total"), "{{instance}}"))
    add("Share (UltraServers)", "short",
        (f"max by (instance, shard) (rainier_aggregator_shards{{{sel}}} * 0 + on (instance) group_left "
         f"rainier_aggregator_share_ultraservers{{{sel}}})", "{{instance}} share {{shard}}"))
    add("CPU (cores)", "short",
        (f"sum by (instance) (rate(process_cpu_seconds_total{{{sel}}}[{RATE}]))", "{{instance}}"))
    add("Resident memory (bytes)", "bytes",
        (f"max by (instance) (process_resident_memory_bytes{{{sel}}})", "{{instance}}"))
    variables = [
        datasource_var(),
        query_var("job", "Job", "label_values(rainier_aggregator_shards, job)", multi=True, include_all=True),
        query_var("instance", "Aggregator", 'label_values(rainier_aggregator_shards{job=~"$job"}, instance)',
                  multi=True, include_all=True),
    ]
    return dashboard("rainierd-aggregate", "rainierd: aggregation tier", lay.panels, variables,
                     "The aggregators that batch per-node frames for the monitors: every frame heard, batched, "
                     "published or dropped and why, how late, and what it costs.",
                     health_events=False)  # health events are the monitors' judgements, not the tier's


def jobs() -> Panel:
    """Training jobs (docs/jobs.md, "Operating jobs"): the fleet's jobs by goodput and budget burn, what each
    loses by cause and to which culprits, the stalled ones, idle capacity, and the job documents refused.
    The job's label is ``training_job`` (Prometheus owns ``job``).  A job's figures are the recording rules'
    (``rainier:job_*``), which price a job spanning monitor shards whole (docs/jobs.md, "Combining shards")."""
    sel = 'training_job=~"$training_job"'
    lay = Layout()
    lay.row("Fleet")
    lay.add(panel("stat", "Jobs (jobs)", "short",
                  refs(target("sum(rainier_jobs)", "running"), target("sum(rainier_jobs_exported)", "exported")),
                  thresholds=[(None, "text")], decimals=0,
                  description="Jobs the monitors resolved from the job documents, and those exported per job "
                              "(the exporter's per-job series budget)."), 4, 5)
    lay.add(panel("stat", "Jobs over the export budget (jobs)", "short", [target("sum(rainier_jobs_over_budget)")],
                  thresholds=[(None, "green"), (1, "orange")], decimals=0,
                  description="Jobs left out of the per-job series: they count in the fleet figures, "
                              "not in this dashboard's tables."), 4, 5)
    lay.add(panel("stat", "Jobs stalled now (jobs)", "short",
                  [target("count(rainier:job_stalled:max == 1) or vector(0)")],
                  thresholds=[(None, "green"), (1, "red")], decimals=0), 4, 5)
    goodput = panel("gauge", "Allocated goodput (%)", "percentunit",
                    [target("rainier:fleet_allocated_goodput:ratio")],
                    thresholds=[(None, "red"), (0.9, "orange"), (0.99, "green")],
                    description="The jobs' effective FP8 over their effective plus lost, together, from the "
                                "whole jobs' figures (recording rules: a job spanning shards priced whole).")
    goodput["fieldConfig"]["defaults"] |= {"min": 0, "max": 1}
    lay.add(goodput, 4, 5)
    lay.add(panel("stat", "Unallocated FP8 peak (FLOP/s)", "flops",
                  [target("sum(rainier_fleet_fp8_unallocated_flops)")],
                  thresholds=[(None, "text")],
                  description="The peak of the nodes no job holds: idle capacity, never a loss."), 4, 5)
    lay.add(panel("stat", "Job documents refused (documents/s)", "suffix: documents/s",
                  [target(f"sum(rate(rainier_job_documents_refused_total[{RATE}])) or vector(0)")],
                  thresholds=[(None, "green"), (1e-9, "orange")]), 4, 5)
    lay.add(timeseries("Allocated goodput (%)", "percentunit",
                       target("rainier:fleet_allocated_goodput:ratio", "allocated goodput")), 8, 8)
    lay.add(timeseries("Unallocated FP8 peak (FLOP/s)", "flops",
                       target("sum(rainier_fleet_fp8_unallocated_flops)", "unallocated")), 8, 8)
    lay.add(timeseries("Job documents refused by reason (documents/s)", "suffix: documents/s",
                       target(f"sum by (reason) (rate(rainier_job_documents_refused_total[{RATE}]))", "{{reason}}"),
                       stack=True, description="docs/jobs.md lists the reasons; a refused document changes nothing, "
                                               "the job's last good one stands."), 8, 8)
    lay.row("Jobs")
    worst = table("Jobs by goodput, worst first (%)", "percentunit",
                  f"rainier:job_goodput:ratio{{{sel}}} * on (training_job) group_left (name, owner, scheduler) "
                  f"max by (training_job, name, owner, scheduler) (rainier_job_info{{{sel}}})",
                  {"training_job": "Training job", "name": "Name", "owner": "Owner", "scheduler": "Scheduler"},
                  value="Goodput", drill=False,
                  description="Click a training job to see only it: its losses, burn and culprits.")
    worst["options"]["sortBy"] = [{"displayName": "Goodput", "desc": False}]
    worst["fieldConfig"]["overrides"].append({"matcher": {"id": "byName", "options": "training_job"}, "properties": [
        {"id": "links", "value": [{"title": "Only ${__value.text}", "url": JOB_DRILL}]}]})
    lay.add(worst, 12, 8)
    burn = table("Jobs burning their budget fastest over 1h (budgets)", "short",
                 f"topk(10, rainier:job_fp8_lost:ratio_rate1h{{{sel}}} / scalar(rainier:job_goodput:error_budget))",
                 {"training_job": "Training job"}, value="Burn rate (1h)", drill=False,
                 description="Lost / healthy FP8 over the last hour, in error budgets (1 - the objective, "
                             "rainier:job_goodput:error_budget): over 14.4 with the 5-minute burn too pages.")
    burn["options"]["sortBy"] = [{"displayName": "Burn rate (1h)", "desc": True}]
    lay.add(burn, 6, 8)
    lay.add(table("Stalled jobs (stalled)", "short", f"rainier:job_stalled:max{{{sel}}} == 1",
                  {"training_job": "Training job"}, value="Stalled", drill=False,
                  description="Jobs delivering nothing now: a member failed or went silent."), 6, 8)
    lay.add(table("Jobs out of their running phase (phase)", "s",
                  f'max by (training_job, phase) (rainier_job_phase_seconds{{{sel}}} * on (training_job) '
                  f'group_right () (rainier_job_phase{{{sel},phase!="running"}} == 1))',
                  {"training_job": "Training job", "phase": "Phase"}, value="For", drill=False,
                  description="Jobs whose members went quiet together: a checkpoint (up to 5 minutes), a restart "
                              "(its scheduler says so), or stalled (longer, or a failed or silent member). A phase "
                              "raises no chip, link, EFA or node fault (docs/jobs.md, \"Job phases\")."), 12, 8)
    lay.add(timeseries("Stall seconds of the selected jobs (s/s)", "percentunit",
                       target(f"sum by (training_job) (rate(rainier_job_stall_seconds_total{{{sel}}}[{RATE}]))",
                              "{{training_job}}"),
                       description="The share of each second a job spent in checkpoint, restarting or stalled."),
            12, 8)
    lay.add(timeseries("Lost FP8 of the selected jobs by cause (FLOP/s)", "flops",
                       target(f"sum by (cause) (rainier:job_fp8_lost_flops:sum_by_cause{{{sel}}})", "{{cause}}"),
                       stack=True),
            12, 8)
    lay.add(timeseries("Lost / healthy FP8 over the burn windows (%)", "percentunit", *refs(
        target(f"rainier:job_fp8_lost:ratio_rate5m{{{sel}}}", "{{training_job}} 5m"),
        target(f"rainier:job_fp8_lost:ratio_rate1h{{{sel}}}", "{{training_job}} 1h"),
        target(f"rainier:job_fp8_lost:ratio_rate6h{{{sel}}}", "{{training_job}} 6h"),
        target("14.4 * rainier:job_goodput:error_budget", "fast burn (14.4x budget)"),
        target("6 * rainier:job_goodput:error_budget", "slow burn (6x budget)"),
    ), description="The SLI over the alerts' windows; a job pages when its 1h and 5m lines are both over the "
                   "fast-burn line, or its 6h and 30m over the slow one."), 12, 8)
    lay.add(table("Culprits of the selected jobs (FLOP/s)", "flops",
                  f"sort_desc(rainier_job_culprit_flops{{{sel}}})",
                  {"training_job": "Training job", "rank": "Rank", "entity": "Entity", "id": "Id"},
                  value="Costs the job", drill=False,
                  description="Up to five entities a job, each with the FP8 it costs the job "
                              "(docs/throughput-model.md, \"Per job\")."), 12, 8)
    lay.add(timeseries("Goodput of the selected jobs (%)", "percentunit",
                       target(f"rainier:job_goodput:ratio{{{sel}}}", "{{training_job}}")), 6, 8)
    lay.add(timeseries("Chips per job (chips)", "short",
                       target(f"rainier:job_chips:sum{{{sel}}}", "{{training_job}}")), 6, 8)
    variables = [datasource_var(),
                 query_var("training_job", "Training job", "label_values(rainier_job_info, training_job)",
                           multi=True, include_all=True)]
    return dashboard("rainierd-jobs", "rainierd: training jobs", lay.panels, variables,
                     "Each training job's goodput against its objective, what it loses by cause and to which "
                     "culprits, the stalled jobs, their phases, idle capacity and refused job documents.",
                     job_phases=True, alert_labels=("training_job",))


DASHBOARDS = {"rainierd-fleet.json": fleet, "rainierd-ultraserver.json": ultraserver, "rainierd-self.json": self_health,
              "rainierd-aggregate.json": aggregate, "rainierd-jobs.json": jobs}


def render() -> dict[str, str]:
    """Return each dashboard file's text."""
    return {name: json.dumps(build(), indent=2, ensure_ascii=False) + "\n" for name, build in DASHBOARDS.items()}


def main(argv: list[str]) -> int:
    drift = []
    for name, text in render().items():
        path = OUT / name
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                drift.append(name)
        else:
            path.write_text(text)
    if drift:
        print("out of date (run python grafana/generate.py):", ", ".join(drift), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
