"""neuron-monitor reports built by hand for the bridge's tests, each shape as
AWS's neuron-monitor user guide draws it (aws-neuron/aws-neuron-sdk,
tools/neuron-sys-tools/neuron-monitor-user-guide.rst: "The JSON output
format", "neuroncore_counters", "execution_stats", "memory_used",
"neuron_hw_counters", "neuron_hardware_info"), and an EFA sysfs tree laid
out as the Linux EFA driver publishes it (drivers/infiniband/hw/efa/efa_verbs.c)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# The guide's neuron_hardware_info today (since aws-neuron-sdk d251c2e7) and at the 2.21 release (2086a70a).
HARDWARE: dict[str, Any] = {
    "neuron_device_type": "trainium2", "neuron_device_version": "v4", "neuroncore_version": "v3d",
    "neuron_device_count": 16, "neuron_device_memory_size": 103079215104, "neuroncore_per_device_count": 4,
    "logical_neuroncore_config": 2, "error": "",
}
HARDWARE_2_21: dict[str, Any] = {
    "neuron_device_type": "trainium2", "neuron_device_version": "v4", "neuroncore_version": "v3d",
    "neuron_device_count": 16, "neuron_device_memory_size": 103079215104, "neuroncore_per_device_count": 8,
    "logical_neuroncore_size": 2, "error": "",
}
INSTANCE: dict[str, Any] = {
    "instance_name": "My_Instance", "instance_id": "i-0011223344556677a", "instance_type": "trn2.48xlarge",
    "instance_availability_zone": "us-west-2b", "instance_availability_zone_id": "usw2-az2",
    "instance_region": "us-west-2", "ami_id": "ami-0011223344556677b", "subnet_id": "subnet-112233ee", "error": "",
}


def core(util: float = 50.0, flops: float | None = 1e14, *, lnc: int = 2, index: int | None = None) -> dict[str, Any]:
    """Return one logical core's neuroncores_in_use entry (``index``: with its v3d physical cores, LNC=2)."""
    entry: dict[str, Any] = {"neuroncore_utilization": util}
    if flops is not None:
        entry["flops"] = flops
    if index is not None and lnc == 2:
        entry["v3d"] = {f"nc_v3.{2 * index + k}": {"neuroncore_utilization": util} for k in range(2)}
    return entry


def device_cores(device: int, *, util: float = 50.0, flops: float | None = 1e14, per_device: int = 4,
                 v3d: bool = True) -> dict[str, dict[str, Any]]:
    """Return every logical core of ``device`` (``per_device`` of them) at the same utilisation and FLOP/s."""
    first = device * per_device
    return {str(c): core(util, flops, lnc=8 // per_device, index=c if v3d else None)
            for c in range(first, first + per_device)}


def execution(*, generic: int = 0, runtime: int = 0, hardware: int = 0, numerical: int = 0, timed_out: int = 0,
              p50_s: float | None = 0.01, period: float = 1.0) -> dict[str, Any]:
    """Return an execution_stats group (``p50_s`` None: nothing ran, the latencies null)."""
    latency = None if p50_s is None else dict.fromkeys(("p0", "p1", "p25", "p50", "p75", "p99", "p100"), p50_s)
    return {
        "period": period,
        "error_summary": {"generic": generic, "numerical": numerical, "transient": 0, "model": 0,
                          "runtime": runtime, "hardware": hardware},
        "execution_summary": {"completed": 100, "completed_with_err": 0, "completed_with_num_err": 0,
                              "timed_out": timed_out, "incorrect_input": 0, "failed_to_queue": 0},
        "latency_stats": {"total_latency": latency, "device_latency": latency},
        "error": "",
    }


def memory(cores: Iterable[int], *, tensors: int = 2**30, period: float = 1.0) -> dict[str, Any]:
    """Return a memory_used group with ``tensors`` bytes (and a little code) on each of ``cores``."""
    return {
        "period": period,
        "neuron_runtime_used_bytes": {
            "host": 6997643264, "neuron_device": 0,
            "usage_breakdown": {
                "host": {"application_memory": 6996594688, "constants": 0, "dma_buffers": 1048576, "tensors": 0},
                "neuroncore_memory_usage": {
                    str(c): {"constants": 0, "model_code": 1024, "model_shared_scratchpad": 0, "runtime_memory": 0,
                             "tensors": tensors} for c in cores},
            },
        },
        "loaded_models": [],
        "error": "",
    }


def runtime(cores: Mapping[str, Any] | None, *, pid: int = 1000, tag: str = "app", period: float = 1.0,
            error: str = "", group_error: str = "", with_memory: bool = True,
            execution_stats: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return one neuron_runtime_data entry whose NeuronCore counters list ``cores`` (None: the group left out)."""
    report: dict[str, Any] = {}
    if cores is not None:
        report["neuroncore_counters"] = {"period": period, "neuroncores_in_use": dict(cores), "error": group_error}
        if with_memory:
            report["memory_used"] = memory(int(c) for c in cores)
    if execution_stats is not None:
        report["execution_stats"] = execution_stats
    report["neuron_runtime_vcpu_usage"] = {"period": period, "vcpu_usage": {"user": 42.0, "system": 12.0},
                                           "error": ""}
    return {"pid": pid, "address": "", "neuron_runtime_tag": tag, "error": error, "report": report}


def hw_counters(ecc: Mapping[int, Mapping[str, int]] | None = None, *, devices: Iterable[int] = range(16),
                period: float = 1.0, error: str = "") -> dict[str, Any]:
    """Return a neuron_hw_counters group listing ``devices``, each with zero ECC unless ``ecc`` gives counts."""
    listed = []
    for d in devices:
        values = {"mem_ecc_corrected": 0, "mem_ecc_uncorrected": 0, "sram_ecc_uncorrected": 0,
                  "sram_ecc_corrected": 0}
        values.update((ecc or {}).get(d, {}))
        listed.append({"neuron_device_index": d, **values})
    return {"period": period, "neuron_devices": listed, "error": error}


def report(runtimes: list[Any] | None, *, hw: dict[str, Any] | None = None, hardware: Any = HARDWARE,
           instance: Any = INSTANCE, system_period: float = 1.0) -> dict[str, Any]:
    """Return a whole report: ``runtimes`` (None: the key null), the system groups, instance and hardware info."""
    return {
        "neuron_runtime_data": runtimes,
        "system_data": {
            "neuron_hw_counters": hw if hw is not None else hw_counters(period=system_period),
            "vcpu_usage": {"period": system_period, "average_usage": {"user": 32.77, "nice": 0, "system": 22.87,
                                                                     "idle": 39.36, "io_wait": 0, "irq": 0,
                                                                     "soft_irq": 0},
                           "usage_data": {}, "context_switch_count": 123456, "error": ""},
            "memory_info": {"period": system_period, "memory_total_bytes": 49345835008,
                            "memory_used_bytes": 16042344448, "swap_total_bytes": 0, "swap_used_bytes": 0,
                            "error": ""},
        },
        "instance_info": copy.deepcopy(instance),
        "neuron_hardware_info": copy.deepcopy(hardware),
    }


def busy(devices: Iterable[int] = range(16), *, util: float = 50.0, flops: float | None = 1e14,
         period: float = 1.0, **kw: Any) -> dict[str, Any]:
    """Return a report of one runtime per device of ``devices``, each on its 4 logical cores (LNC=2)."""
    return report([runtime(device_cores(d, util=util, flops=flops), pid=1000 + d, tag=f"rank{d}", period=period,
                           execution_stats=execution(period=period)) for d in devices], system_period=period, **kw)


EFA_NAMES = tuple(f"rdmap{16 * (k + 1)}s0" for k in range(16))


def efa_tree(root: Path, counters: Mapping[str, Mapping[str, int]], *, state: str = "4: ACTIVE") -> Path:
    """Write an EFA sysfs tree under ``root`` (``class/infiniband/<device>/…``): per device, its counters by name
    (``keep_alive_rcvd`` goes to the device's own hw_counters); return ``root``."""
    for name, values in counters.items():
        device = root / "class" / "infiniband" / name
        port = device / "ports" / "1"
        (port / "hw_counters").mkdir(parents=True, exist_ok=True)
        (device / "hw_counters").mkdir(parents=True, exist_ok=True)
        (port / "state").write_text(f"{state}\n")
        for counter, value in values.items():
            where = device / "hw_counters" if counter == "keep_alive_rcvd" else port / "hw_counters"
            (where / counter).write_text(f"{value}\n")
    return root


def efa_counters(tx_bytes: int = 0, **others: int) -> dict[str, int]:
    """Return one device's driver counters: every one the bridge reads, zero unless given."""
    values = dict.fromkeys(("rx_bytes", "retrans_bytes", "retrans_pkts", "retrans_timeout_events",
                            "unresponsive_remote_events", "impaired_remote_conn_events", "rx_drops",
                            "rdma_read_wr_err", "rdma_write_wr_err", "keep_alive_rcvd"), 0)
    values["tx_bytes"] = tx_bytes
    values.update(others)
    return values
