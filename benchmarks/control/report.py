"""The control campaign's report: exposure, raises per entity class and per
cause, the rate a day per 10,000 chips with its exact 95 % Poisson upper
bound (``detect/alarms.py``: 3.0 / exposure for no raise), per profile and
tick length and over the whole campaign; every raise with its seed, tick,
canonical id and evidence; and what the campaign cost a simulated chip-day.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from benchmarks._table import print_table as markdown
from benchmarks.control.running import RunResult
from benchmarks.detect.alarms import CHIPS_UNIT, class_of, poisson_upper, rates_of

__all__ = ["print_table", "summarise"]


def _cause(row: dict[str, Any]) -> str:
    """Return a raise's cause as the report counts it: entity, the state it went to, and its reasons."""
    return f"{row['entity']}:{row['after']} [{','.join(row['reasons'])}]"


def _figures(results: Sequence[RunResult]) -> dict[str, Any]:
    """Return the exposure, raises and rates of ``results`` taken together."""
    rows = [row for r in results for row in r.raises]
    chip_days = sum(r.chip_days for r in results)
    units = chip_days / CHIPS_UNIT
    cpu_s = sum(r.cpu_s for r in results)
    return {
        "runs": len(results),
        "chip_days": chip_days,
        "raises": len(rows),
        "per_day_per_10k_chips": len(rows) / units if units else None,
        "upper_95_per_day_per_10k_chips": poisson_upper(len(rows)) / units if units else None,
        "by_class": rates_of(Counter(class_of(row["entity"], row["after"]) for row in rows), chip_days),
        "by_cause": dict(Counter(_cause(row) for row in rows).most_common()),
        "by_phase": dict(Counter(row["phase"] for row in rows).most_common()),
        "cpu_s": cpu_s,
        "wall_s": sum(r.wall_s for r in results),
        "cpu_s_per_chip_day": cpu_s / chip_days if chip_days else None,
    }


def summarise(results: Sequence[RunResult], *, config: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """Return the campaign's report over ``results``: the whole, one section per profile and tick length (in
    the order first run), and every raise."""
    keys = list(dict.fromkeys((r.run.profile, r.run.tick_s) for r in results))
    sections = []
    for profile, tick_s in keys:
        mine = [r for r in results if (r.run.profile, r.run.tick_s) == (profile, tick_s)]
        phases: Counter[str] = Counter()
        seconds: Counter[str] = Counter()
        for r in mine:
            phases.update(r.phase_entries)
            seconds.update(r.phase_seconds)
        sections.append({
            "section": f"{profile} {tick_s:g} s", "profile": profile, "tick_s": tick_s,
            "chips": sorted({r.chips for r in mine}), "seconds": sorted({r.ticks * tick_s for r in mine}),
            "seeds": [r.run.seed for r in mine],
            **_figures(mine),
            # The disturbances happened as planned: each restart took both checkpoints back.
            "restarts": sum(r.restored_accounting and r.restored_learned for r in mine),
            "frames_published": sum(r.frames_published for r in mine),
            "frames_lost": sum(r.frames_lost for r in mine),
            "phase_entries": dict(phases),  # how many times a job entered each phase, started or ended
            "ultraserver_seconds_by_phase": dict(seconds),  # idle: held by no job
        })
    return {
        "benchmark": "control",
        **_figures(results),
        "sections": sections,
        "raises_list": [row for r in results for row in r.raises],
        "config": config,
        "campaign_wall_s": wall_s,
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _evidence(figures: dict[str, float | None]) -> str:
    return ", ".join(f"{k}={_fmt(v, '.4g')}" for k, v in figures.items())


def print_table(report: dict[str, Any]) -> None:
    """Print the report as Markdown tables: the sections, the classes, the causes, then every raise."""
    print(f"control campaign: {report['chip_days']:,.1f} chip-days in {report['runs']} runs, "
          f"{report['raises']} raises: {_fmt(report['per_day_per_10k_chips'], '.3g')} a day per 10k chips "
          f"(95 % bound {_fmt(report['upper_95_per_day_per_10k_chips'], '.3g')}); "
          f"{_fmt(report['cpu_s_per_chip_day'], '.3g')} s of CPU a chip-day\n")
    markdown(("profile", "tick s", "runs", "chips", "minutes", "chip-days", "raises", "per day per 10k",
              "95 % bound", "restarts restored", "frames lost", "CPU s / chip-day"),
             ((s["profile"], f"{s['tick_s']:g}", str(s["runs"]), "/".join(map(str, s["chips"])),
               "/".join(f"{v / 60:g}" for v in s["seconds"]), f"{s['chip_days']:.2f}", str(s["raises"]),
               _fmt(s["per_day_per_10k_chips"], ".3g"), _fmt(s["upper_95_per_day_per_10k_chips"], ".3g"),
               f"{s['restarts']}/{s['runs']}", str(s["frames_lost"]), _fmt(s["cpu_s_per_chip_day"], ".3g"))
              for s in report["sections"]))
    print()
    markdown(("class", "raises", "per day per 10k", "95 % bound"),
             ((name, str(c["false_alarms"]), _fmt(c["per_day_per_10k_chips"], ".3g"),
               _fmt(c["upper_95_per_day_per_10k_chips"], ".3g")) for name, c in report["by_class"].items()))
    if report["by_cause"]:
        print()
        markdown(("cause", "raises"), ((cause, str(n)) for cause, n in report["by_cause"].items()))
        print()
        markdown(("profile", "tick s", "seed", "tick", "entity", "state", "reasons", "phase", "evidence"),
                 ((r["profile"], f"{r['tick_s']:g}", str(r["seed"]), str(r["tick"]), r["id"], r["after"],
                   ",".join(r["reasons"]), r["phase"], _evidence(r["evidence"])) for r in report["raises_list"]))
