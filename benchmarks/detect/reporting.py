"""The detection benchmark's tables: one per profile x tick length, as
docs/detection.md shows them, each with its comparison to the headline tick.
"""

from __future__ import annotations

from typing import Any

from benchmarks.detect.phases import LOOKBACK_S

__all__ = ["print_table"]


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _print_section(graded: dict[str, Any], cfg: dict[str, Any], profile: str) -> None:
    """Print one profile x tick length: the table docs/detection.md shows, and what follows it."""
    tick_s = graded["tick_s"]
    print(f"\nprofile {profile}, {tick_s:g} s ticks: {graded['faults']} faults in {graded['fault_runs']} runs of "
          f"{cfg['chips']} chips, {cfg['seeds']} seeds, noise {cfg['noise']}, grace {cfg['grace_s']:g} s")
    print("| kind | severity | faults | recall | precision | F1 | TTD median s | TTD p95 s | TTC median s | "
          "TTC p95 s | cleared early | not cleared | duplicates |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in graded["rows"]:
        print(f"| {r['kind']} | {r['severity']:g} | {r['faults']} | {r['recall']:.3f} | {r['precision']:.3f} | "
              f"{r['f1']:.3f} | {_fmt(r['ttd_median_s'], 'g')} | {_fmt(r['ttd_p95_s'], '.1f')} | "
              f"{_fmt(r['ttc_median_s'], 'g')} | {_fmt(r['ttc_p95_s'], '.1f')} | {r['cleared_early']} | "
              f"{r['not_cleared']} | {r['duplicates']} |")
    if "comparison" in graded:
        base = graded["comparison"]["baseline_tick_s"]
        print(f"against {base:g} s ticks (F1 difference, TTD median difference in s):")
        for r in graded["comparison"]["rows"]:
            print(f"  {r['kind']} {r['severity']:g}: F1 {_fmt(r['f1_diff'], '+.3f')}, "
                  f"TTD median {_fmt(r['ttd_median_s_diff'], '+g')} s")
    if by_kind := graded.get("by_kind"):
        print("per fault kind (every severity and placement):")
        print("| kind | faults | detected | TTD median s | TTD p95 s | TTC median s | TTC p95 s | not cleared |")
        print("|---|---|---|---|---|---|---|---|")
        for k in by_kind:
            print(f"| {k['kind']} | {k['faults']} | {k['detected']} | {_fmt(k['ttd_median_s'], 'g')} | "
                  f"{_fmt(k['ttd_p95_s'], '.1f')} | {_fmt(k['ttc_median_s'], 'g')} | {_fmt(k['ttc_p95_s'], '.1f')} | "
                  f"{k['not_cleared']} |")
    c = graded["control"]
    shapes = " + ".join(f"{s['runs']} x {s['chips']} chips x {s['seconds']:g} s"
                        for s in c.get("composition", [])) or f"{c['runs']} runs"
    print(f"control: {shapes} ({c['chip_days']:.0f} chip-days, diurnal swing included): {c['false_alarms']} "
          f"false alarms = {_fmt(c['false_alarms_per_day_per_10k_chips'], '.2f')} per day per 10k chips "
          f"(95 % upper bound {_fmt(c['upper_95_per_day_per_10k_chips'], '.2f')}) {c['by_entity']}")
    if by_class := c.get("by_class"):
        print("| entity class | false alarms | per day per 10k chips | 95 % upper bound |")
        print("|---|---|---|---|")
        for name, v in by_class.items():
            print(f"| {name} | {v['false_alarms']} | {_fmt(v['per_day_per_10k_chips'], '.2f')} | "
                  f"{_fmt(v['upper_95_per_day_per_10k_chips'], '.2f')} |")
    if (jp := c.get("job_phases")) is not None:
        print(f"job-mix control: phases entered {jp['phase_entries']} "
              f"(UltraServers {jp['phase_entered_ultraservers']})")
        print(f"  UltraServer-seconds by phase {jp['ultraserver_seconds_by_phase']}")
        print(f"  false alarms by phase at the event's tick {jp['by_phase']}")
        print(f"  by phase, at or within the {LOOKBACK_S:g} s before {jp['by_phase_or_just_after']}")
        for cause, n in jp["by_cause"].items():
            print(f"  {n:>5}  {cause}")
    if (jr := graded.get("job_rows")) is not None:
        _print_job_rows(jr)
    e = graded["effective_fp8_error"]
    print(f"fleet effective FP8 vs truth: median error {_fmt(e['median'], '.2e')}, p99 {_fmt(e['p99'], '.2e')}, "
          f"max {_fmt(e['max'], '.2e')}")
    print("lost FP8 by cause, estimate vs truth (summed over all runs):")
    for cause, v in graded["lost_by_cause"].items():
        print(f"  {cause:<20} truth {v['truth_flops_ticks']:.3e}  estimate {v['estimate_flops_ticks']:.3e}  "
              f"error {_fmt(v['relative_error'], '.1%')}")
    print(f"precision by entity: { {k: round(v, 4) for k, v in graded['precision_by_entity'].items()} }")
    print(f"detection cost: {_fmt(graded['detect_s_per_tick_per_chip'], '.2e')} s per tick per chip "
          f"(whole in-process pipeline)")


def _print_job_rows(jr: dict[str, Any]) -> None:
    """Print the job rows: per kind, each faulted job's loss by cause against truth and its culprit."""
    tol = jr["tolerance"]
    print(f"job rows: {jr['faulted_jobs']} faulted jobs in {jr['runs']} runs over {jr['seeds']} seeds; "
          f"{jr['within']} of {jr['graded_jobs']} with a loss have it by cause within {tol:.0%} of truth, "
          f"culprit found in {jr['culprit_found']}; {jr['interrupted']} interrupted by a phase")
    print(f"| kind | severity | scope | jobs | UltraServers | within {tol:.0%} | ratio median | ratio min | "
          "ratio max | by-cause error max | culprit found | no loss in truth | charged then (of peak, max) | "
          "interrupted |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in jr["rows"]:
        us = ",".join(str(u) for u in r["ultraservers"])
        print(f"| {r['kind']} | {r['severity']:g} | {r['scope']} | {r['jobs']} | {us} | {r['within']}/{r['graded']} | "
              f"{_fmt(r['ratio_median'], '.3f')} | {_fmt(r['ratio_min'], '.3f')} | {_fmt(r['ratio_max'], '.3f')} | "
              f"{_fmt(r['by_cause_error_max'], '.1%')} | {r['culprit_found']}/{r['graded']} | {r['no_loss']} | "
              f"{_fmt(r['no_loss_estimate_of_peak_max'], '.1e')} | {r['interrupted']} |")
    misses = [j for j in jr["jobs"] if j["within"] is False or (not j["no_loss"] and not j["culprit_found"])]
    for j in misses:
        print(f"  miss: seed {j['seed']} {j['job']} ({j['ultraservers']} UltraServers) {j['kind']} "
              f"{j['severity']:g} {j['scope']} {j['target']}: ratio {_fmt(j['ratio'], '.3f')}, by-cause error "
              f"{_fmt(j['by_cause_error'], '.1%')}, culprit {j['culprit']}, truth {j['truth_by_cause']}, "
              f"estimate {j['estimate_by_cause']}{', phases ' + str(j['interrupted']) if j['interrupted'] else ''}")
    if (f := jr.get("fleet")) is not None:
        print(f"fleet headline (lost FP8 by cause, every run): {_fmt(f['ratio'], '.3f')} of truth "
              f"(per-UltraServer fallback alone: {_fmt(f['fallback_ratio'], '.3f')}); by-cause error "
              f"{_fmt(f['by_cause_error_total'], '.1%')}; {f['runs_within']}/{f['runs_graded']} runs within "
              f"{tol:.0%} (median {_fmt(f['run_by_cause_error_median'], '.1%')}, max "
              f"{_fmt(f['run_by_cause_error_max'], '.1%')}); headline - jobs - unallocated, max "
              f"{f['sum_gap_max']:.1e} relative")
        for cause, v in f["by_cause"].items():
            print(f"  {cause}: {_fmt(v['ratio'], '.3f')} of truth (fallback {_fmt(v['fallback_ratio'], '.3f')})")
        for r in f.get("runs_outside", []):
            print(f"  run outside: seed {r['seed']} (model {r['model_seed']}) by-cause error "
                  f"{r['by_cause_error']:.1%}, "
                  f"faults {r['faults']}, truth {r['truth_by_cause']}, estimate {r['estimate_by_cause']} "
                  f"(jobs: truth {r['jobs_truth']:.3g}, estimate {r['jobs_estimate']:.3g})")
    c = jr["clean"]
    print(f"jobs holding no fault: {c['jobs']}, {c['charged']} charged anything; charged "
          f"{_fmt(c['estimate_of_faulted_truth'], '.2e')} of the faulted jobs' true loss, "
          f"{_fmt(c['estimate_of_peak'], '.2e')} of their own peak "
          f"(worst job {_fmt(c['estimate_of_peak_max'], '.2e')}); "
          f"their true loss {c['truth_flops_ticks']:.3g}")
    for leak in c["charged_jobs"]:
        print(f"  charged: seed {leak['seed']} {leak['job']} (UltraServers {leak['ultraservers']}) "
              f"{leak['estimate_of_peak']:.2e} of its peak {leak['estimate_by_cause']}, culprits {leak['culprits']} "
              f"({'its own entities' if leak['culprits_in_own_job'] else 'entities of another job'}); "
              f"faults in the run {leak['faults_in_run']}")


def print_table(report: dict[str, Any]) -> None:
    """Print one table per profile x tick length, each with its comparison to the headline tick."""
    cfg = report["config"]
    head = report["headline"]
    print(f"detection benchmark: profiles {', '.join(cfg['profiles'])}, ticks "
          f"{', '.join(f'{t:g}' for t in cfg['ticks_s'])} s; headline {head['profile']} at {head['tick_s']:g} s")
    for profile, section in report["profiles"].items():
        for graded in section["ticks"].values():
            _print_section(graded, cfg, profile)
    print(f"\nwall {report['wall_s']:.0f} s")
