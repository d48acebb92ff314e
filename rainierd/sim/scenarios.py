"""Where a simulated run's faults come from: a TOML scenario file
(docs/scenarios.md), for a demo or a test that wants a given fault at a given
time, or random faults drawn at rates derived from published failure figures
(docs/calibration.md; each rate below cites its row).

What a fault is and what it does to the telemetry is ``sim/faults.py``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Final

import numpy as np

from rainierd.errors import ConfigError
from rainierd.fleet import Topology
from rainierd.sim.faults import SEVERITIES, TARGETS, Fault, FaultKind, flapping_fault


def _target_count(topo: Topology, target_kind: str) -> int:
    return {
        "link": topo.n_links, "efa": topo.n_efa, "chip": topo.n_chips, "node": topo.n_nodes,
        "ultraserver": topo.n_ultraservers, "site": topo.n_sites,
    }[target_kind]


def load_scenario(path: Path, topo: Topology, *, tick_s: float, rng: np.random.Generator) -> list[Fault]:
    """Return the faults of a TOML scenario file (docs/scenarios.md).

    Raises ConfigError naming the file, the fault and what is wrong.
    """
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"scenario {path}: {exc}") from None
    faults = []
    for i, entry in enumerate(document.get("fault", [])):
        where = f"scenario {path}, fault {i + 1}"
        try:
            kind = FaultKind(entry["kind"])
            scope = entry.get("scope", TARGETS[kind][0])
            if scope not in TARGETS[kind]:
                raise ConfigError(f"{where}: {kind} targets {' or '.join(TARGETS[kind])}, not {scope}")
            target = int(entry["target"])
            if not 0 <= target < _target_count(topo, scope):
                raise ConfigError(f"{where}: {scope} {target} is not in topology {topo.name}")
            start = round(float(entry["at_s"]) / tick_s)
            severity = float(entry.get("severity", SEVERITIES[kind][0]))
            if kind is FaultKind.NL_FLAPPING:
                faults.append(flapping_fault(rng, target, int(severity), start, tick_s))
                continue
            end = start + max(1, round(float(entry["for_s"]) / tick_s))
        except KeyError as exc:
            raise ConfigError(f"{where}: missing {exc.args[0]!r}") from None
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        faults.append(Fault(kind, target, severity, start, end, scope=scope))
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
