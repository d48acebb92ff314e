"""A read report turned into one reading per Neuron device of the node, given
which of its metric groups are new since the last report.  Pure, no I/O.

A device's figure is known only when every one of its logical cores is
accounted for, because a NeuronCore belongs to one Neuron application at a
time and neuron-monitor lists, per application, only the cores that were
active (neuron-monitor user guide, "neuroncore_counters"):

- a core listed by a healthy runtime gives its own values;
- a device that no healthy runtime's ``neuroncores_in_use`` lists, while
  every runtime's ``neuroncore_counters`` is healthy, is **idle**:
  utilisation 0, no FLOP executed.  If any runtime (or its counters) is
  unknown (an ``error``, an entry that is not an object, a group missing or
  errored, a core that cannot be placed), a device not wholly listed is
  unknown, because the unknown runtime may be using it;
- a device's utilisation is the mean over *all* its logical cores (an
  unlisted core of a wholly accounted node is idle), its FLOP/s the sum;
- its HBM in use is the sum of ``neuroncore_memory_usage`` over its cores,
  on the same rule (no runtime holding memory on it: 0 bytes in use by
  Neuron applications);
- execution statistics are a runtime's, not a core's: they count against a
  device only when all of that runtime's cores are on it.  A runtime spread
  over several devices (or on none) is counted unattributed, and the devices
  it spans have no execution figures for the period.  If any runtime cannot
  be placed at all, no device has them;
- ECC comes from ``neuron_hw_counters``; a device it does not list has none.
  When ``neuron_hardware_info`` counts fewer devices than the node has and
  ``neuron_hw_counters`` does not list a device, the device is gone.

Whatever is physically impossible is refused (and counted) here: a device's
FLOP/s above the chip's peak times the margin, its HBM in use above its
memory.  Counts of periods (FLOP, per-period ECC, execution errors) are
given only for groups that are new, so a group neuron-monitor repeats in a
report because another group's period came round is never counted twice.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from rainierd.bridge._config import BridgeConfig
from rainierd.bridge._report import ECC_FIELDS, Report, RuntimeSample
from rainierd.bridge._values import Refusals

N = TypeVar("N", int, float)


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """What one report says of one device; None: unknown."""

    present: bool | None = None
    util: float | None = None  # 0..1
    flops: float | None = None  # FLOP/s over the period
    flop: float | None = None  # FLOP executed in the report's new periods
    flop_whole: bool = False  # ``flop`` covers every period the frame's time covers (else: the total only)
    hbm_bytes: int | None = None
    exec_errors: int | None = None  # in the new periods (0: nothing new)
    exec_timeouts: int | None = None
    latency_us: float | None = None
    ecc: Mapping[str, int | None] = field(default_factory=dict)  # ECC_FIELDS as reported (per period or totals)


@dataclass(frozen=True, slots=True)
class Devices:
    """Every device's reading, and what the bridge counts for its own metrics."""

    devices: tuple[DeviceReading, ...]
    errors: Counter[str]  # execution errors by kind, new periods only
    unattributed: Counter[str]  # of those, from runtimes on several devices, none, or an unknown place
    timeouts: int


@dataclass(eq=False)
class _Cores:
    """Per device, the cores listed and what they say."""

    listed: Counter[int] = field(default_factory=Counter)
    util: defaultdict[int, list[float | None]] = field(default_factory=lambda: defaultdict(list))
    flops: defaultdict[int, list[float | None]] = field(default_factory=lambda: defaultdict(list))
    flop: defaultdict[int, list[float | None]] = field(default_factory=lambda: defaultdict(list))
    stale: set[int] = field(default_factory=set)  # devices with a core whose counters are repeated, not new
    spoiled: set[int] = field(default_factory=set)  # devices with a core listed twice


def _gather(runtimes: tuple[RuntimeSample, ...], fresh: Callable[[str], bool], refusals: Refusals) -> _Cores:
    """Return the listed cores' values by device."""
    out = _Cores()
    seen: set[int] = set()
    for runtime in runtimes:
        if runtime.cores is None:
            continue
        new = fresh(f"{runtime.key}/neuroncore_counters")
        period = runtime.core_period_s
        for index, core in runtime.cores.items():
            d = core.device
            if index in seen:
                refusals.add("neuroncore_index", "inconsistent")
                out.spoiled.add(d)
            seen.add(index)
            out.listed[d] += 1
            out.util[d].append(core.util)
            out.flops[d].append(core.flops)
            if new:
                out.flop[d].append(None if core.flops is None or period is None else core.flops * period)
            else:
                out.stale.add(d)
    return out


def _total(values: Sequence[N | None], zero: N) -> N | None:
    """Return the sum of ``values`` (``zero`` for none), None if any is unknown."""
    known = [v for v in values if v is not None]
    return None if len(known) < len(values) else sum(known, zero)


def _compute(report: Report, d: int, cores: _Cores, config: BridgeConfig,
             refusals: Refusals) -> tuple[float | None, float | None, float | None, bool]:
    """Return device ``d``'s utilisation, FLOP/s, FLOP in new periods and whether those cover it whole."""
    listed, per_device = cores.listed[d], report.cores_per_device
    if listed == 0:
        return (0.0, 0.0, 0.0, True) if report.cores_complete else (None, None, None, False)
    if per_device is None or d in cores.spoiled:
        return None, None, None, False
    if listed > per_device:
        refusals.add("neuroncore_index", "inconsistent")
        return None, None, None, False
    if listed < per_device and not report.cores_complete:
        return None, None, None, False
    util = _total(cores.util[d], 0.0)
    flops, flop = _total(cores.flops[d], 0.0), _total(cores.flop[d], 0.0)
    if flops is not None and flops > config.device_flops_bound:
        refusals.add("flops", "above_peak")
        flops = flop = None
    return (None if util is None else min(1.0, util / per_device), flops, flop,
            flop is not None and d not in cores.stale)


def _hbm(report: Report, config: BridgeConfig, refusals: Refusals) -> list[int | None]:
    """Return each device's HBM in use by Neuron applications (None: unknown or refused)."""
    listed: Counter[int] = Counter()
    used: defaultdict[int, list[int | None]] = defaultdict(list)
    for runtime in report.runtimes:
        for sample in (runtime.memory or {}).values():
            listed[sample.device] += 1
            used[sample.device].append(sample.bytes)
    capacity = (report.hardware.device_memory_bytes if report.hardware is not None else None) \
        or config.hardware.hbm_bytes
    out: list[int | None] = []
    for d in range(config.chips_per_node):
        whole = report.memory_complete or (report.cores_per_device is not None
                                           and listed[d] >= report.cores_per_device)
        total = _total(used[d], 0) if whole else None
        if total is not None and total > capacity:
            refusals.add("neuroncore_memory_usage", "above_capacity")
            total = None
        out.append(total)
    return out


@dataclass(eq=False)
class _Execution:
    """Per device, the execution statistics of the runtimes wholly on it."""

    errors: defaultdict[int, list[int | None]] = field(default_factory=lambda: defaultdict(list))
    timeouts: defaultdict[int, list[int | None]] = field(default_factory=lambda: defaultdict(list))
    latency: defaultdict[int, list[float | None]] = field(default_factory=lambda: defaultdict(list))
    blocked: set[int] = field(default_factory=set)  # devices a runtime of unknown or spread statistics is on
    kinds: Counter[str] = field(default_factory=Counter)
    unattributed: Counter[str] = field(default_factory=Counter)
    timed_out: int = 0


def _execution(report: Report, fresh: Callable[[str], bool]) -> _Execution:
    """Return the runtimes' execution statistics placed on devices."""
    out = _Execution()
    for runtime in report.runtimes:
        stats, place = runtime.execution, runtime.placed
        new = stats is not None and fresh(f"{runtime.key}/execution_stats")
        if stats is not None and new:
            out.kinds.update(stats.kinds)
            out.timed_out += stats.timeouts or 0
        if place is None or len(place) != 1:
            if stats is not None and new:
                out.unattributed.update(stats.kinds)
            out.blocked |= place or set()
            continue
        (d,) = place
        if stats is None:
            out.blocked.add(d)
            continue
        out.errors[d].append(stats.errors if new else 0)
        out.timeouts[d].append(stats.timeouts if new else 0)
        out.latency[d].append(stats.latency_s * 1e6 if stats.latency_s is not None else
                              (-1.0 if stats.latency_known else None))
    return out


def _latency(values: list[float | None]) -> float | None:
    """Return the slowest runtime's median device latency (-1: a runtime that ran nothing; None: unknown)."""
    if None in values:
        return None
    ran = [v for v in values if v is not None and v >= 0]
    return max(ran) if ran else None


def _present(report: Report, d: int, chips: int) -> bool | None:
    """Return whether device ``d`` is there: listed by neuron_hw_counters, or gone by it and the hardware info."""
    listed = report.devices_listed
    if listed is None:
        return None
    if d in listed:
        return True
    count = report.hardware.device_count if report.hardware is not None else None
    return False if count is not None and count < chips else None


def device_readings(report: Report, config: BridgeConfig, fresh: Callable[[str], bool]) -> Devices:
    """Return every device's reading from ``report``; ``fresh(key)`` says whether a metric group (by its key in
    ``report.groups``) is new since the last report.  Refusals are counted into ``report.refusals``."""
    refusals = report.refusals
    cores = _gather(report.runtimes, fresh, refusals)
    hbm = _hbm(report, config, refusals)
    execution = _execution(report, fresh)
    ecc_new = fresh("system/neuron_hw_counters")
    readings = []
    for d in range(config.chips_per_node):
        present = _present(report, d, config.chips_per_node)
        if present is False:
            readings.append(DeviceReading(present=False))
            continue
        util, flops, flop, whole = _compute(report, d, cores, config, refusals)
        exec_known = report.placement_complete and d not in execution.blocked
        ecc = (report.ecc or {}).get(d, {})
        readings.append(DeviceReading(
            present=present, util=util, flops=flops, flop=flop, flop_whole=whole, hbm_bytes=hbm[d],
            exec_errors=_total(execution.errors[d], 0) if exec_known else None,
            exec_timeouts=_total(execution.timeouts[d], 0) if exec_known else None,
            latency_us=_latency(execution.latency[d]) if exec_known else None,
            ecc={name: ecc.get(name) for name in ECC_FIELDS} if ecc_new or config.ecc_counts == "cumulative"
            else {name: 0 if ecc.get(name) is not None else None for name in ECC_FIELDS},
        ))
    return Devices(tuple(readings), execution.kinds, execution.unattributed, execution.timed_out)
