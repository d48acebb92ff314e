"""The anchors benchmark's tables: per profile, one row per fault row with each detector's precision, recall,
F1 and median time to detect side by side, then each detector's false alarms a day per 10k chips (and the 95 %
bound) in the detection benchmark's control and in the control campaign.
"""

from __future__ import annotations

from typing import Any

from benchmarks._table import print_table as markdown

__all__ = ["cell", "print_table"]


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def cell(row: dict[str, Any] | None) -> str:
    """Return one detector's figures on one fault row: ``P/R/F1 TTD``."""
    if row is None:
        return "-"
    return (f"{row['precision']:.2f}/{row['recall']:.2f}/{row['f1']:.2f} "
            f"{_fmt(row['ttd_median_s'], 'g')}{'' if row['ttd_median_s'] is None else ' s'}")


def print_table(report: dict[str, Any]) -> None:
    """Print the side-by-side tables of ``report`` (``running.bench_anchors``)."""
    detectors: list[str] = report["detectors"]
    cfg = report["config"]
    print(f"anchors beside rainierd: {cfg['fault_runs']} fault runs of {cfg['ultraservers']} UltraServers "
          f"({cfg['seeds']} seeds), {cfg['tick_s']:g} s ticks; each cell precision/recall/F1 and median TTD "
          f"(precision is per entity class, as the detection benchmark grades it)")
    for profile, section in report["profiles"].items():
        print(f"\nprofile {profile}")
        rows = [[key, str(next(iter(cells.values()))["faults"]), *(cell(cells.get(d)) for d in detectors)]
                for key, cells in section["rows"].items()]
        markdown(["fault row", "faults", *detectors], rows)
        if machine := section.get("minder_machine_recall"):
            print("minder's recall by machine (a node raise on the node holding the fault, Minder's own unit): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in machine.items()))
        control = section["control"]
        campaign = section["campaign"]
        alarm_rows = [
            ["detect control: false alarms", *(str(control[d]["false_alarms"]) for d in detectors)],
            ["... a day per 10k chips (95 % bound)",
             *(f"{_fmt(control[d]['false_alarms_per_day_per_10k_chips'], '.0f')} "
               f"({_fmt(control[d]['upper_95_per_day_per_10k_chips'], '.0f')})" for d in detectors)],
            [f"campaign ({campaign['runs']} runs, {campaign['chip_days']:.0f} chip-days): false alarms",
             *(str(campaign["detectors"][d]["false_alarms"]) for d in detectors)],
            ["... a day per 10k chips (95 % bound)",
             *(f"{_fmt(campaign['detectors'][d]['per_day_per_10k_chips'], '.0f')} "
               f"({_fmt(campaign['detectors'][d]['upper_95_per_day_per_10k_chips'], '.0f')})" for d in detectors)],
        ]
        print(f"\nfalse alarms, profile {profile} (detect control: "
              f"{next(iter(control.values()))['chip_days']:.1f} chip-days)")
        markdown(["", *detectors], alarm_rows)
        print("by entity class: " + "; ".join(
            f"{d} {control[d]['by_entity'] or {}} / campaign "
            f"{ {k: v['false_alarms'] for k, v in campaign['detectors'][d]['by_class'].items()} }"
            for d in detectors))
        if cost := section.get("anchor_s_per_tick"):
            print("anchor CPU a tick (ms, this fleet): " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in cost.items()))
    print(f"\nwall {report['wall_s']:.0f} s")
