"""One neuron-monitor report, read: every documented shape accepted, every
value judged, nothing invented.  Pure, no I/O, no state.

The shapes come from AWS's neuron-monitor user guide
(aws-neuron/aws-neuron-sdk, tools/neuron-sys-tools/neuron-monitor-user-guide.rst,
"The JSON output format" and "Metric Groups"):

- ``neuron_runtime_data``: one entry per Neuron application, each with
  ``pid``, ``neuron_runtime_tag``, ``error`` and a ``report`` of its metric
  groups (``neuroncore_counters``, ``execution_stats``, ``memory_used``,
  ``neuron_runtime_vcpu_usage``).  Runtimes come and go between reports.
  An empty list is a node with no Neuron application running; ``null``, a
  missing key, an object or a string says nothing about them, and an entry
  that is not an object, or carries an ``error``, is a runtime whose data
  is unknown.
- ``system_data``: the system groups (``neuron_hw_counters``, ``vcpu_usage``,
  ``memory_info``).
- every metric group is ``{"period": <actual captured period, s>, "error":
  "", …}``; a group may be missing or ``null`` (not configured), and one
  whose ``error`` is not empty is unknown, however zeroed its values.
- ``instance_info`` and ``neuron_hardware_info`` are "always present", yet
  AWS's own consumer (neuron-monitor-prometheus.py) guards against
  ``"neuron_hardware_info": null``; both may carry an ``error``.
- ``neuroncores_in_use``: per logical core ``neuroncore_utilization``
  (percent over the period), ``flops`` (FLOP per second over the period;
  older neuron-monitor reports have no ``flops`` at all) and, on Trn2,
  ``v3d`` (its physical cores).

What this module returns is still per runtime and per core: which device a
core is on (``_cores``) is decided here, but what a device's values are,
given which groups are new since the last report, is ``_devices``'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from rainierd.bridge._config import BridgeConfig
from rainierd.bridge._cores import CoreMap, HardwareInfo, read_hardware_info, v3d_device
from rainierd.bridge._values import Refusals, count, is_error, number

MAX_PERIOD_S: Final = 3_600.0
MAX_LATENCY_S: Final = 86_400.0
# Utilisation is a percentage over a measured period: a hair above 100 is the measurement's, not the core's.
_UTIL_SLACK: Final = 1.01

GROUPS: Final = (
    "neuroncore_counters", "execution_stats", "memory_used", "neuron_runtime_vcpu_usage",
    "neuron_hw_counters", "vcpu_usage", "memory_info", "neuron_hardware_info", "instance_info",
)
"""The documented groups (and the two always-present objects): the only values of the ``group`` label."""
RUNTIME_GROUPS: Final = GROUPS[:4]
SYSTEM_GROUPS: Final = GROUPS[4:7]

ECC_FIELDS: Final = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")
"""neuron_hw_counters' per-device counts: ``mem_*`` of the device's DRAM (HBM), ``sram_*`` of its SRAM."""

ERROR_KINDS: Final = ("generic", "numerical", "transient", "model", "runtime", "hardware")
"""execution_stats' ``error_summary`` kinds (the guide's example says ``numerical``, its list ``numeric``:
both are read as ``numerical``)."""
DEVICE_ERROR_KINDS: Final = ("generic", "runtime", "hardware")
"""The kinds that are the device's or its runtime's: numerical and model errors are the job's, transient ones
(an ECC correction) are recovered."""


@dataclass(frozen=True, slots=True)
class CoreSample:
    """One logical NeuronCore in one runtime's ``neuroncores_in_use``."""

    device: int
    util: float | None  # 0..1; None: refused
    flops: float | None  # FLOP/s over the group's period; None: absent or refused


@dataclass(frozen=True, slots=True)
class MemorySample:
    """One logical NeuronCore's device memory in one runtime's ``memory_used``."""

    device: int
    bytes: int | None  # the sum of its categories; None: one of them refused


@dataclass(frozen=True, slots=True)
class ExecSample:
    """One runtime's ``execution_stats`` over its period."""

    errors: int | None  # generic + runtime + hardware; None: one of them unknown
    timeouts: int | None
    latency_s: float | None  # median time on the device of one execution; None: none ran, or unknown
    latency_known: bool  # False: the latency could not be read (unknown), not that nothing ran
    kinds: Mapping[str, int]  # every readable error kind, for the bridge's own metrics


@dataclass(frozen=True, slots=True)
class RuntimeSample:
    """One Neuron application's groups, as far as they could be read."""

    key: str  # which runtime (pid and tag): what freshness is judged per
    cores: Mapping[int, CoreSample] | None  # neuroncores_in_use; None: the group is unknown
    core_period_s: float | None  # neuroncore_counters' period; None: unknown
    memory: Mapping[int, MemorySample] | None  # device memory in use by logical core; None: the group is unknown
    execution: ExecSample | None
    placed: frozenset[int] | None  # devices its cores are on (nc counters or memory); None: not known


@dataclass(frozen=True, slots=True)
class Report:
    """A report as read: per runtime, per device's ECC, and what could not be read."""

    instance_id: str | None
    hardware: HardwareInfo | None
    cores_per_device: int | None
    runtimes: tuple[RuntimeSample, ...]
    # Every runtime's cores (and so every core's data) is accounted for: a core no runtime lists is idle.
    cores_complete: bool
    memory_complete: bool
    placement_complete: bool  # every runtime's devices are known (its execution stats can be placed)
    ecc: Mapping[int, Mapping[str, int | None]] | None  # device -> ECC_FIELDS' values (None: unknown); None: unknown
    devices_listed: frozenset[int] | None  # the devices neuron_hw_counters lists (None: it is unknown)
    periods: Mapping[str, float]  # every group's period by group key
    groups: Mapping[str, object]  # every metric group by key ("<runtime key>/<group>", "system/<group>")
    refusals: Refusals
    group_errors: Counter[str] = field(default_factory=Counter)  # groups carrying an error, by group name
    runtime_errors: int = 0  # runtimes that carried an error or could not be read


def _group(report: Mapping[str, object], name: str, key: str, out: _Reading) -> Mapping[str, object] | None:
    """Return metric group ``name`` of ``report`` if it is present and healthy, recording it under ``key``."""
    group = report.get(name)
    if group is None:
        return None
    if not isinstance(group, Mapping):
        out.refusals.add(name, "wrong_type")
        return None
    out.groups[key] = group
    if is_error(group.get("error")):
        out.group_errors[name] += 1
        return None
    if "period" in group:
        period = number(group["period"], "period", out.refusals, upper=MAX_PERIOD_S)
        if period == 0.0:
            out.refusals.add("period", "out_of_range")
        elif period is not None:
            out.periods[key] = period
    return group


@dataclass(eq=False)
class _Reading:
    """What reading one report gathers as it goes."""

    config: BridgeConfig
    refusals: Refusals = field(default_factory=Refusals)
    groups: dict[str, object] = field(default_factory=dict)
    periods: dict[str, float] = field(default_factory=dict)
    group_errors: Counter[str] = field(default_factory=Counter)


def _index(key: object) -> int | None:
    """Return a JSON key that is a decimal index (``"12"``) as an int, else None."""
    return int(key) if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 6 else None


def _core_index(key: object, refusals: Refusals) -> int | None:
    """Return a logical core's index from its JSON key (``"12"``), None (counted) for anything else."""
    index = _index(key)
    if index is None:
        refusals.add("neuroncore_index", "wrong_type")
    return index


def _v3d(runtimes: list[Mapping[str, object]], out: _Reading) -> tuple[dict[int, int], int | None, int]:
    """Return the devices the cores' v3d names place them on, the physical cores a logical core when every
    v3d says the same (else None), and the highest core index listed (-1: none)."""
    placed: dict[int, int] = {}
    widths: set[int] = set()
    highest = -1
    physical = out.config.hardware.neuron_cores
    for report in runtimes:
        counters = report.get("neuroncore_counters")
        in_use = counters.get("neuroncores_in_use") if isinstance(counters, Mapping) else None
        if not isinstance(in_use, Mapping):
            continue
        for key, core in in_use.items():
            if (index := _index(key)) is None:
                continue
            highest = max(highest, index)
            if isinstance(core, Mapping) and "v3d" in core:
                device = v3d_device(core["v3d"], physical, out.refusals)
                if device is not None:
                    placed[index] = device
                    widths.add(len(core["v3d"]))  # v3d_device checked it is a mapping
    width = widths.pop() if len(widths) == 1 else None
    if width is not None and physical % width == 0 and placed and \
            max(Counter(placed.values()).values()) > physical // width:
        # More logical cores on one device than it has: the names count physical cores from 0 on each device,
        # not across the node, and say nothing of which device.  The hardware info places the cores.
        out.refusals.add("v3d", "inconsistent")
        return {}, width, highest
    return placed, width, highest


def _cores(counters: Mapping[str, object], cores: CoreMap, out: _Reading) -> dict[int, CoreSample] | None:
    """Return a healthy neuroncore_counters group's cores; None when one of them cannot be placed (its data
    then belongs to some device, unknown which)."""
    in_use = counters.get("neuroncores_in_use")
    if not isinstance(in_use, Mapping):
        out.refusals.add("neuroncores_in_use", "wrong_type")
        return None
    samples: dict[int, CoreSample] = {}
    whole = True
    for key, core in in_use.items():
        index = _core_index(key, out.refusals)
        device = None if index is None else cores.device(index, out.refusals)
        if index is None or device is None:
            whole = False
            continue
        if not isinstance(core, Mapping):
            out.refusals.add("neuroncore", "wrong_type")
            samples[index] = CoreSample(device, None, None)
            continue
        util = number(core.get("neuroncore_utilization"), "neuroncore_utilization", out.refusals,
                      upper=100.0 * _UTIL_SLACK)
        flops = number(core["flops"], "flops", out.refusals) if "flops" in core else None
        samples[index] = CoreSample(device, None if util is None else min(1.0, util / 100.0), flops)
    return samples if whole else None


def _memory(group: Mapping[str, object], cores: CoreMap, out: _Reading) -> dict[int, MemorySample] | None:
    """Return a healthy memory_used group's device memory in use by logical core (the sum of its categories);
    None when a core cannot be placed."""
    used = group.get("neuron_runtime_used_bytes")
    breakdown = used.get("usage_breakdown") if isinstance(used, Mapping) else None
    per_core = breakdown.get("neuroncore_memory_usage") if isinstance(breakdown, Mapping) else None
    if not isinstance(per_core, Mapping):
        out.refusals.add("neuroncore_memory_usage", "wrong_type")
        return None
    memory: dict[int, MemorySample] = {}
    for key, categories in per_core.items():
        index = _core_index(key, out.refusals)
        device = None if index is None else cores.device(index, out.refusals)
        if index is None or device is None:
            return None
        if not isinstance(categories, Mapping):
            out.refusals.add("neuroncore_memory_usage", "wrong_type")
            memory[index] = MemorySample(device, None)
            continue
        values = [count(v, "neuroncore_memory_usage", out.refusals) for v in categories.values()]
        memory[index] = MemorySample(device, None if None in values else sum(v for v in values if v is not None))
    return memory


def _execution(group: Mapping[str, object], out: _Reading) -> ExecSample:
    """Return a healthy execution_stats group's errors, timeouts and median device latency."""
    summary = group.get("error_summary")
    kinds: dict[str, int] = {}
    if isinstance(summary, Mapping):
        for kind in ERROR_KINDS:
            name = "numeric" if kind == "numerical" and kind not in summary and "numeric" in summary else kind
            if name in summary and (value := count(summary[name], f"error_summary.{kind}", out.refusals)) is not None:
                kinds[kind] = value
    elif summary is not None or "error_summary" in group:
        out.refusals.add("error_summary", "wrong_type")
    errors = sum(kinds[k] for k in DEVICE_ERROR_KINDS) if all(k in kinds for k in DEVICE_ERROR_KINDS) else None
    outcomes = group.get("execution_summary")
    timeouts = None
    if isinstance(outcomes, Mapping) and "timed_out" in outcomes:
        timeouts = count(outcomes["timed_out"], "execution_summary.timed_out", out.refusals)
    elif outcomes is not None or "execution_summary" in group:
        out.refusals.add("execution_summary", "wrong_type")
    latency_s, known = None, False
    stats = group.get("latency_stats")
    if isinstance(stats, Mapping) and "device_latency" in stats:
        device = stats["device_latency"]
        if device is None:  # documented: no model executed during the period
            known = True
        elif isinstance(device, Mapping) and "p50" in device:
            latency_s = number(device["p50"], "device_latency.p50", out.refusals, upper=MAX_LATENCY_S)
            known = latency_s is not None
        else:
            out.refusals.add("device_latency", "wrong_type")
    elif stats is not None or "latency_stats" in group:
        out.refusals.add("latency_stats", "wrong_type")
    return ExecSample(errors, timeouts, latency_s, known, kinds)


def runtime_key(entry: Mapping[str, object]) -> str | None:
    """Return which runtime an entry is (its pid and tag), None when it says neither."""
    pid, tag = entry.get("pid"), entry.get("neuron_runtime_tag")
    return f"runtime[{pid!s:.32}|{tag!s:.255}]" if pid is not None or tag is not None else None


def _runtime(index: int, entry: Mapping[str, object], cores: CoreMap, out: _Reading) -> RuntimeSample | None:
    """Return one healthy runtime's groups as far as they can be read (None: it has no report to read)."""
    report = entry.get("report")
    if not isinstance(report, Mapping):
        out.refusals.add("report", "wrong_type")
        return None
    key = runtime_key(entry) or f"runtime#{index}"
    groups = {name: _group(report, name, f"{key}/{name}", out) for name in RUNTIME_GROUPS}
    counters, memory_group, execution = (groups["neuroncore_counters"], groups["memory_used"],
                                         groups["execution_stats"])
    samples = _cores(counters, cores, out) if counters is not None else None
    memory = _memory(memory_group, cores, out) if memory_group is not None else None
    placed: frozenset[int] | None = None
    if samples is not None or memory is not None:
        # The cores it ran on (active at capture) and those it holds memory on: together, where it is.
        placed = frozenset({core.device for core in (samples or {}).values()}
                           | {sample.device for sample in (memory or {}).values()})
    return RuntimeSample(
        key=key, cores=samples, core_period_s=out.periods.get(f"{key}/neuroncore_counters"),
        memory=memory, execution=_execution(execution, out) if execution is not None else None,
        placed=placed,
    )


def _ecc(system: Mapping[str, object], out: _Reading) -> tuple[dict[int, dict[str, int | None]] | None, bool]:
    """Return neuron_hw_counters' ECC counts by device (None: the group is unknown), and whether its device
    list could be read whole."""
    group = _group(system, "neuron_hw_counters", "system/neuron_hw_counters", out)
    if group is None:
        return None, False
    devices = group.get("neuron_devices")
    if not isinstance(devices, list):
        out.refusals.add("neuron_devices", "wrong_type")
        return None, False
    ecc: dict[int, dict[str, int | None]] = {}
    whole = True
    seen: Counter[int] = Counter()
    for device in devices:
        index = count(device.get("neuron_device_index"), "neuron_device_index", out.refusals) \
            if isinstance(device, Mapping) else None
        if not isinstance(device, Mapping):
            out.refusals.add("neuron_device", "wrong_type")
        if index is not None and index >= out.config.chips_per_node:
            out.refusals.add("neuron_device_index", "out_of_range")
            index = None
        if index is None:
            whole = False
            continue
        seen[index] += 1
        assert isinstance(device, Mapping)
        ecc[index] = {name: count(device[name], name, out.refusals) if name in device else None
                      for name in ECC_FIELDS}
    for index, times in seen.items():
        if times > 1:  # two entries for one device: neither can be believed
            out.refusals.add("neuron_device_index", "inconsistent", times)
            ecc[index] = dict.fromkeys(ECC_FIELDS)
    return ecc, whole


def instance_id(report: Mapping[str, object]) -> str | None:
    """Return the instance a report says it is of (``instance_info.instance_id``), None when it says none."""
    info = report.get("instance_info")
    value = info.get("instance_id") if isinstance(info, Mapping) else None
    return value if isinstance(value, str) and value else None


def _instance_id(info: object, out: _Reading) -> str | None:
    """Return ``instance_info``'s instance id when it gives one."""
    if not isinstance(info, Mapping):
        if info is not None:
            out.refusals.add("instance_info", "wrong_type")
        return None
    if is_error(info.get("error")):
        out.group_errors["instance_info"] += 1
    return instance_id({"instance_info": info})


def read_report(report: Mapping[str, object], config: BridgeConfig) -> Report:
    """Return one neuron-monitor report (a decoded JSON object) as read; never raises on its content."""
    out = _Reading(config)
    hardware_info = report.get("neuron_hardware_info")
    if isinstance(hardware_info, Mapping) and is_error(hardware_info.get("error")):
        out.group_errors["neuron_hardware_info"] += 1
    hardware = read_hardware_info(hardware_info, config, out.refusals)
    runtime_data = report.get("neuron_runtime_data")
    entries: list[Mapping[str, object]] = []
    readable = isinstance(runtime_data, list)
    runtime_errors = 0
    if runtime_data is not None and not readable:
        out.refusals.add("neuron_runtime_data", "wrong_type")
    for entry in runtime_data if isinstance(runtime_data, list) else ():
        if not isinstance(entry, Mapping):
            out.refusals.add("neuron_runtime", "wrong_type")
            readable, runtime_errors = False, runtime_errors + 1
        elif is_error(entry.get("error")):
            readable, runtime_errors = False, runtime_errors + 1
        else:
            entries.append(entry)
    reports = [r for e in entries if isinstance(r := e.get("report"), Mapping)]
    placed, width, highest = _v3d(reports, out)
    cores = CoreMap.of(hardware, config, out.refusals, v3d=placed, v3d_width=width, highest_core=highest)
    runtimes = []
    for i, entry in enumerate(entries):
        sample = _runtime(i, entry, cores, out)
        if sample is None:
            readable, runtime_errors = False, runtime_errors + 1
        else:
            runtimes.append(sample)
    system = report.get("system_data")
    if system is not None and not isinstance(system, Mapping):
        out.refusals.add("system_data", "wrong_type")
    system = system if isinstance(system, Mapping) else {}
    ecc, listed_whole = _ecc(system, out)
    for name in SYSTEM_GROUPS[1:]:
        _group(system, name, f"system/{name}", out)
    return Report(
        instance_id=_instance_id(report.get("instance_info"), out),
        hardware=hardware,
        cores_per_device=cores.cores_per_device,
        runtimes=tuple(runtimes),
        cores_complete=readable and all(r.cores is not None for r in runtimes),
        memory_complete=readable and all(r.memory is not None for r in runtimes),
        placement_complete=readable and all(r.placed is not None for r in runtimes),
        ecc=ecc,
        devices_listed=frozenset(ecc) if ecc is not None and listed_whole else None,
        periods=out.periods,
        groups=out.groups,
        refusals=out.refusals,
        group_errors=out.group_errors,
        runtime_errors=runtime_errors,
    )
