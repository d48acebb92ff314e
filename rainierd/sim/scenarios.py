"""Where a simulated run's faults come from: a TOML scenario file
(docs/scenarios.md), for a demo or a test that wants a given fault at a given
time, or random faults drawn at rates derived from published failure figures
(docs/calibration.md; each rate below cites its row).

What a fault is and what it does to the telemetry is ``sim/faults.py``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np

from rainierd.errors import ConfigError
from rainierd.fleet import Topology
from rainierd.sim.faults import SEVERITIES, TARGETS, Fault, FaultKind, flapping_fault


def _target_count(topo: Topology, target_kind: str) -> int:
    return {
        "link": topo.n_links, "efa": topo.n_efa, "chip": topo.n_chips, "node": topo.n_nodes,
        "ultraserver": topo.n_ultraservers, "site": topo.n_sites,
    }[target_kind]


# A scenario file's tables (each an array of tables) and a fault's keys: anything else is a mistake (a
# ``[[faults]]`` or a ``severty`` read as nothing ran a demo with no fault at all).  ``[[job]]`` is
# sim/workload.py's.
_TABLES: Final = ("fault", "job")
_FAULT_KEYS: Final = ("kind", "target", "scope", "severity", "at_s", "for_s")


def _between(low: float, high: float, *, low_in: bool = False, high_in: bool = False) -> Callable[[float], bool]:
    return lambda s: (low <= s if low_in else low < s) and (s <= high if high_in else s < high)


# What each kind's severity may be, in words and as a test (docs/scenarios.md, "Kinds"); a kind absent here
# takes no severity.  The bounds are what the kind's effect means (sim/faults.py): a share left is above 0 and
# below 1, a multiplier above 1, a count whole.
_SEVERITY: Final[dict[FaultKind, tuple[str, Callable[[float], bool]]]] = {
    FaultKind.NL_DEGRADED: ("from 0.125 to 0.875 (1 to 7 of 8 lanes up)", _between(0.125, 0.875, low_in=True,
                                                                                   high_in=True)),
    FaultKind.NL_FLAPPING: ("a whole number of cycles from 1 to 100",
                            lambda s: s.is_integer() and 1 <= s <= 100),
    FaultKind.NL_CRC_STORM: ("above 0 (CRC errors a second)", lambda s: s > 0),
    FaultKind.EFA_DEGRADED: ("above 0 and below 1 (the share of throughput left)", _between(0, 1)),
    FaultKind.EFA_LOSS: ("above 0 and below 1 (a packet loss rate)", _between(0, 1)),
    FaultKind.EFA_SLOW: ("above 1 (a latency multiplier)", lambda s: s > 1),
    FaultKind.EFA_NODE_DEGRADED: ("above 0 and below 1 (the share of throughput left)", _between(0, 1)),
    FaultKind.CHIP_THROTTLE: ("above 0 and below 1 (a clock ratio)", _between(0, 1)),
    FaultKind.STRAGGLER: ("above 0 and below 1 (how much slower)", _between(0, 1)),
    FaultKind.COOLING_FAN: ("from 0 to below 1 (the share of fan speed left)", _between(0, 1, low_in=True)),
    FaultKind.COOLING_INLET: ("above 0 (degrees C of inlet air rise)", lambda s: s > 0),
    FaultKind.DIURNAL: ("above 0 and below 1 (the share of clock lost at mid-day)", _between(0, 1)),
}


def _number(entry: dict[str, Any], key: str, where: str) -> float:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: {key} must be a number, not {value!r}")
    return float(value)


def _severity(entry: dict[str, Any], kind: FaultKind, where: str) -> float:
    """Return the fault's severity (its kind's first graded one when not given); raise ConfigError if out of range."""
    if "severity" not in entry:
        return SEVERITIES[kind][0]
    if kind not in _SEVERITY:
        raise ConfigError(f"{where}: {kind} takes no severity")
    severity = _number(entry, "severity", where)
    allowed, ok = _SEVERITY[kind]
    if not ok(severity):
        raise ConfigError(f"{where}: {kind}'s severity must be {allowed}, not {severity:g}")
    return severity


def _fault(entry: object, where: str, topo: Topology, *, tick_s: float, rng: np.random.Generator) -> Fault:
    """Return one ``[[fault]]`` entry as a Fault; raise ConfigError saying what is wrong with it."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: not a table")
    if unknown := sorted(set(entry) - set(_FAULT_KEYS)):
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; a fault takes {', '.join(_FAULT_KEYS)}")
    try:
        kind = FaultKind(entry["kind"])
    except ValueError:
        raise ConfigError(f"{where}: unknown kind {entry['kind']!r}; the kinds are "
                          f"{', '.join(map(str, FaultKind))}") from None
    scope = entry.get("scope", TARGETS[kind][0])
    if scope not in TARGETS[kind]:
        raise ConfigError(f"{where}: {kind} targets {' or '.join(TARGETS[kind])}, not {scope}")
    target = entry["target"]
    if isinstance(target, bool) or not isinstance(target, int):
        raise ConfigError(f"{where}: target must be a whole number (an id), not {target!r}")
    if not 0 <= target < _target_count(topo, scope):
        raise ConfigError(f"{where}: {scope} {target} is not in topology {topo.name}")
    at_s = _number(entry, "at_s", where)
    if at_s < 0:
        raise ConfigError(f"{where}: at_s must be 0 or more, not {at_s:g}")
    start = round(at_s / tick_s)
    severity = _severity(entry, kind, where)
    if kind is FaultKind.NL_FLAPPING:
        if "for_s" in entry:
            raise ConfigError(f"{where}: nl_flapping takes no for_s (its down/up schedule sets its length)")
        return flapping_fault(rng, target, int(severity), start, tick_s)
    for_s = _number(entry, "for_s", where)
    if not for_s > 0:
        raise ConfigError(f"{where}: for_s must be above 0, not {for_s:g}")
    return Fault(kind, target, severity, start, start + max(1, round(for_s / tick_s)), scope=scope)


def load_scenario(path: Path, topo: Topology, *, tick_s: float, rng: np.random.Generator) -> list[Fault]:
    """Return the faults of a TOML scenario file (docs/scenarios.md).

    Raises ConfigError naming the file, the fault and what is wrong: an
    unknown table or key, a missing key, an unknown kind (the kinds listed),
    a target outside the topology, a severity outside its kind's range.
    """
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"scenario {path}: {exc}") from None
    if unknown := sorted(set(document) - set(_TABLES)):
        raise ConfigError(f"scenario {path}: unknown table or key {unknown[0]!r}; a scenario holds [[fault]] and "
                          "[[job]] tables (docs/scenarios.md)")
    entries = document.get("fault", [])
    if not isinstance(entries, list):
        raise ConfigError(f"scenario {path}: fault must be an array of tables, [[fault]]")
    faults = []
    for i, entry in enumerate(entries):
        where = f"scenario {path}, fault {i + 1}"
        try:
            faults.append(_fault(entry, where, topo, tick_s=tick_s, rng=rng))
        except KeyError as exc:
            raise ConfigError(f"{where}: missing {exc.args[0]!r}") from None
    return faults


# Random fault rates, per entity per day, derived from docs/calibration.md.  Each
# line cites its row; the per-kind split of "faulty accelerator" is ours.
_PER_DAY: Final[dict[FaultKind, tuple[str, float]]] = {
    # Llama 3: 148 faulty-accelerator + 72 HBM of 419 interruptions at 4.7e-4
    # per accelerator-day -> (148 + 72) / 419 * 4.7e-4.
    FaultKind.CHIP_FAILED: ("chip", 220 / 419 * 4.7e-4),
    # Llama 3: thermal interface / sensor, 6 of 419.
    FaultKind.CHIP_THROTTLE: ("chip", 6 / 419 * 4.7e-4),
    # MegaScale: ~0.5 % of machines straggle; episodes last seconds to ~10 h
    # (Falcon): one new episode a machine every ~100 days.
    FaultKind.STRAGGLER: ("chip", 0.005 / 100),
    # Meta RSC: 2.3-6.5 node failures per 1,000 node-days (midpoint 4.4).
    FaultKind.NODE_LOST: ("node", 4.4e-3),
    # Alibaba HPN: 0.057 % of links per month fail hard.
    FaultKind.NL_DOWN: ("link", 0.00057 / 30),
    FaultKind.EFA_DOWN: ("efa", 0.00057 / 30),
    # Alibaba HPN / MegaScale: thousands of flaps a day in a large cluster;
    # taken as 1 flapping episode per 10,000 links a day.
    FaultKind.NL_FLAPPING: ("link", 1e-4),
    # Llama 3: network switch / cable, 35 of 419, split over degraded and
    # corrupting links; NIC 7 of 419.
    FaultKind.NL_DEGRADED: ("link", 35 / 419 * 4.7e-4 / 16),
    FaultKind.NL_CRC_STORM: ("link", 35 / 419 * 4.7e-4 / 16),
    FaultKind.EFA_DEGRADED: ("efa", 7 / 419 * 4.7e-4),
    FaultKind.EFA_LOSS: ("efa", 35 / 419 * 4.7e-4),
    # No public figure separates slow-but-lossless paths from the NIC row:
    # assumed as frequent as efa_degraded.
    FaultKind.EFA_SLOW: ("efa", 7 / 419 * 4.7e-4),
    # No public figure for cooling faults: assumed 1e-3 per node-day.
    FaultKind.COOLING_FAN: ("node", 1e-3),
    FaultKind.COOLING_INLET: ("node", 1e-3),
}
# CorrOpt: share of corrupting links per loss-rate band.
_LOSS_BANDS: Final = ((1e-8, 1e-5, 0.47), (1e-5, 1e-4, 0.18), (1e-4, 1e-3, 0.22), (1e-3, 1e-2, 0.13))


def random_faults(
    topo: Topology,
    rng: np.random.Generator,
    *,
    ticks: int,
    tick_s: float,
    acceleration: float = 1.0,
    mean_duration_s: float = 600.0,
) -> list[Fault]:
    """Return faults drawn at the calibrated rates over ``ticks`` ticks.

    ``acceleration`` multiplies every rate (a demo wants faults within
    minutes, not years); durations are exponential with ``mean_duration_s``.
    """
    days = ticks * tick_s / 86_400.0
    faults: list[Fault] = []
    for kind, (target_kind, per_day) in _PER_DAY.items():
        count = int(rng.poisson(per_day * _target_count(topo, target_kind) * days * acceleration))
        for _ in range(count):
            target = int(rng.integers(_target_count(topo, target_kind)))
            start = int(rng.integers(ticks))
            if kind is FaultKind.NL_FLAPPING:
                faults.append(flapping_fault(rng, target, int(rng.integers(3, 11)), start, tick_s))
                continue
            length = max(1, round(rng.exponential(mean_duration_s) / tick_s))
            if kind is FaultKind.EFA_LOSS:
                lo, hi, _share = _LOSS_BANDS[rng.choice(4, p=[b[2] for b in _LOSS_BANDS])]
                severity = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
            else:
                severity = float(rng.choice(SEVERITIES[kind]))
            faults.append(Fault(kind, target, severity, start, start + length))
    return sorted(faults, key=lambda f: f.start_tick)
