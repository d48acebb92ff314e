"""What AWS neuron-monitor prints on a trn2.48xlarge, written from AWS's public
documentation alone, with the ground truth next to every report: the
independent yardstick the neuron-monitor bridge is tested and benchmarked
against.  Pure Python and numpy, deterministic from a seed, no clock read:
time is simulated from ``Schedule.start_s`` and every report says when it was
captured and when a test should write it.

Sources (the only ones; nothing here comes from rainierd's bridge, its tests or
captured samples).  ``NM`` is the AWS Neuron SDK documentation repository
(github.com/aws-neuron/aws-neuron-sdk) at commit 81ce03ae (2026-08-21), file
tools/neuron-sys-tools/neuron-monitor-user-guide.rst, cited as ``NM:line``.

===========================================  ==================================================================
What this module emits                       Where the documentation says it
===========================================  ==================================================================
one JSON report per line on stdout           NM:13-15, 25-32, 184-185 ("a complete JSON is written to stdout")
default period 5 s; ``period`` per group     NM:68-69, 140-147; per-group override example NM:108-111
top level: ``neuron_runtime_data`` (array),  NM:189-232; runtime entry ``pid`` ``neuron_runtime_tag``
``system_data``, ``instance_info``,          ``error`` ``report`` NM:234-242 (``address`` appears in the example
``neuron_hardware_info``                     only, NM:193); ``system_data`` NM:244-246; instance_info and
                                             hardware_info always present NM:248-249
``instance_info`` fields and ``error``       NM:259-269, 271-282
``neuron_hardware_info`` (today's shape)     NM:292-301, 303-310: ``neuron_device_type`` ``neuron_device_version``
                                             ``neuroncore_version`` ``neuron_device_count``
                                             ``neuron_device_memory_size`` ``neuroncore_per_device_count``
                                             ``logical_neuroncore_config`` ``error``
``neuron_hardware_info`` (2.21-era shape)    same file at commit 2086a70a, lines 282-291 and 293-300:
                                             ``neuroncore_per_device_count: 8`` (physical) and
                                             ``logical_neuroncore_size``; ``neuroncore_version`` v3 at LNC=1, v3d
                                             at LNC=2 (2086a70a:294); commit d251c2e7 changed it to today's
every group: ``period`` (actual captured     NM:372-381
period, s) and ``error`` (string)
``neuroncore_counters``                      NM:395-425, 427-439: ``neuroncores_in_use`` keyed by NeuronCore index
                                             (NM:427-429), ``neuroncore_utilization`` percent over the period
                                             (NM:431-432), ``flops`` FLOP per second over the period (NM:433-434),
                                             ``v3d`` physical cores ``nc_v3.N`` on Trn2 (NM:400-408, 435-436; the
                                             example's logical utilisation is the mean of its two physical ones,
                                             NM:399-406)
``execution_stats``                          NM:448-487, 489-524: ``error_summary`` and ``execution_summary``
                                             counts for the captured period (NM:489-490, 499-500);
                                             ``latency_stats`` ``total_latency``/``device_latency`` percentiles
                                             p0 p1 p25 p50 p75 p99 p100 in seconds, ``null`` when nothing ran
                                             (NM:514-521)
``memory_used``                              NM:534-598, 601-661: ``neuron_runtime_used_bytes`` ``host``
                                             ``neuron_device`` ``usage_breakdown`` {``host`` {...},
                                             ``neuroncore_memory_usage`` by core (NM:619-626; "0"-"64" on
                                             trn2.48xlarge, NM:621)}; ``loaded_models`` (NM:564-598, 628-658)
``neuron_runtime_vcpu_usage``                NM:670-688
``neuron_hw_counters``                       NM:700-712, 714-727: ``neuron_devices[]`` with
                                             ``neuron_device_index`` ``mem_ecc_corrected`` ``mem_ecc_uncorrected``
                                             ``sram_ecc_corrected`` ``sram_ecc_uncorrected``
``vcpu_usage``                               NM:736-770, 772-789
``memory_info``                              NM:798-805, 807-813
===========================================  ==================================================================

Hardware figures (one trn2.48xlarge), each from the same repository at 81ce03ae:
16 Trainium2 chips (about-neuron/arch/neuron-hardware/trn2-arch.rst:29, 70-71), 192 vCPUs and 2,048 GiB of host
memory (trn2-arch.rst:73-77); 8 physical NeuronCore-v3 a chip (about-neuron/arch/neuron-hardware/trainium2.rst:7,
22; about-neuron/arch/neuron-features/logical-neuroncore-config.rst:14, 28); 1,299 dense FP8 TFLOPS a chip
(trainium2.rst:24, 72-74); 96 GiB of HBM a chip (trainium2.rst:30, 103-105; 103079215104 bytes in NM:297);
LNC is 1 or 2 (logical-neuroncore-config.rst:14): LNC=2 exposes 4 logical cores a chip, 64 a node (lines 53-56),
LNC=1 exposes 8, 128 a node (lines 88-90).  The global logical core index is device x cores-per-device + k:
tools/neuron-sys-tools/neuron-ls.rst:229-234 and 258-263 list device 0's ``neuroncore_ids`` 0-3 and device 15's
60-63 at LNC=2.

Where the documentation is silent, the choice is a parameter, never a guess (``Choices``; the defaults are
marked as choices in its docstring):

- whether ``neuron_hw_counters`` ECC values are counts for the captured period or totals since the driver loaded
  (NM:714-724 say only "number of ... ECC events"; the Neuron sysfs counters they mirror are totals since driver
  load, tools/neuron-sys-tools/neuron-sysfs-user-guide.rst:121-123, 185-191): ``Choices.ecc_reporting``;
- whether a report repeats the last content of a group that was not due, or leaves the group out (NM:23-32 and
  184-185: "consolidate it into a large report", "a complete JSON"): ``Choices.stale_groups``;
- the numeric-error key: the JSON example says ``numerical`` (NM:452), the text says ``numeric`` (NM:493):
  ``Choices.numeric_error_key``;
- whether ``v3d`` appears at LNC=1 (NM:435-436 "only available on Trn2", example at LNC=2 only):
  ``Choices.v3d_at_lnc1``; whether the N of ``nc_v3.N`` counts from 0 on each device or across the node (the
  example shows device 0 only, NM:400-418): ``Choices.physical_core_numbering``;
- where ``loaded_models`` sits (the example's braces do not balance, NM:534-598; the text lists it beside
  ``neuron_runtime_used_bytes``, NM:628): ``Choices.loaded_models``;
- a device with no runtime: ``neuroncores_in_use`` lives inside a runtime's report (NM:196-198, 427-429), so its
  cores appear in no runtime; whether a runtime whose every core left (its device vanished) stays with an empty
  ``neuroncores_in_use`` or leaves: ``Choices.orphan_runtime``;
- when the first capture of a group happens (one period after start here), and that a runtime that leaves
  between two captures is simply absent from the next report (its last part-period of work is never reported,
  and the truth counts only what the report shows).

Use::

    monitor = NeuronMonitor(node=NodeSpec(lnc=2), runtimes=runtime_per_core(lnc=2), seed=7,
                            faults=[LowFlop(device=3, start_s=60.0)])
    for sample in monitor.until(300.0):
        stdin.write(sample.wire())          # sample.write_at_s says when (a stall queues several)
        sample.truth.cores.flop             # FLOP each device executed over the report's period
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, TypeVar, get_args

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEFAULT_PERIOD_S",
    "DEVICES_PER_NODE",
    "ECC_FIELDS",
    "ERROR_KINDS",
    "FP8_DENSE_FLOPS_PER_DEVICE",
    "HBM_BYTES_PER_DEVICE",
    "OUTCOME_KINDS",
    "PERCENTILES",
    "PHYSICAL_CORES_PER_DEVICE",
    "RUNTIME_GROUPS",
    "SYSTEM_GROUPS",
    "Choices",
    "CoreTruth",
    "DeviceVanish",
    "EccCounterReset",
    "EccErrors",
    "EccTruth",
    "ExecErrors",
    "ExecTruth",
    "Fault",
    "LowFlop",
    "MemoryTruth",
    "NeuronMonitor",
    "NodeSpec",
    "NodeTruth",
    "Runtime",
    "RuntimeExecTruth",
    "Sample",
    "Schedule",
    "Stall",
    "UtilCollapse",
    "Variant",
    "Workload",
    "cores_of_device",
    "logical_cores_per_device",
    "runtime_per_core",
    "runtime_per_device",
    "runtime_per_node",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

DEVICES_PER_NODE: Final = 16  # trn2-arch.rst:29, 70-71
PHYSICAL_CORES_PER_DEVICE: Final = 8  # trainium2.rst:7; logical-neuroncore-config.rst:14, 28
FP8_DENSE_FLOPS_PER_DEVICE: Final = 1299e12  # trainium2.rst:24, 72-74
HBM_BYTES_PER_DEVICE: Final = 96 * 2**30  # trainium2.rst:30, 103-105; = 103079215104 (NM:297)
DEFAULT_PERIOD_S: Final = 5.0  # NM:68-69, 146-147
VCPUS_PER_NODE: Final = 192  # trn2-arch.rst:73-75
HOST_MEMORY_BYTES: Final = 2048 * 2**30  # trn2-arch.rst:76-77

RUNTIME_GROUPS: Final = ("neuroncore_counters", "execution_stats", "memory_used", "neuron_runtime_vcpu_usage")
SYSTEM_GROUPS: Final = ("neuron_hw_counters", "vcpu_usage", "memory_info")  # NM:155-169
ERROR_KINDS: Final = ("generic", "numerical", "transient", "model", "runtime", "hardware")  # NM:450-457
OUTCOME_KINDS: Final = (  # NM:458-465
    "completed", "completed_with_err", "completed_with_num_err", "timed_out", "incorrect_input", "failed_to_queue")
ECC_FIELDS: Final = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")
PERCENTILES: Final = ("p0", "p1", "p25", "p50", "p75", "p99", "p100")  # NM:467-484
_PERCENTILE_Q: Final = (0.0, 1.0, 25.0, 50.0, 75.0, 99.0, 100.0)
_VCPU_FIELDS: Final = ("user", "nice", "system", "idle", "io_wait", "irq", "soft_irq")  # NM:772-781
# The memory a logical core's model holds, split as the breakdown names it (NM:619-626); the split is this
# generator's, not AWS's.
_CORE_MEMORY_SPLIT: Final = {"constants": 0.35, "model_code": 0.05, "model_shared_scratchpad": 0.05,
                             "runtime_memory": 0.02, "tensors": 0.53}
# Executions failing with these kinds end "completed_with_err" (NM:503-504); numerical ones
# "completed_with_num_err" (NM:505-506); transient ones are recoverable (NM:494) and complete.
_FAILING_KINDS: Final = ("generic", "model", "runtime", "hardware")
_LATENCY_SAMPLES: Final = 64


def logical_cores_per_device(lnc: int) -> int:
    """Logical NeuronCores one Trainium2 exposes at this LNC: 8 at LNC=1, 4 at LNC=2
    (logical-neuroncore-config.rst:14)."""
    if lnc not in (1, 2):
        raise ValueError(f"LNC must be 1 or 2 (logical-neuroncore-config.rst:14), not {lnc!r}")
    return PHYSICAL_CORES_PER_DEVICE // lnc


def cores_of_device(device: int, *, lnc: int) -> tuple[int, ...]:
    """The global logical core indices of ``device``: device x per-device + k (neuron-ls.rst:229-234, 258-263)."""
    per = logical_cores_per_device(lnc)
    return tuple(range(device * per, (device + 1) * per))


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """One Neuron application (NM:234-242): its ``pid``, its ``neuron_runtime_tag`` (NM:117-122) and the global
    logical cores it owns; it is in a report captured at ``t`` when ``start_s <= t < stop_s``."""

    pid: int
    tag: str
    cores: tuple[int, ...]
    start_s: float = -math.inf
    stop_s: float = math.inf


def runtime_per_core(*, lnc: int = 2, devices: int = DEVICES_PER_NODE, first_pid: int = 20000,
                     tag: str = "worker") -> tuple[Runtime, ...]:
    """A training job as one runtime per logical core (64 at LNC=2, 128 at LNC=1), pids from ``first_pid``,
    tags ``{tag}-{core}``."""
    per = logical_cores_per_device(lnc)
    return tuple(Runtime(pid=first_pid + c, tag=f"{tag}-{c}", cores=(c,)) for c in range(devices * per))


def runtime_per_device(*, lnc: int = 2, devices: int = DEVICES_PER_NODE, first_pid: int = 20000,
                       tag: str = "worker") -> tuple[Runtime, ...]:
    """One runtime per device owning all its logical cores, pids from ``first_pid``, tags ``{tag}-{device}``."""
    return tuple(Runtime(pid=first_pid + d, tag=f"{tag}-{d}", cores=cores_of_device(d, lnc=lnc))
                 for d in range(devices))


def runtime_per_node(*, lnc: int = 2, devices: int = DEVICES_PER_NODE, pid: int = 20000,
                     tag: str = "train") -> tuple[Runtime, ...]:
    """One runtime owning every logical core of the node."""
    per = logical_cores_per_device(lnc)
    return (Runtime(pid=pid, tag=tag, cores=tuple(range(devices * per))),)


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """The node: a trn2.48xlarge (16 devices, trn2-arch.rst:29) at LNC 1 or 2, the ``neuron_hardware_info``
    shape of today (NM:292-301) or of Neuron 2.21 (2086a70a:282-291), and its ``instance_info`` (NM:259-269;
    the guide's example says trn2n.48xlarge, the node modelled here is a trn2.48xlarge)."""

    lnc: int = 2
    devices: int = DEVICES_PER_NODE
    hardware_info_shape: Literal["current", "2.21"] = "current"
    instance_id: str = "i-0123456789abcdef0"
    instance_type: str = "trn2.48xlarge"
    instance_name: str = "trn2-node"
    availability_zone: str = "us-east-2b"
    availability_zone_id: str = "use2-az2"
    region: str = "us-east-2"
    ami_id: str = "ami-0123456789abcdef1"
    subnet_id: str = "subnet-0123abcd"
    vcpus: int = VCPUS_PER_NODE
    host_memory_bytes: int = HOST_MEMORY_BYTES


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """When groups are captured.  Each group's period is ``group_period_s[group]`` or ``period_s`` (NM:140-147;
    default 5 s, NM:68-69).  neuron-monitor wakes when the earliest group is due, a little late
    (``U(0, jitter_s)``), captures every group then due and writes one report (NM:23-32, 177-179), so a group's
    reported ``period`` is the actual time since its last capture (NM:378), slightly above nominal as in the
    guide's examples (1.000113182, 5.346411129).  Groups not listed are disabled (absent from every report)."""

    period_s: float = DEFAULT_PERIOD_S
    group_period_s: Mapping[str, float] = field(default_factory=dict)
    jitter_s: float = 0.02
    start_s: float = 0.0
    runtime_groups: tuple[str, ...] = RUNTIME_GROUPS
    system_groups: tuple[str, ...] = SYSTEM_GROUPS


@dataclass(frozen=True, kw_only=True)
class Workload:
    """The healthy node's behaviour (this generator's model, not AWS's): each physical core is busy
    ``util_pct`` +- ``util_noise_pct`` (normal, clipped to 0..100); a physical core executes
    ``util/100 x FP8 peak/8 x flop_efficiency`` FLOP/s; each logical core holds ``hbm_used_fraction`` of its
    share of HBM; an execution takes ``device_latency_s`` on the device (lognormal spread ``latency_sigma``) plus
    ``runtime_overhead_s``; background ECC events and execution errors arrive as Poisson processes per device
    at the given rates (per second)."""

    util_pct: float = 85.0
    util_noise_pct: float = 1.5
    flop_efficiency: float = 0.5
    hbm_used_fraction: float = 0.75
    host_bytes_per_runtime: int = 2 * 2**30
    device_latency_s: float = 0.010
    runtime_overhead_s: float = 0.0005
    latency_sigma: float = 0.03
    ecc_rate_s: Mapping[str, float] = field(default_factory=dict)  # by ECC_FIELDS name, per device
    error_rate_s: Mapping[str, float] = field(default_factory=dict)  # by ERROR_KINDS name, per device
    timeout_rate_s: float = 0.0  # per device


@dataclass(frozen=True, kw_only=True)
class Choices:
    """What the documentation leaves open (module docstring); each default is this generator's choice.

    - ``ecc_reporting``: ``"per_period"`` (events in the captured period, like every other count of a metric
      group, NM:378, 489-500) or ``"cumulative"`` (totals since the driver loaded, like the Neuron sysfs
      counters, neuron-sysfs-user-guide.rst:121-123), starting from ``ecc_initial_totals``.
    - ``stale_groups``: ``"repeat"`` (a report carries every group's latest content, a group not due this time
      repeated with its old ``period``) or ``"omit"`` (only groups captured now).
    - ``numeric_error_key``: ``"numerical"`` (NM:452) or ``"numeric"`` (NM:493).
    - ``v3d_at_lnc1``: at LNC=1 each logical core lists its one physical core under ``v3d`` (True) or has no
      ``v3d`` (False).
    - ``physical_core_numbering``: ``nc_v3.N`` with N = global logical index x LNC + j (``"global"``) or the
      same from the device's first core (``"per_device"``).
    - ``loaded_models``: inside ``memory_used`` beside ``neuron_runtime_used_bytes`` (``"memory_used"``) or left
      out (``"absent"``).
    - ``orphan_runtime``: a runtime whose every core vanished leaves the report (``"leave"``) or stays with an
      empty ``neuroncores_in_use`` (``"empty"``).
    """

    ecc_reporting: Literal["per_period", "cumulative"] = "per_period"
    ecc_initial_totals: int = 0
    stale_groups: Literal["repeat", "omit"] = "repeat"
    numeric_error_key: Literal["numerical", "numeric"] = "numerical"
    v3d_at_lnc1: bool = True
    physical_core_numbering: Literal["global", "per_device"] = "global"
    loaded_models: Literal["memory_used", "absent"] = "memory_used"
    orphan_runtime: Literal["leave", "empty"] = "leave"


# ---- faults: each on one device, from start_s until stop_s ----


@dataclass(frozen=True, kw_only=True)
class UtilCollapse:
    """The device's cores go near-idle (``util_pct``) while the others stay busy; FLOP falls with them."""

    device: int
    start_s: float
    stop_s: float = math.inf
    util_pct: float = 2.0


@dataclass(frozen=True, kw_only=True)
class LowFlop:
    """The device executes ``factor`` of its usual FLOP at the same utilisation (a 30 % low-FLOP straggler by
    default); its runtimes' executions take 1/factor as long."""

    device: int
    start_s: float
    stop_s: float = math.inf
    factor: float = 0.7


@dataclass(frozen=True, kw_only=True)
class EccErrors:
    """ECC events of ``kind`` (one of ECC_FIELDS; uncorrectable HBM by default) at ``rate_s`` per second."""

    device: int
    start_s: float
    stop_s: float = math.inf
    kind: str = "mem_ecc_uncorrected"
    rate_s: float = 0.2


@dataclass(frozen=True, kw_only=True)
class ExecErrors:
    """Execution errors of ``kind`` (one of ERROR_KINDS, or ``"timed_out"``) on the runtimes owning the device's
    cores, at ``rate_s + growth_s2 x (t - start_s)`` per second (rising when ``growth_s2`` > 0), shared among
    those runtimes by their share of the device's cores."""

    device: int
    start_s: float
    stop_s: float = math.inf
    kind: str = "hardware"
    rate_s: float = 0.5
    growth_s2: float = 0.0


@dataclass(frozen=True, kw_only=True)
class DeviceVanish:
    """The device disappears: ``neuron_device_count`` drops, its entry leaves ``neuron_hw_counters``, its cores
    leave every runtime (and the truth marks it not present)."""

    device: int
    start_s: float
    stop_s: float = math.inf


@dataclass(frozen=True, kw_only=True)
class EccCounterReset:
    """The device's ECC totals restart from zero at ``start_s`` (a driver reload); visible only with
    ``Choices.ecc_reporting="cumulative"``, where a total goes backwards."""

    device: int
    start_s: float


@dataclass(frozen=True, kw_only=True)
class Stall:
    """Reports captured in ``[start_s, start_s + duration_s)`` keep their capture times and periods but are all
    to be written at ``start_s + duration_s``: the backlog a stalled pipe delivers at once."""

    start_s: float
    duration_s: float


_Shaped = TypeVar("_Shaped", UtilCollapse, LowFlop)
Fault = UtilCollapse | LowFlop | EccErrors | ExecErrors | DeviceVanish | EccCounterReset | Stall

VariantKind = Literal[
    "group_missing", "group_null", "group_error_zeroed", "group_error_absent",
    "runtime_error", "runtime_error_no_report", "latency_null",
    "hardware_info_null", "hardware_info_error",
    "runtime_data_empty", "runtime_data_null", "runtime_data_object", "runtime_data_non_object",
    "no_flops", "missing_device_index", "null_ecc", "value",
    "oversize_line", "not_json", "json_not_object",
]
_VARIANT_KINDS: Final = frozenset(get_args(VariantKind))


@dataclass(frozen=True, kw_only=True)
class Variant:
    """A change to the shape or values of the reports captured in ``[start_s, stop_s)``, for a consumer's
    robustness tests.  The truth is never changed; ``NodeTruth.variants`` lists those applied.

    ===========================  =========================================================================
    kind                         effect (fields used)
    ===========================  =========================================================================
    group_missing                ``group`` left out (every runtime's, for a runtime group; ``pid`` picks one)
    group_null                   ``group`` is ``null``
    group_error_zeroed           ``group`` has ``error`` = ``error`` and every number in it 0
    group_error_absent           ``group`` is only ``{"period", "error"}``
    runtime_error                runtime ``pid`` (default: the first) has ``error`` = ``error``, report kept
    runtime_error_no_report      same, and its ``report`` is ``{}``
    latency_null                 every (or ``pid``'s) ``latency_stats`` objects are ``null`` (NM:516-518)
    hardware_info_null           ``"neuron_hardware_info": null``
    hardware_info_error          ``neuron_hardware_info`` is only ``{"error": error}`` (NM:309-310)
    runtime_data_empty           ``"neuron_runtime_data": []``
    runtime_data_null            ``"neuron_runtime_data": null``
    runtime_data_object          ``neuron_runtime_data`` is an object keyed by pid instead of an array
    runtime_data_non_object      the array also holds ``value`` (default the string "garbage") and 42
    no_flops                     no ``flops`` key anywhere (or only on ``device``'s cores)
    missing_device_index         ``device``'s ``neuron_hw_counters`` entry has no ``neuron_device_index``
    null_ecc                     ``device``'s ``field`` (an ECC name, default mem_ecc_corrected) is ``null``
    value                        ``field`` set to ``value`` on ``device``: ``flops`` or
                                 ``neuroncore_utilization`` (each of its cores), an ECC name, ``neuron_device``
                                 (memory of the runtime owning its first core), ``period`` (of ``group``),
                                 ``neuron_device_count``; NaN and Infinity are emitted as Python's json does
    oversize_line                a line of ``value`` bytes (default 16 MiB + 1) of valid JSON before the report
    not_json                     a line that is not JSON before the report
    json_not_object              a JSON line that is not an object (``value``, default ``[1, 2, 3]``) before it
    ===========================  =========================================================================
    """

    kind: VariantKind
    start_s: float = -math.inf
    stop_s: float = math.inf
    group: str | None = None
    pid: int | None = None
    device: int | None = None
    field: str | None = None
    value: Any = None
    error: str = "synthetic error from the generator"

    def __post_init__(self) -> None:
        if self.kind not in _VARIANT_KINDS:
            raise ValueError(f"unknown variant kind {self.kind!r}")

    def applies(self, t_s: float) -> bool:
        """True when a report captured at ``t_s`` takes this variant."""
        return self.start_s <= t_s < self.stop_s


# ---- truth ----


@dataclass(frozen=True, eq=False)
class CoreTruth:
    """What ``neuroncore_counters`` reports, per global logical core and per device: the values are the ones
    emitted (utilisation rounded to 0.01 %, FLOP/s to an integer), so ``flop == flop_rate_s x period_s`` holds
    exactly against the report.  Cores no runtime reports read 0; cores of a vanished device NaN."""

    fresh: bool
    period_s: float
    core_util_pct: F64
    core_flop_rate_s: F64
    util_pct: F64  # per device: the mean of its logical cores
    flop_rate_s: F64  # per device: the sum of its logical cores
    flop: F64  # per device: FLOP executed over period_s


@dataclass(frozen=True, eq=False)
class EccTruth:
    """ECC events per device in the ``neuron_hw_counters`` period and totals since the driver loaded (after the
    last ``EccCounterReset``), by ECC_FIELDS name."""

    fresh: bool
    period_s: float
    events: Mapping[str, I64]
    totals: Mapping[str, I64]


@dataclass(frozen=True, eq=False)
class RuntimeExecTruth:
    """One runtime's ``execution_stats`` as emitted (error kinds under their canonical ERROR_KINDS names);
    the latency dicts are None when they were ``null``."""

    pid: int
    errors: Mapping[str, int]
    outcomes: Mapping[str, int]
    device_latency_s: Mapping[str, float] | None
    total_latency_s: Mapping[str, float] | None


@dataclass(frozen=True, eq=False)
class ExecTruth:
    """Execution errors by kind and timeouts per device in the ``execution_stats`` period (each error counted
    once, on the device that caused it; a runtime's ``error_summary`` is the sum over its devices), the median
    device latency of the runtimes on each device (median of their p50s, NaN where none ran), and each
    runtime's stats by pid."""

    fresh: bool
    period_s: float
    errors: Mapping[str, I64]
    timeouts: I64
    device_latency_p50_s: F64
    runtimes: Mapping[int, RuntimeExecTruth]


@dataclass(frozen=True, eq=False)
class MemoryTruth:
    """Device memory (HBM) used on each device by the reported runtimes at capture, and by each runtime."""

    fresh: bool
    period_s: float
    hbm_used_bytes: I64
    runtime_device_bytes: Mapping[int, int]


@dataclass(frozen=True, eq=False)
class NodeTruth:
    """The ground truth behind one report.  Per-group parts are None when the group is disabled or was never
    captured; ``fresh`` says which groups were captured for this report (others repeat their last content
    under ``Choices.stale_groups="repeat"``, and their truth part repeats with ``fresh=False``)."""

    index: int
    captured_at_s: float
    write_at_s: float
    fresh: frozenset[str]
    present: Bools
    device_count: int
    runtimes: tuple[int, ...]
    cores: CoreTruth | None
    ecc: EccTruth | None
    execution: ExecTruth | None
    memory: MemoryTruth | None
    variants: tuple[Variant, ...]


@dataclass(frozen=True, eq=False)
class Sample:
    """One report: ``report`` is ``line`` parsed back (so it is exactly what a reader gets), ``line`` the bytes
    neuron-monitor writes (newline-terminated), ``preceding`` any garbage lines to write before it, and
    ``truth`` what really happened."""

    report: dict[str, Any]
    line: bytes
    truth: NodeTruth
    preceding: tuple[bytes, ...] = ()

    @property
    def captured_at_s(self) -> float:
        """When neuron-monitor captured this report (simulated seconds)."""
        return self.truth.captured_at_s

    @property
    def write_at_s(self) -> float:
        """When a test should write it (later than captured during a ``Stall``)."""
        return self.truth.write_at_s

    def wire(self) -> bytes:
        """Every byte to write for this sample: the preceding lines, then the report line."""
        return b"".join((*self.preceding, self.line))


# ---- the generator ----


def _overlap_s(a: float, b: float, start: float, stop: float) -> float:
    return max(0.0, min(b, stop) - max(a, start))


@dataclass
class _Alive:
    runtime: Runtime
    cores: tuple[int, ...]  # its cores on present devices
    fraction: float  # share of the period it was alive


class NeuronMonitor:
    """The report stream of one node (module docstring).  ``next()`` returns the next report in capture order;
    ``until(t_s)`` every report captured at or before ``t_s``; iterating never ends.

    Raises ValueError on a configuration the documentation rules out (LNC other than 1 or 2, a core outside the
    node, two runtimes owning one core, an unknown group, fault field or variant kind, a period <= 0).
    """

    def __init__(self, *, node: NodeSpec | None = None, runtimes: Sequence[Runtime] | None = None,
                 schedule: Schedule | None = None, workload: Workload | None = None,
                 faults: Sequence[Fault] = (), variants: Sequence[Variant] = (), choices: Choices | None = None,
                 seed: int = 0) -> None:
        self.node = node or NodeSpec()
        self.schedule = schedule or Schedule()
        self.workload = workload or Workload()
        self.choices = choices or Choices()
        self.faults = tuple(faults)
        self.variants = tuple(variants)
        self._per = logical_cores_per_device(self.node.lnc)
        self.runtimes = tuple(runtimes) if runtimes is not None else runtime_per_core(
            lnc=self.node.lnc, devices=self.node.devices)
        self._validate()
        self._groups = tuple(g for g in (*RUNTIME_GROUPS, *SYSTEM_GROUPS)
                             if g in self.schedule.runtime_groups or g in self.schedule.system_groups)
        self._period = {g: float(self.schedule.group_period_s.get(g, self.schedule.period_s)) for g in self._groups}
        self._last = dict.fromkeys(self._groups, float(self.schedule.start_s))
        self._seed = seed
        self._sched_rng = np.random.default_rng([seed, 0])
        self._group_rng = {g: np.random.default_rng([seed, 1, i])
                           for i, g in enumerate((*RUNTIME_GROUPS, *SYSTEM_GROUPS))}
        self._runtime_rng: dict[int, np.random.Generator] = {}
        self._next_wake: float | None = None
        self._index = 0
        self._ecc_totals = np.full((len(ECC_FIELDS), self.node.devices), self.choices.ecc_initial_totals, np.int64)
        self._resets_done: set[int] = set()
        # The latest content of each group: system groups as one object, runtime groups by pid.
        self._system: dict[str, dict[str, Any]] = {}
        self._runtime: dict[str, dict[int, dict[str, Any]]] = {}
        self._truth: dict[str, Any] = {}

    # -- configuration checks --

    def _validate(self) -> None:
        n_cores = self.node.devices * self._per
        owners: dict[int, int] = {}
        for runtime in self.runtimes:
            for core in runtime.cores:
                if not 0 <= core < n_cores:
                    raise ValueError(f"runtime {runtime.pid}: core {core} is outside the node's {n_cores} cores")
                if core in owners:
                    raise ValueError(f"core {core} is owned by runtimes {owners[core]} and {runtime.pid}")
                owners[core] = runtime.pid
        known = set(RUNTIME_GROUPS) | set(SYSTEM_GROUPS)
        for g in (*self.schedule.runtime_groups, *self.schedule.system_groups, *self.schedule.group_period_s):
            if g not in known:
                raise ValueError(f"unknown metric group {g!r}")
        if self.schedule.period_s <= 0 or any(p <= 0 for p in self.schedule.group_period_s.values()):
            raise ValueError("every period must be > 0 s")
        for fault in self.faults:
            if isinstance(fault, EccErrors) and fault.kind not in ECC_FIELDS:
                raise ValueError(f"EccErrors kind {fault.kind!r} is not one of {ECC_FIELDS}")
            if isinstance(fault, ExecErrors) and fault.kind not in (*ERROR_KINDS, "timed_out"):
                raise ValueError(f"ExecErrors kind {fault.kind!r} is not one of {ERROR_KINDS} or 'timed_out'")
            if not isinstance(fault, Stall) and not 0 <= fault.device < self.node.devices:
                raise ValueError(f"{type(fault).__name__}: device {fault.device} is not on the node")

    # -- public stream --

    def __iter__(self) -> Iterator[Sample]:
        while True:
            yield self.next()

    def peek_s(self) -> float:
        """When the next report will be captured."""
        if self._next_wake is None:
            due = min(self._last[g] + self._period[g] for g in self._groups)
            self._next_wake = round(due + float(self._sched_rng.uniform(0.0, self.schedule.jitter_s)), 9)
        return self._next_wake

    def until(self, t_s: float) -> list[Sample]:
        """Every report captured at or before ``t_s`` not yet returned."""
        out = []
        while self.peek_s() <= t_s:
            out.append(self.next())
        return out

    def take(self, n: int) -> list[Sample]:
        """The next ``n`` reports."""
        return [self.next() for _ in range(n)]

    def next(self) -> Sample:
        """Capture and return the next report."""
        wake = self.peek_s()
        self._next_wake = None
        fresh = tuple(g for g in self._groups if self._last[g] + self._period[g] <= wake + 1e-9)
        present = self._present(wake)
        for g in fresh:
            start = self._last[g]
            period = round(wake - start, 9)
            self._capture(g, start, wake, period, present)
            self._last[g] = wake
        base = self._compose(wake, fresh, present)
        variants = tuple(v for v in self.variants if v.applies(wake))
        report, preceding = self._apply_variants(base, variants) if variants else (base, ())
        line = json.dumps(report, separators=(",", ":")).encode() + b"\n"
        truth = NodeTruth(
            index=self._index, captured_at_s=wake, write_at_s=self._write_at(wake), fresh=frozenset(fresh),
            present=present, device_count=int(present.sum()),
            runtimes=tuple(sorted(self._listed_runtimes(fresh))),
            cores=self._truth_part("neuroncore_counters", fresh), ecc=self._truth_part("neuron_hw_counters", fresh),
            execution=self._truth_part("execution_stats", fresh), memory=self._truth_part("memory_used", fresh),
            variants=variants)
        self._index += 1
        return Sample(report=json.loads(line), line=line, truth=truth, preceding=preceding)

    # -- time and faults --

    def _write_at(self, t_s: float) -> float:
        write = t_s
        for fault in self.faults:
            if isinstance(fault, Stall) and fault.start_s <= t_s < fault.start_s + fault.duration_s:
                write = max(write, fault.start_s + fault.duration_s)
        return write

    def _present(self, t_s: float) -> Bools:
        present = np.ones(self.node.devices, dtype=bool)
        for fault in self.faults:
            if isinstance(fault, DeviceVanish) and fault.start_s <= t_s < fault.stop_s:
                present[fault.device] = False
        return present

    def _fault_share(self, kind: type[_Shaped], a: float, b: float) -> list[tuple[_Shaped, float]]:
        """Each fault of ``kind`` with the share of ``[a, b]`` it was active."""
        shares = [(f, _overlap_s(a, b, f.start_s, f.stop_s) / (b - a)) for f in self.faults if isinstance(f, kind)]
        return [(f, share) for f, share in shares if share > 0]

    def _device_state(self, a: float, b: float) -> tuple[F64, F64]:
        """Time-weighted base utilisation (percent) and FLOP factor of each device over ``[a, b]``."""
        util = np.full(self.node.devices, self.workload.util_pct)
        factor = np.ones(self.node.devices)
        for collapse, share in self._fault_share(UtilCollapse, a, b):
            util[collapse.device] = util[collapse.device] * (1 - share) + collapse.util_pct * share
        for low, share in self._fault_share(LowFlop, a, b):
            factor[low.device] *= 1 - share * (1 - low.factor)
        return util, factor

    def _rate_integral(self, f: EccErrors | ExecErrors, a: float, b: float) -> float:
        """Expected events of a fault over ``[a, b]``: the integral of its (possibly rising) rate."""
        lo, hi = max(a, f.start_s), min(b, f.stop_s)
        if hi <= lo:
            return 0.0
        growth = f.growth_s2 if isinstance(f, ExecErrors) else 0.0
        return f.rate_s * (hi - lo) + growth * ((hi - f.start_s) ** 2 - (lo - f.start_s) ** 2) / 2

    def _alive(self, a: float, b: float, present: Bools) -> list[_Alive]:
        """The runtimes in a report captured at ``b``, with their cores on present devices."""
        out = []
        for runtime in self.runtimes:
            if not runtime.start_s <= b < runtime.stop_s:
                continue
            cores = tuple(c for c in runtime.cores if present[c // self._per])
            if not cores and self.choices.orphan_runtime == "leave":
                continue
            fraction = _overlap_s(a, b, runtime.start_s, runtime.stop_s) / (b - a)
            out.append(_Alive(runtime, cores, fraction))
        return out

    def _rng_for(self, pid: int) -> np.random.Generator:
        if pid not in self._runtime_rng:
            self._runtime_rng[pid] = np.random.default_rng([self._seed, 2, pid])
        return self._runtime_rng[pid]

    # -- captures --

    def _capture(self, group: str, a: float, b: float, period: float, present: Bools) -> None:
        alive = self._alive(a, b, present)
        if group == "neuroncore_counters":
            self._capture_cores(alive, a, b, period, present)
        elif group == "execution_stats":
            self._capture_execution(alive, a, b, period, present)
        elif group == "memory_used":
            self._capture_memory(alive, period, present)
        elif group == "neuron_runtime_vcpu_usage":
            rng = self._group_rng[group]
            self._runtime[group] = {
                r.runtime.pid: {"period": period, "vcpu_usage": {"user": round(float(rng.uniform(20, 60)), 2),
                                                                 "system": round(float(rng.uniform(2, 15)), 2)},
                                "error": ""} for r in alive}
        elif group == "neuron_hw_counters":
            self._capture_ecc(a, b, period, present)
        elif group == "vcpu_usage":
            self._system[group] = self._vcpu_usage(period)
        elif group == "memory_info":
            rng = self._group_rng[group]
            self._system[group] = {
                "period": period, "memory_total_bytes": self.node.host_memory_bytes,
                "memory_used_bytes": int(self.node.host_memory_bytes * float(rng.uniform(0.3, 0.4))),
                "swap_total_bytes": 0, "swap_used_bytes": 0, "error": ""}

    def _capture_cores(self, alive: list[_Alive], a: float, b: float, period: float, present: Bools) -> None:
        n_dev, per, lnc = self.node.devices, self._per, self.node.lnc
        rng = self._group_rng["neuroncore_counters"]
        base_util, factor = self._device_state(a, b)
        noise = rng.normal(0.0, self.workload.util_noise_pct, (n_dev, PHYSICAL_CORES_PER_DEVICE))
        phys_util = np.clip(base_util[:, None] + noise, 0.0, 100.0)
        phys_flops = (phys_util / 100.0 * FP8_DENSE_FLOPS_PER_DEVICE / PHYSICAL_CORES_PER_DEVICE
                      * self.workload.flop_efficiency * factor[:, None])
        phys_util = phys_util.reshape(n_dev * per, lnc)
        logical_flops = phys_flops.reshape(n_dev * per, lnc).sum(axis=1)
        share = np.zeros(n_dev * per)
        for r in alive:
            share[list(r.cores)] = r.fraction
        core_phys = np.round(phys_util * share[:, None], 2)
        core_util = np.round(phys_util.mean(axis=1) * share, 2)
        core_flops = np.round(logical_flops * share)
        content: dict[int, dict[str, Any]] = {}
        for r in alive:
            in_use: dict[str, Any] = {}
            for c in r.cores:
                entry: dict[str, Any] = {"neuroncore_utilization": float(core_util[c]), "flops": int(core_flops[c])}
                if lnc == 2 or self.choices.v3d_at_lnc1:
                    first = c * lnc if self.choices.physical_core_numbering == "global" else (c % per) * lnc
                    entry["v3d"] = {f"nc_v3.{first + j}": {"neuroncore_utilization": float(core_phys[c, j])}
                                    for j in range(lnc)}
                in_use[str(c)] = entry
            content[r.runtime.pid] = {"period": period, "neuroncores_in_use": in_use, "error": ""}
        self._runtime["neuroncore_counters"] = content
        gone = np.repeat(~present, per)
        core_util = np.where(gone, np.nan, core_util)
        core_flops = np.where(gone, np.nan, core_flops)
        flop_rate = core_flops.reshape(n_dev, per).sum(axis=1)
        self._truth["neuroncore_counters"] = CoreTruth(
            fresh=True, period_s=period, core_util_pct=core_util, core_flop_rate_s=core_flops,
            util_pct=core_util.reshape(n_dev, per).mean(axis=1), flop_rate_s=flop_rate, flop=flop_rate * period)

    def _capture_execution(self, alive: list[_Alive], a: float, b: float, period: float, present: Bools) -> None:
        n_dev, per = self.node.devices, self._per
        base_util, factor = self._device_state(a, b)
        activity = base_util / self.workload.util_pct
        kinds = (*ERROR_KINDS, "timed_out")
        # Expected events per device over the period, by kind: background plus faults.
        expected = np.zeros((len(kinds), n_dev))
        for k, kind in enumerate(kinds):
            rate = self.workload.timeout_rate_s if kind == "timed_out" else self.workload.error_rate_s.get(kind, 0.0)
            expected[k] += rate * period
        for f in self.faults:
            if isinstance(f, ExecErrors):
                expected[kinds.index(f.kind), f.device] += self._rate_integral(f, a, b)
        errors = np.zeros((len(kinds), n_dev), np.int64)
        content: dict[int, dict[str, Any]] = {}
        runtimes: dict[int, RuntimeExecTruth] = {}
        p50_by_device: list[list[float]] = [[] for _ in range(n_dev)]
        numeric_key = self.choices.numeric_error_key
        for r in alive:
            rng = self._rng_for(r.runtime.pid)
            devices = sorted({c // per for c in r.cores})
            counts = np.zeros(len(kinds), np.int64)
            for d in devices:
                cores_here = sum(1 for c in r.cores if c // per == d)
                drawn = rng.poisson(expected[:, d] * r.fraction * cores_here / per)
                errors[:, d] += drawn
                counts += drawn
            slow = max((1.0 / factor[d] for d in devices), default=1.0)
            pace = min((activity[d] for d in devices), default=0.0)
            mean_latency_s = self.workload.device_latency_s * slow
            per_execution_s = mean_latency_s + self.workload.runtime_overhead_s
            executions = int(rng.poisson(r.fraction * period * pace / per_execution_s))
            error_summary = {kind: int(counts[k]) for k, kind in enumerate(ERROR_KINDS)}
            failing = sum(error_summary[k] for k in _FAILING_KINDS)
            numerical, timed_out = error_summary["numerical"], int(counts[-1])
            outcomes = {"completed": max(executions - failing - numerical - timed_out, 0),
                        "completed_with_err": failing, "completed_with_num_err": numerical,
                        "timed_out": timed_out, "incorrect_input": 0, "failed_to_queue": 0}
            device_latency: dict[str, float] | None = None
            total_latency: dict[str, float] | None = None
            if executions > 0:
                draws = mean_latency_s * rng.lognormal(0.0, self.workload.latency_sigma,
                                                       min(executions, _LATENCY_SAMPLES))
                overhead = self.workload.runtime_overhead_s * rng.lognormal(0.0, 0.1, draws.size)
                device_latency = _percentiles(draws)
                total_latency = _percentiles(draws + overhead)
                for d in devices:
                    p50_by_device[d].append(device_latency["p50"])
            emitted_errors = {(numeric_key if k == "numerical" else k): v for k, v in error_summary.items()}
            content[r.runtime.pid] = {"period": period, "error_summary": emitted_errors,
                                      "execution_summary": outcomes,
                                      "latency_stats": {"total_latency": total_latency,
                                                        "device_latency": device_latency},
                                      "error": ""}
            runtimes[r.runtime.pid] = RuntimeExecTruth(pid=r.runtime.pid, errors=error_summary, outcomes=outcomes,
                                                       device_latency_s=device_latency,
                                                       total_latency_s=total_latency)
        self._runtime["execution_stats"] = content
        errors[:, ~present] = 0
        self._truth["execution_stats"] = ExecTruth(
            fresh=True, period_s=period, errors={kind: errors[k] for k, kind in enumerate(ERROR_KINDS)},
            timeouts=errors[-1],
            device_latency_p50_s=np.array([float(np.median(v)) if v else np.nan for v in p50_by_device]),
            runtimes=runtimes)

    def _capture_memory(self, alive: list[_Alive], period: float, present: Bools) -> None:
        per = self._per
        rng = self._group_rng["memory_used"]
        core_budget = self.workload.hbm_used_fraction * HBM_BYTES_PER_DEVICE / per
        tensors_noise = rng.uniform(0.98, 1.0, self.node.devices * per)
        hbm = np.zeros(self.node.devices, np.int64)
        content: dict[int, dict[str, Any]] = {}
        runtime_bytes: dict[int, int] = {}
        for r in alive:
            by_core: dict[str, Any] = {}
            models: dict[str, Any] = {}
            for i, c in enumerate(r.cores):
                usage = {name: int(core_budget * share * (tensors_noise[c] if name == "tensors" else 1.0))
                         for name, share in _CORE_MEMORY_SPLIT.items()}
                by_core[str(c)] = usage
                hbm[c // per] += sum(usage.values())
                models[f"sg_{i:02d}"] = {
                    "memory_used_bytes": {
                        "host": 20480,
                        "neuron_device": usage["constants"] + usage["model_code"] + usage["tensors"],
                        "usage_breakdown": {
                            "host": {"application_memory": 20480, "constants": 0, "dma_buffers": 0, "tensors": 0},
                            "neuron_device": {"constants": usage["constants"], "model_code": usage["model_code"],
                                              "runtime_memory": 0, "tensors": usage["tensors"]}}},
                    "neuroncore_index": c, "neuron_device_index": c // per}
            device_bytes = sum(sum(u.values()) for u in by_core.values())
            host = self.workload.host_bytes_per_runtime
            runtime_bytes[r.runtime.pid] = device_bytes
            group: dict[str, Any] = {
                "period": period,
                "neuron_runtime_used_bytes": {
                    "host": host, "neuron_device": device_bytes,
                    "usage_breakdown": {
                        "host": {"application_memory": host - 2**20, "constants": 0, "dma_buffers": 2**20,
                                 "tensors": 0},
                        "neuroncore_memory_usage": by_core}}}
            if self.choices.loaded_models == "memory_used":
                group["loaded_models"] = [{"name": "neff", "uuid": f"{r.runtime.pid:032x}",
                                           "model_id": 10000 + r.runtime.pid % 10000, "is_running": True,
                                           "subgraphs": models}]
            group["error"] = ""
            content[r.runtime.pid] = group
        self._runtime["memory_used"] = content
        self._truth["memory_used"] = MemoryTruth(fresh=True, period_s=period, hbm_used_bytes=hbm,
                                                 runtime_device_bytes=runtime_bytes)

    def _capture_ecc(self, a: float, b: float, period: float, present: Bools) -> None:
        rng = self._group_rng["neuron_hw_counters"]
        expected = np.zeros((len(ECC_FIELDS), self.node.devices))
        for k, name in enumerate(ECC_FIELDS):
            expected[k] += self.workload.ecc_rate_s.get(name, 0.0) * period
        for f in self.faults:
            if isinstance(f, EccErrors):
                expected[ECC_FIELDS.index(f.kind), f.device] += self._rate_integral(f, a, b)
        events = rng.poisson(expected).astype(np.int64)
        events[:, ~present] = 0
        for i, f in enumerate(self.faults):
            if isinstance(f, EccCounterReset) and i not in self._resets_done and f.start_s <= b:
                self._ecc_totals[:, f.device] = 0
                self._resets_done.add(i)
        self._ecc_totals += events
        shown = events if self.choices.ecc_reporting == "per_period" else self._ecc_totals
        self._system["neuron_hw_counters"] = {
            "period": period,
            "neuron_devices": [{"neuron_device_index": d, "mem_ecc_corrected": int(shown[0, d]),
                                "mem_ecc_uncorrected": int(shown[1, d]), "sram_ecc_uncorrected": int(shown[3, d]),
                                "sram_ecc_corrected": int(shown[2, d])}
                               for d in range(self.node.devices) if present[d]],
            "error": ""}
        self._truth["neuron_hw_counters"] = EccTruth(
            fresh=True, period_s=period, events={name: events[k].copy() for k, name in enumerate(ECC_FIELDS)},
            totals={name: self._ecc_totals[k].copy() for k, name in enumerate(ECC_FIELDS)})

    def _vcpu_usage(self, period: float) -> dict[str, Any]:
        rng = self._group_rng["vcpu_usage"]
        busy = rng.uniform(0.2, 0.6, (self.node.vcpus, 3))
        per_cpu = []
        for user, system, soft in busy:
            u, s, q = round(user * 80, 2), round(system * 20, 2), round(soft * 2, 2)
            per_cpu.append({"user": u, "nice": 0.0, "system": s, "idle": round(max(100 - u - s - q, 0.0), 2),
                            "io_wait": 0.0, "irq": 0.0, "soft_irq": q})
        average = {name: round(sum(c[name] for c in per_cpu) / len(per_cpu), 2) for name in _VCPU_FIELDS}
        return {"period": period, "average_usage": average,
                "usage_data": {str(i): c for i, c in enumerate(per_cpu)},
                "context_switch_count": int(rng.poisson(50000 * period)), "error": ""}

    # -- composing a report --

    def _listed_runtimes(self, fresh: Sequence[str]) -> set[int]:
        groups = [g for g in self._runtime if self.choices.stale_groups == "repeat" or g in fresh]
        return {pid for g in groups for pid in self._runtime[g]}

    def _truth_part(self, group: str, fresh: Sequence[str]) -> Any:
        part = self._truth.get(group)
        if part is None or (group not in fresh and self.choices.stale_groups == "omit"):
            return None
        return part if group in fresh else replace(part, fresh=False)

    def _compose(self, t_s: float, fresh: Sequence[str], present: Bools) -> dict[str, Any]:
        repeat = self.choices.stale_groups == "repeat"
        tags = {r.pid: r.tag for r in self.runtimes}
        entries = []
        for pid in sorted(self._listed_runtimes(fresh)):
            report = {g: self._runtime[g][pid] for g in RUNTIME_GROUPS
                      if g in self._runtime and pid in self._runtime[g] and (repeat or g in fresh)}
            entries.append({"pid": pid, "address": "", "neuron_runtime_tag": tags[pid], "error": "",
                            "report": report})
        system = {g: self._system[g] for g in SYSTEM_GROUPS if g in self._system and (repeat or g in fresh)}
        return {"neuron_runtime_data": entries, "system_data": system, "instance_info": self._instance_info(),
                "neuron_hardware_info": self._hardware_info(present)}

    def _instance_info(self) -> dict[str, Any]:
        n = self.node
        return {"instance_name": n.instance_name, "instance_id": n.instance_id, "instance_type": n.instance_type,
                "instance_availability_zone": n.availability_zone,
                "instance_availability_zone_id": n.availability_zone_id, "instance_region": n.region,
                "ami_id": n.ami_id, "subnet_id": n.subnet_id, "error": ""}

    def _hardware_info(self, present: Bools) -> dict[str, Any]:
        lnc = self.node.lnc
        info: dict[str, Any] = {"neuron_device_type": "trainium2", "neuron_device_version": "v4",
                                "neuroncore_version": "v3d" if lnc == 2 else "v3",
                                "neuron_device_count": int(present.sum()),
                                "neuron_device_memory_size": HBM_BYTES_PER_DEVICE}
        if self.node.hardware_info_shape == "current":
            info |= {"neuroncore_per_device_count": self._per, "logical_neuroncore_config": lnc}
        else:
            info |= {"neuroncore_per_device_count": PHYSICAL_CORES_PER_DEVICE, "logical_neuroncore_size": lnc}
        info["error"] = ""
        return info

    # -- variants --

    def _apply_variants(self, base: dict[str, Any],
                        variants: Sequence[Variant]) -> tuple[dict[str, Any], tuple[bytes, ...]]:
        report: dict[str, Any] = copy.deepcopy(base)
        preceding: list[bytes] = []
        for v in variants:
            line = _garbage_line(v)
            if line is not None:
                preceding.append(line)
            else:
                self._apply(report, v)
        return report, tuple(preceding)

    def _apply(self, report: dict[str, Any], v: Variant) -> None:  # noqa: PLR0912 - one branch per variant kind
        entries = report["neuron_runtime_data"] if isinstance(report["neuron_runtime_data"], list) else []
        chosen = [e for e in entries if v.pid is None or e["pid"] == v.pid]
        if v.kind in ("group_missing", "group_null", "group_error_zeroed", "group_error_absent"):
            for holder in _group_holders(report, chosen, v.group):
                _change_group(holder, v)
        elif v.kind in ("runtime_error", "runtime_error_no_report"):
            for e in chosen[:1]:
                e["error"] = v.error
                if v.kind == "runtime_error_no_report":
                    e["report"] = {}
        elif v.kind == "latency_null":
            for e in chosen:
                stats = e["report"].get("execution_stats")
                if isinstance(stats, dict) and "latency_stats" in stats:
                    stats["latency_stats"] = {"total_latency": None, "device_latency": None}
        elif v.kind == "hardware_info_null":
            report["neuron_hardware_info"] = None
        elif v.kind == "hardware_info_error":
            report["neuron_hardware_info"] = {"error": v.error}
        elif v.kind == "runtime_data_empty":
            report["neuron_runtime_data"] = []
        elif v.kind == "runtime_data_null":
            report["neuron_runtime_data"] = None
        elif v.kind == "runtime_data_object":
            report["neuron_runtime_data"] = {str(e["pid"]): e for e in entries}
        elif v.kind == "runtime_data_non_object":
            report["neuron_runtime_data"] = [*entries, "garbage" if v.value is None else v.value, 42]
        elif v.kind == "no_flops":
            for core in self._cores_in(entries, v.device):
                core.pop("flops", None)
        elif v.kind in ("missing_device_index", "null_ecc"):
            for dev in self._hw_entries(report, v.device):
                if v.kind == "missing_device_index":
                    del dev["neuron_device_index"]
                else:
                    dev[v.field or "mem_ecc_corrected"] = None
        elif v.kind == "value":
            self._set_value(report, entries, v)

    def _cores_in(self, entries: Sequence[dict[str, Any]], device: int | None) -> list[dict[str, Any]]:
        cores = []
        for e in entries:
            group = e.get("report", {}).get("neuroncore_counters")
            if isinstance(group, dict):
                cores += [core for index, core in group.get("neuroncores_in_use", {}).items()
                          if device is None or int(index) // self._per == device]
        return cores

    @staticmethod
    def _hw_entries(report: dict[str, Any], device: int | None) -> list[dict[str, Any]]:
        group = report["system_data"].get("neuron_hw_counters")
        if not isinstance(group, dict):
            return []
        return [d for d in group.get("neuron_devices", []) if device is None or d.get("neuron_device_index") == device]

    def _set_value(self, report: dict[str, Any], entries: Sequence[dict[str, Any]], v: Variant) -> None:
        if v.field in ("flops", "neuroncore_utilization"):
            for core in self._cores_in(entries, v.device):
                core[v.field] = v.value
        elif v.field in ECC_FIELDS:
            for dev in self._hw_entries(report, v.device):
                dev[v.field] = v.value
        elif v.field == "neuron_device":
            first = cores_of_device(v.device or 0, lnc=self.node.lnc)[0]
            for e in entries:
                group = e["report"].get("memory_used")
                if isinstance(group, dict) and str(first) in group["neuron_runtime_used_bytes"]["usage_breakdown"][
                        "neuroncore_memory_usage"]:
                    group["neuron_runtime_used_bytes"]["neuron_device"] = v.value
        elif v.field == "period":
            for holder in _group_holders(report, entries, v.group):
                if isinstance(holder.get(v.group or ""), dict):
                    holder[v.group or ""]["period"] = v.value
        elif v.field == "neuron_device_count" and isinstance(report["neuron_hardware_info"], dict):
            report["neuron_hardware_info"]["neuron_device_count"] = v.value
        else:
            raise ValueError(f"variant 'value' cannot set field {v.field!r}")


def _percentiles(samples: F64) -> dict[str, float]:
    """The documented percentiles of ``samples`` (linear between order statistics), rounded as the guide shows
    them (NM:467-484)."""
    ordered = np.sort(samples)
    at = np.interp(np.array(_PERCENTILE_Q) / 100 * (ordered.size - 1), np.arange(ordered.size), ordered)
    return {name: round(float(v), 8) for name, v in zip(PERCENTILES, at, strict=True)}


def _group_holders(report: dict[str, Any], entries: Sequence[dict[str, Any]], group: str | None) -> list[Any]:
    """The objects that hold ``group``: the system data, or each chosen runtime's report."""
    if group in SYSTEM_GROUPS:
        return [report["system_data"]]
    if group in RUNTIME_GROUPS:
        return [e["report"] for e in entries]
    raise ValueError(f"variant needs a metric group, not {group!r}")


def _change_group(holder: dict[str, Any], v: Variant) -> None:
    group = v.group or ""
    if group not in holder:
        return
    if v.kind == "group_missing":
        del holder[group]
    elif v.kind == "group_null":
        holder[group] = None
    elif v.kind == "group_error_zeroed":
        period = (holder[group] or {}).get("period")
        holder[group] = _zeroed(holder[group]) | {"period": period, "error": v.error}
    elif v.kind == "group_error_absent":
        holder[group] = {"period": (holder[group] or {}).get("period"), "error": v.error}


def _zeroed(value: Any) -> Any:
    """The same structure with every number 0 (the period kept apart by the caller)."""
    if isinstance(value, dict):
        return {k: _zeroed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_zeroed(v) for v in value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return 0


def _garbage_line(v: Variant) -> bytes | None:
    """The line a line-level variant writes before the report, or None for a variant inside the report."""
    if v.kind == "oversize_line":
        size = int(v.value) if v.value is not None else 16 * 2**20 + 1
        return b'{"pad":"' + b"x" * max(size - 10, 0) + b'"}\n'
    if v.kind == "not_json":
        return b"neuron-monitor: this line is not JSON {\n"
    if v.kind == "json_not_object":
        return json.dumps([1, 2, 3] if v.value is None else v.value).encode() + b"\n"
    return None
