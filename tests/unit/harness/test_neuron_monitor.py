"""Specification of the documentation-built generators in the harness: a
neuron-monitor report has every documented group and field, its figures agree
with the ground truth beside it (FLOP = flops x period), cores are indexed as
neuron-ls and the LNC page say, each fault and shape variant does what it
names, everything is deterministic from the seed, and the EFA sysfs tree
carries the driver's counter names, cumulative, written atomically."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.efa_sysfs import (
    DEVICE_COUNTERS,
    PORT_COUNTERS,
    EfaDegraded,
    EfaNode,
    EfaSysfsTree,
    EfaVanish,
    default_device_names,
)
from harness.neuron_monitor import (
    ECC_FIELDS,
    FP8_DENSE_FLOPS_PER_DEVICE,
    HBM_BYTES_PER_DEVICE,
    Choices,
    DeviceVanish,
    EccCounterReset,
    EccErrors,
    ExecErrors,
    LowFlop,
    NeuronMonitor,
    NodeSpec,
    Runtime,
    Sample,
    Schedule,
    Stall,
    UtilCollapse,
    Variant,
    Workload,
    runtime_per_core,
    runtime_per_device,
    runtime_per_node,
)

SMALL = NodeSpec(vcpus=4)  # the vCPU table is irrelevant here and the largest part of a report


def monitor(**overrides: Any) -> NeuronMonitor:
    """A node with one runtime per device (fast), overridable."""
    kwargs: dict[str, Any] = {"node": SMALL, "runtimes": runtime_per_device(), "seed": 11} | overrides
    return NeuronMonitor(**kwargs)


def cores_in(sample: Sample) -> dict[int, dict[str, Any]]:
    """Every reported logical core across the runtimes, by global index."""
    return {int(k): v for e in sample.report["neuron_runtime_data"]
            for k, v in e["report"]["neuroncore_counters"]["neuroncores_in_use"].items()}


def per_device(sample: Sample, key: str, per: int = 4) -> np.ndarray:
    """A core field summed per device (16 devices)."""
    out = np.zeros(16)
    for c, core in cores_in(sample).items():
        out[c // per] += core[key]
    return out


def runtime(sample: Sample, pid: int) -> dict[str, Any]:
    """The runtime entry with ``pid``."""
    return next(e for e in sample.report["neuron_runtime_data"] if e["pid"] == pid)


class TestReportShape:
    def test_every_documented_group_and_field(self) -> None:
        """A default report has the guide's top-level objects, runtime entry fields and every group's fields."""
        sample = monitor().next()
        r = sample.report
        entry = r["neuron_runtime_data"][0]
        groups = entry["report"]
        system = r["system_data"]
        assert {
            "top": set(r), "entry": set(entry), "runtime groups": set(groups), "system groups": set(system),
            "neuroncore_counters": set(groups["neuroncore_counters"]),
            "execution_stats": set(groups["execution_stats"]),
            "error_summary": set(groups["execution_stats"]["error_summary"]),
            "execution_summary": set(groups["execution_stats"]["execution_summary"]),
            "latency": {k: set(v) for k, v in groups["execution_stats"]["latency_stats"].items()},
            "memory_used": set(groups["memory_used"]),
            "runtime_used": set(groups["memory_used"]["neuron_runtime_used_bytes"]),
            "breakdown": set(groups["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"]),
            "core_memory": set(groups["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"][
                "neuroncore_memory_usage"]["0"]),
            "vcpu": set(groups["neuron_runtime_vcpu_usage"]),
            "hw": set(system["neuron_hw_counters"]),
            "hw device": set(system["neuron_hw_counters"]["neuron_devices"][0]),
            "vcpu_usage": set(system["vcpu_usage"]), "memory_info": set(system["memory_info"]),
            "instance_info": set(r["instance_info"]), "hardware_info": set(r["neuron_hardware_info"]),
        } == {
            "top": {"neuron_runtime_data", "system_data", "instance_info", "neuron_hardware_info"},
            "entry": {"pid", "address", "neuron_runtime_tag", "error", "report"},
            "runtime groups": {"neuroncore_counters", "execution_stats", "memory_used", "neuron_runtime_vcpu_usage"},
            "system groups": {"neuron_hw_counters", "vcpu_usage", "memory_info"},
            "neuroncore_counters": {"period", "neuroncores_in_use", "error"},
            "execution_stats": {"period", "error_summary", "execution_summary", "latency_stats", "error"},
            "error_summary": {"generic", "numerical", "transient", "model", "runtime", "hardware"},
            "execution_summary": {"completed", "completed_with_err", "completed_with_num_err", "timed_out",
                                  "incorrect_input", "failed_to_queue"},
            "latency": {k: {"p0", "p1", "p25", "p50", "p75", "p99", "p100"}
                        for k in ("total_latency", "device_latency")},
            "memory_used": {"period", "neuron_runtime_used_bytes", "loaded_models", "error"},
            "runtime_used": {"host", "neuron_device", "usage_breakdown"},
            "breakdown": {"host", "neuroncore_memory_usage"},
            "core_memory": {"constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors"},
            "vcpu": {"period", "vcpu_usage", "error"},
            "hw": {"period", "neuron_devices", "error"},
            "hw device": {"neuron_device_index", "mem_ecc_corrected", "mem_ecc_uncorrected",
                          "sram_ecc_corrected", "sram_ecc_uncorrected"},
            "vcpu_usage": {"period", "average_usage", "usage_data", "context_switch_count", "error"},
            "memory_info": {"period", "memory_total_bytes", "memory_used_bytes", "swap_total_bytes",
                            "swap_used_bytes", "error"},
            "instance_info": {"instance_name", "instance_id", "instance_type", "instance_availability_zone",
                              "instance_availability_zone_id", "instance_region", "ami_id", "subnet_id", "error"},
            "hardware_info": {"neuron_device_type", "neuron_device_version", "neuroncore_version",
                              "neuron_device_count", "neuron_device_memory_size", "neuroncore_per_device_count",
                              "logical_neuroncore_config", "error"},
        }

    def test_current_hardware_info_at_lnc2(self) -> None:
        """Today's hardware info at LNC=2 is the guide's example: 16 devices of 96 GiB, 4 cores each, config 2."""
        assert monitor().next().report["neuron_hardware_info"] == {
            "neuron_device_type": "trainium2", "neuron_device_version": "v4", "neuroncore_version": "v3d",
            "neuron_device_count": 16, "neuron_device_memory_size": 103079215104,
            "neuroncore_per_device_count": 4, "logical_neuroncore_config": 2, "error": ""}

    def test_hardware_info_of_neuron_2_21(self) -> None:
        """The 2.21-era shape counts 8 physical cores a device and names the LNC logical_neuroncore_size."""
        info = monitor(node=NodeSpec(vcpus=4, hardware_info_shape="2.21")).next().report["neuron_hardware_info"]
        assert (info["neuroncore_per_device_count"], info["logical_neuroncore_size"],
                "logical_neuroncore_config" in info) == (8, 2, False)

    def test_hardware_info_at_lnc1(self) -> None:
        """At LNC=1 a device exposes 8 logical cores of version v3."""
        sample = monitor(node=NodeSpec(vcpus=4, lnc=1), runtimes=runtime_per_device(lnc=1)).next()
        info = sample.report["neuron_hardware_info"]
        assert (info["neuroncore_per_device_count"], info["logical_neuroncore_config"],
                info["neuroncore_version"]) == (8, 1, "v3")

    def test_the_instance_id_is_the_nodes(self) -> None:
        """instance_info carries the configured instance id and type with an empty error."""
        info = monitor(node=NodeSpec(vcpus=4, instance_id="i-0aaaabbbbccccdddd")).next().report["instance_info"]
        assert (info["instance_id"], info["instance_type"], info["error"]) == ("i-0aaaabbbbccccdddd",
                                                                              "trn2.48xlarge", "")

    def test_a_report_is_one_json_line(self) -> None:
        """The line is one newline-terminated JSON object equal to the report."""
        sample = monitor().next()
        assert (sample.line.count(b"\n"), sample.line.endswith(b"\n"), json.loads(sample.line) == sample.report,
                sample.wire() == sample.line) == (1, True, True, True)

    def test_disabled_groups_are_absent(self) -> None:
        """Only the configured groups appear."""
        sample = monitor(schedule=Schedule(runtime_groups=("neuroncore_counters",), system_groups=())).next()
        assert ({g for e in sample.report["neuron_runtime_data"] for g in e["report"]},
                sample.report["system_data"]) == ({"neuroncore_counters"}, {})

    def test_logical_utilisation_is_the_mean_of_its_physical_cores(self) -> None:
        """Each logical core's utilisation is the mean of its v3d physical cores, as in the guide's example."""
        for core in cores_in(monitor().next()).values():
            physical = [p["neuroncore_utilization"] for p in core["v3d"].values()]
            assert core["neuroncore_utilization"] == pytest.approx(sum(physical) / 2, abs=0.011)

    def test_numeric_error_key_is_a_choice(self) -> None:
        """The error kind the guide spells two ways is emitted under the chosen key."""
        sample = monitor(choices=Choices(numeric_error_key="numeric")).next()
        keys = set(sample.report["neuron_runtime_data"][0]["report"]["execution_stats"]["error_summary"])
        assert ("numeric" in keys, "numerical" in keys) == (True, False)

    def test_loaded_models_can_be_left_out(self) -> None:
        """With loaded_models absent, memory_used has only the runtime's bytes."""
        sample = monitor(choices=Choices(loaded_models="absent")).next()
        assert set(sample.report["neuron_runtime_data"][0]["report"]["memory_used"]) == {
            "period", "neuron_runtime_used_bytes", "error"}


class TestCoreIndexing:
    def test_lnc2_indexes_64_cores_device_major(self) -> None:
        """At LNC=2 the node reports cores 0-63 and device 15 owns 60-63 (neuron-ls)."""
        sample = monitor(runtimes=runtime_per_core(lnc=2)).next()
        pids = {e["pid"]: sorted(int(k) for k in e["report"]["neuroncore_counters"]["neuroncores_in_use"])
                for e in sample.report["neuron_runtime_data"]}
        assert (sorted(cores_in(sample)), pids[20000 + 60]) == (list(range(64)), [60])

    def test_lnc1_indexes_128_cores(self) -> None:
        """At LNC=1 the node reports cores 0-127, 8 a device."""
        sample = monitor(node=NodeSpec(vcpus=4, lnc=1), runtimes=runtime_per_device(lnc=1)).next()
        device_15 = runtime(sample, 20015)["report"]["neuroncore_counters"]["neuroncores_in_use"]
        assert (sorted(cores_in(sample)), sorted(int(k) for k in device_15)) == (
            list(range(128)), list(range(120, 128)))

    def test_one_runtime_for_the_node_lists_every_core(self) -> None:
        """A single runtime owning the node reports all 64 cores."""
        sample = monitor(runtimes=runtime_per_node()).next()
        assert (len(sample.report["neuron_runtime_data"]), sorted(cores_in(sample))) == (1, list(range(64)))

    @pytest.mark.parametrize(("numbering", "expected"), [("global", ["nc_v3.10", "nc_v3.11"]),
                                                         ("per_device", ["nc_v3.2", "nc_v3.3"])])
    def test_physical_core_numbering_is_a_choice(self, numbering: str, expected: list[str]) -> None:
        """Logical core 5 (device 1, second core) names its physical cores from the node or from the device."""
        sample = monitor(choices=Choices(physical_core_numbering=numbering)).next()
        assert sorted(cores_in(sample)[5]["v3d"]) == expected

    @pytest.mark.parametrize(("v3d", "expected"), [(True, {"nc_v3.9"}), (False, None)])
    def test_v3d_at_lnc1_is_a_choice(self, v3d: bool, expected: set[str] | None) -> None:
        """At LNC=1 a core lists its one physical core under v3d, or has no v3d."""
        sample = monitor(node=NodeSpec(vcpus=4, lnc=1), runtimes=runtime_per_device(lnc=1),
                         choices=Choices(v3d_at_lnc1=v3d)).next()
        core = cores_in(sample)[9]
        assert (set(core["v3d"]) if "v3d" in core else None) == expected

    def test_overlapping_runtimes_are_refused(self) -> None:
        """Two runtimes cannot own one core."""
        with pytest.raises(ValueError, match="owned by runtimes"):
            NeuronMonitor(runtimes=[Runtime(pid=1, tag="a", cores=(0, 1)), Runtime(pid=2, tag="b", cores=(1,))])


class TestTruth:
    def test_flops_over_the_period_is_the_truths_flop(self) -> None:
        """Summed per device, flops x the group's period equals the truth's FLOP exactly."""
        for sample in monitor().take(3):
            period = sample.report["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["period"]
            np.testing.assert_array_equal(per_device(sample, "flops") * period, sample.truth.cores.flop)

    def test_flop_never_exceeds_the_chips_peak(self) -> None:
        """No device's FLOP rate exceeds the documented 1,299 TFLOPS FP8 peak."""
        truth = monitor().next().truth.cores
        assert float(truth.flop_rate_s.max()) <= FP8_DENSE_FLOPS_PER_DEVICE

    def test_utilisation_truth_is_the_devices_mean(self) -> None:
        """The truth's device utilisation is the mean of the device's reported cores."""
        sample = monitor().next()
        np.testing.assert_allclose(per_device(sample, "neuroncore_utilization") / 4, sample.truth.cores.util_pct)

    def test_hbm_truth_is_the_memory_breakdown(self) -> None:
        """HBM used per device is the sum of its cores' breakdowns, and below 96 GiB."""
        sample = monitor().next()
        hbm = np.zeros(16)
        for e in sample.report["neuron_runtime_data"]:
            for core, usage in e["report"]["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"][
                    "neuroncore_memory_usage"].items():
                hbm[int(core) // 4] += sum(usage.values())
        assert (hbm.tolist(), bool((hbm < HBM_BYTES_PER_DEVICE).all())) == (
            sample.truth.memory.hbm_used_bytes.tolist(), True)

    def test_execution_truth_is_the_reported_summary(self) -> None:
        """Each runtime's error and execution summaries are the truth's, and device errors sum to them."""
        sample = monitor(faults=[ExecErrors(device=2, start_s=0.0, rate_s=5.0)]).next()
        ex = sample.truth.execution
        reported = {e["pid"]: (e["report"]["execution_stats"]["error_summary"],
                               e["report"]["execution_stats"]["execution_summary"])
                    for e in sample.report["neuron_runtime_data"]}
        assert reported == {pid: (dict(t.errors), dict(t.outcomes)) for pid, t in ex.runtimes.items()}
        assert int(ex.errors["hardware"].sum()) == sum(s["hardware"] for s, _ in reported.values()) > 0

    def test_default_period_is_five_seconds(self) -> None:
        """Every group reports its actual period: 5 s plus at most the wake jitter."""
        sample = monitor().next()
        periods = [g["period"] for e in sample.report["neuron_runtime_data"] for g in e["report"].values()]
        periods += [g["period"] for g in sample.report["system_data"].values()]
        assert (all(5.0 <= p <= 5.02 for p in periods), sample.captured_at_s == periods[0]) == (True, True)

    def test_per_group_periods_repeat_the_stale_group(self) -> None:
        """With hw counters every 2 s and the rest every 1 s, the hw group first appears at 2 s and the report
        between two of its captures repeats it unchanged, its truth marked not fresh."""
        samples = monitor(schedule=Schedule(period_s=1.0, group_period_s={"neuron_hw_counters": 2.0}, jitter_s=0.0),
                          workload=Workload(ecc_rate_s={"mem_ecc_corrected": 5.0})).take(4)
        hw = [s.report["system_data"].get("neuron_hw_counters") for s in samples]
        assert ([s.captured_at_s for s in samples], [("neuron_hw_counters" in s.truth.fresh) for s in samples],
                hw[0], hw[2] == hw[1], hw[3] == hw[1], hw[1]["period"] if hw[1] else None,
                [s.truth.ecc.fresh if s.truth.ecc else None for s in samples]) == (
            [1.0, 2.0, 3.0, 4.0], [False, True, False, True], None, True, False, 2.0, [None, True, False, True])

    def test_stale_groups_can_be_omitted(self) -> None:
        """With stale groups omitted, a report carries only the groups captured for it."""
        samples = monitor(schedule=Schedule(period_s=1.0, group_period_s={"neuron_hw_counters": 2.0}, jitter_s=0.0),
                          choices=Choices(stale_groups="omit")).take(2)
        assert [("neuron_hw_counters" in s.report["system_data"]) for s in samples] == [False, True]

    def test_jitter_makes_periods_actual(self) -> None:
        """Captured periods vary around the nominal one and add up to the capture times."""
        samples = monitor(schedule=Schedule(period_s=1.0, jitter_s=0.05)).take(5)
        periods = [s.truth.cores.period_s for s in samples]
        assert (len(set(periods)), math.isclose(sum(periods), samples[-1].captured_at_s, abs_tol=1e-6)) == (5, True)

    def test_deterministic_from_the_seed(self) -> None:
        """The same seed gives the same lines; another seed other lines."""
        def lines(seed: int) -> list[bytes]:
            return [s.line for s in monitor(seed=seed).take(2)]
        assert (lines(3) == lines(3), lines(3) == lines(4)) == (True, False)

    def test_runtimes_appear_and_leave(self) -> None:
        """A runtime is in exactly the reports captured while it lives."""
        late = Runtime(pid=999, tag="late", cores=(0,), start_s=12.0, stop_s=27.0)
        samples = monitor(runtimes=[late, Runtime(pid=1, tag="rest", cores=(1, 2))],
                          schedule=Schedule(jitter_s=0.0)).take(6)
        assert [999 in s.truth.runtimes for s in samples] == [False, False, True, True, True, False]

    def test_a_runtime_arriving_mid_period_reports_its_share(self) -> None:
        """A runtime alive for half the period reports half the rate, and the truth says the same."""
        samples = monitor(runtimes=[Runtime(pid=7, tag="a", cores=(0,)),
                                    Runtime(pid=8, tag="b", cores=(1,), start_s=7.5)],
                          schedule=Schedule(jitter_s=0.0)).take(2)
        cores = cores_in(samples[1])
        assert cores[1]["flops"] / cores[0]["flops"] == pytest.approx(0.5, rel=0.05)


class TestFaults:
    def test_utilisation_collapse_idles_one_device(self) -> None:
        """A collapsed device reads near-idle while the others stay busy."""
        truth = monitor(faults=[UtilCollapse(device=3, start_s=0.0)]).next().truth.cores
        assert (truth.util_pct[3] < 5, bool((np.delete(truth.util_pct, 3) > 80).all())) == (True, True)

    def test_low_flop_is_thirty_percent_less_at_the_same_utilisation(self) -> None:
        """Against the same seed healthy, the low-FLOP device has 0.7 of the FLOP and the same utilisation."""
        healthy = monitor().next().truth.cores
        slow = monitor(faults=[LowFlop(device=3, start_s=0.0)]).next().truth.cores
        assert (slow.flop[3] / healthy.flop[3], slow.util_pct[3] == healthy.util_pct[3],
                bool((np.delete(slow.flop, 3) == np.delete(healthy.flop, 3)).all())) == (
            pytest.approx(0.7, rel=1e-9), True, True)

    def test_a_fault_starting_mid_period_counts_its_share(self) -> None:
        """A low-FLOP fault active for half a period takes 15 % off that period's FLOP."""
        healthy = monitor(schedule=Schedule(jitter_s=0.0)).next().truth.cores
        slow = monitor(schedule=Schedule(jitter_s=0.0), faults=[LowFlop(device=3, start_s=2.5)]).next().truth.cores
        assert slow.flop[3] / healthy.flop[3] == pytest.approx(0.85, rel=1e-9)

    def test_uncorrectable_hbm_ecc_from_its_start(self) -> None:
        """mem_ecc_uncorrected appears on the faulty device only, and only after the fault starts."""
        samples = monitor(faults=[EccErrors(device=3, start_s=20.0, rate_s=2.0)],
                          schedule=Schedule(jitter_s=0.0)).take(8)
        counts = [[d["mem_ecc_uncorrected"] for d in s.report["system_data"]["neuron_hw_counters"]["neuron_devices"]]
                  for s in samples]
        assert ([c[3] > 0 for c in counts], sum(sum(c) - c[3] for c in counts)) == (
            [False] * 4 + [True] * 4, 0)

    def test_ecc_per_period_or_cumulative(self) -> None:
        """Per-period ECC values are the period's events; cumulative ones the totals, which never fall."""
        fault = [EccErrors(device=1, start_s=0.0, kind="sram_ecc_corrected", rate_s=1.0)]
        per = monitor(faults=fault).take(3)
        total = monitor(faults=fault, choices=Choices(ecc_reporting="cumulative", ecc_initial_totals=100)).take(3)
        def shown(s: Sample) -> int:
            return int(s.report["system_data"]["neuron_hw_counters"]["neuron_devices"][1]["sram_ecc_corrected"])
        assert ([shown(s) for s in per] == [int(s.truth.ecc.events["sram_ecc_corrected"][1]) for s in per],
                [shown(s) for s in total] == [int(s.truth.ecc.totals["sram_ecc_corrected"][1]) for s in total],
                [shown(s) for s in total] == [100 + sum(shown(p) for p in per[:i + 1]) for i in range(3)],
                sum(shown(s) for s in per) > 0) == (True, True, True, True)

    def test_ecc_counter_reset_goes_backwards_when_cumulative(self) -> None:
        """A driver reload restarts the cumulative totals: the next value is below the last."""
        samples = monitor(faults=[EccCounterReset(device=0, start_s=12.0)], schedule=Schedule(jitter_s=0.0),
                          choices=Choices(ecc_reporting="cumulative", ecc_initial_totals=1000)).take(3)
        values = [s.report["system_data"]["neuron_hw_counters"]["neuron_devices"][0]["mem_ecc_corrected"]
                  for s in samples]
        assert values == [1000, 1000, 0]

    def test_rising_execution_errors_and_timeouts(self) -> None:
        """Hardware errors on the faulty device's runtime grow period after period; timeouts are counted too."""
        samples = monitor(faults=[ExecErrors(device=2, start_s=0.0, rate_s=1.0, growth_s2=1.0),
                                  ExecErrors(device=2, start_s=0.0, kind="timed_out", rate_s=2.0)],
                          schedule=Schedule(jitter_s=0.0)).take(4)
        stats = [runtime(s, 20002)["report"]["execution_stats"] for s in samples]
        hardware = [st["error_summary"]["hardware"] for st in stats]
        others = sum(e["report"]["execution_stats"]["error_summary"]["hardware"]
                     for s in samples for e in s.report["neuron_runtime_data"] if e["pid"] != 20002)
        assert (hardware[-1] > hardware[0] > 0, all(st["execution_summary"]["timed_out"] > 0 for st in stats),
                others) == (True, True, 0)

    def test_low_flop_slows_the_runtimes_latency(self) -> None:
        """The low-FLOP device's runtime executes 1/0.7 as slowly on the device."""
        truth = monitor(faults=[LowFlop(device=3, start_s=0.0)]).next().truth.execution
        ratio = truth.device_latency_p50_s[3] / np.median(np.delete(truth.device_latency_p50_s, 3))
        assert ratio == pytest.approx(1 / 0.7, rel=0.05)

    @pytest.mark.parametrize("orphan", ["leave", "empty"])
    def test_a_vanishing_device_leaves_everything(self, orphan: str) -> None:
        """The device count drops, its hw entry and cores leave, its own runtime leaves or stays empty."""
        sample = monitor(faults=[DeviceVanish(device=3, start_s=0.0)],
                         choices=Choices(orphan_runtime=orphan)).next()
        hw = [d["neuron_device_index"] for d in sample.report["system_data"]["neuron_hw_counters"]["neuron_devices"]]
        listed = {e["pid"] for e in sample.report["neuron_runtime_data"]}
        assert (sample.report["neuron_hardware_info"]["neuron_device_count"], 3 in hw,
                sorted(c for c in cores_in(sample) if c // 4 == 3), 20003 in listed,
                bool(sample.truth.present[3]), math.isnan(sample.truth.cores.flop[3])
                ) == (15, False, [], orphan == "empty", False, True)

    def test_a_vanished_core_leaves_a_shared_runtime(self) -> None:
        """A runtime spanning the node loses the vanished device's cores and keeps the rest."""
        sample = monitor(runtimes=runtime_per_node(), faults=[DeviceVanish(device=0, start_s=0.0)]).next()
        assert sorted(cores_in(sample)) == list(range(4, 64))

    def test_a_stall_queues_reports_with_their_own_periods(self) -> None:
        """Reports captured during a stall are all written at its end, their periods unchanged."""
        stalled = monitor(faults=[Stall(start_s=9.0, duration_s=12.0)], schedule=Schedule(jitter_s=0.0)).take(5)
        plain = monitor(schedule=Schedule(jitter_s=0.0)).take(5)
        assert ([s.write_at_s for s in stalled], [s.line for s in stalled] == [s.line for s in plain]) == (
            [5.0, 21.0, 21.0, 21.0, 25.0], True)


class TestVariants:
    @staticmethod
    def variant_sample(**variant: Any) -> Sample:
        """The first report with one variant applied from the start."""
        return monitor(variants=[Variant(**variant)]).next()

    def test_group_missing_and_null(self) -> None:
        """A missing runtime group leaves every runtime; a null system group is null."""
        gone = self.variant_sample(kind="group_missing", group="execution_stats").report
        null = self.variant_sample(kind="group_null", group="neuron_hw_counters").report
        assert (any("execution_stats" in e["report"] for e in gone["neuron_runtime_data"]),
                null["system_data"]["neuron_hw_counters"]) == (False, None)

    def test_group_error_with_zeroed_values(self) -> None:
        """An errored group keeps its shape and period, every number 0 and the error string set."""
        group = self.variant_sample(kind="group_error_zeroed", group="neuron_hw_counters", error="driver gone"
                                    ).report["system_data"]["neuron_hw_counters"]
        assert (group["error"], group["period"] > 0, group["neuron_devices"][5]) == (
            "driver gone", True, {"neuron_device_index": 0, **dict.fromkeys(ECC_FIELDS, 0)})

    def test_group_error_without_values(self) -> None:
        """An errored group may be only its period and error."""
        group = self.variant_sample(kind="group_error_absent", group="neuroncore_counters", pid=20001
                                    ).report["neuron_runtime_data"][1]["report"]["neuroncore_counters"]
        assert set(group) == {"period", "error"}

    def test_runtime_error(self) -> None:
        """One runtime carries an error string; with no_report its report is empty."""
        kept = runtime(self.variant_sample(kind="runtime_error", pid=20004, error="e"), 20004)
        empty = runtime(self.variant_sample(kind="runtime_error_no_report", pid=20004), 20004)
        assert (kept["error"], bool(kept["report"]), empty["report"]) == ("e", True, {})

    def test_latency_null(self) -> None:
        """latency_stats objects are null, as documented when nothing ran."""
        stats = self.variant_sample(kind="latency_null").report["neuron_runtime_data"][0]["report"]["execution_stats"]
        assert stats["latency_stats"] == {"total_latency": None, "device_latency": None}

    @pytest.mark.parametrize(("kind", "expected"), [("hardware_info_null", None),
                                                    ("hardware_info_error", {"error": "synthetic error from the "
                                                                                      "generator"})])
    def test_hardware_info_null_or_errored(self, kind: str, expected: Any) -> None:
        """neuron_hardware_info may be null or only an error."""
        assert self.variant_sample(kind=kind).report["neuron_hardware_info"] == expected

    def test_runtime_data_shapes(self) -> None:
        """neuron_runtime_data may be empty, null, an object by pid, or hold non-objects."""
        shapes = {kind: self.variant_sample(kind=kind).report["neuron_runtime_data"]
                  for kind in ("runtime_data_empty", "runtime_data_null", "runtime_data_object",
                               "runtime_data_non_object")}
        assert (shapes["runtime_data_empty"], shapes["runtime_data_null"],
                sorted(shapes["runtime_data_object"])[:2], shapes["runtime_data_non_object"][-2:]) == (
            [], None, ["20000", "20001"], ["garbage", 42])

    def test_no_flops(self) -> None:
        """A report may have no flops key at all."""
        assert any("flops" in c for c in cores_in(self.variant_sample(kind="no_flops")).values()) is False

    def test_missing_device_index_and_null_ecc(self) -> None:
        """One hw entry loses its index; another has a null ECC value."""
        missing = self.variant_sample(kind="missing_device_index", device=2).report
        null = self.variant_sample(kind="null_ecc", device=4, field="sram_ecc_uncorrected").report
        assert ([d.get("neuron_device_index") for d in
                 missing["system_data"]["neuron_hw_counters"]["neuron_devices"]][1:4],
                null["system_data"]["neuron_hw_counters"]["neuron_devices"][4]["sram_ecc_uncorrected"]) == (
            [1, None, 3], None)

    @pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 1e300])
    def test_bad_flops_values_reach_the_wire(self, value: float) -> None:
        """NaN, Infinity, negative and absurd flops are emitted as Python's json writes them."""
        sample = self.variant_sample(kind="value", field="flops", device=1, value=value)
        got = [c["flops"] for i, c in cores_in(sample).items() if i // 4 == 1]
        assert (len(got), all(math.isnan(g) if math.isnan(value) else g == value for g in got),
                json.dumps(value).encode() in sample.line) == (4, True, True)

    def test_ecc_past_two_to_the_53(self) -> None:
        """An ECC count past 2**53 is written as an exact integer."""
        sample = self.variant_sample(kind="value", field="mem_ecc_corrected", device=0, value=2**53 + 1)
        assert (sample.report["system_data"]["neuron_hw_counters"]["neuron_devices"][0]["mem_ecc_corrected"],
                b'"mem_ecc_corrected":9007199254740993' in sample.line) == (2**53 + 1, True)

    def test_garbage_lines_come_before_the_report(self) -> None:
        """Not-JSON, JSON-not-object and oversize lines precede an intact report."""
        sample = monitor(variants=[Variant(kind="not_json"), Variant(kind="json_not_object"),
                                   Variant(kind="oversize_line")]).next()
        not_json, not_object, oversize = sample.preceding
        with pytest.raises(json.JSONDecodeError):
            json.loads(not_json)
        assert (json.loads(not_object), len(oversize) > 16 * 2**20, oversize.count(b"\n"),
                sample.wire().endswith(sample.line), json.loads(sample.line) == sample.report) == (
            [1, 2, 3], True, 1, True, True)

    def test_variants_never_change_the_truth(self) -> None:
        """A variant changes the report, not the ground truth."""
        plain = monitor().next().truth
        varied = monitor(variants=[Variant(kind="value", field="flops", value=math.nan)]).next().truth
        assert (varied.cores.flop.tolist() == plain.cores.flop.tolist(), len(varied.variants),
                len(plain.variants)) == (True, 1, 0)

    def test_a_variant_applies_only_in_its_window(self) -> None:
        """A variant from 8 s to 13 s changes only the report captured in that window."""
        samples = monitor(variants=[Variant(kind="hardware_info_null", start_s=8.0, stop_s=13.0)],
                          schedule=Schedule(jitter_s=0.0)).take(3)
        assert [s.report["neuron_hardware_info"] is None for s in samples] == [False, True, False]

    def test_an_unknown_variant_is_refused(self) -> None:
        """A misspelt variant kind fails at construction."""
        with pytest.raises(ValueError, match="unknown variant kind"):
            Variant(kind="grup_null")


def read_tree(root: Path) -> dict[str, dict[str, str]]:
    """Every device's files under the tree, by device name and relative path."""
    out: dict[str, dict[str, str]] = {}
    for device in sorted(os.listdir(root)):
        base = root / device
        out[device] = {str(p.relative_to(base)): p.read_text() for p in base.rglob("*") if p.is_file()}
    return out


class TestEfaSysfs:
    def test_the_tree_has_the_drivers_names(self, tmp_path: Path) -> None:
        """Each device holds the driver's device and port counters, lifespan, and an ACTIVE LinkUp port."""
        tree = EfaSysfsTree(tmp_path / "infiniband", EfaNode(devices=2, names=["rdmap16s0", "rdmap100s0"]))
        tree.step(1.0)
        files = read_tree(tmp_path / "infiniband")
        expected = ({f"hw_counters/{n}" for n in (*DEVICE_COUNTERS, "lifespan")}
                    | {f"ports/1/hw_counters/{n}" for n in (*PORT_COUNTERS, "lifespan")}
                    | {"ports/1/state", "ports/1/phys_state"})
        assert ({d: set(f) for d, f in files.items()}, files["rdmap16s0"]["ports/1/state"],
                files["rdmap16s0"]["ports/1/phys_state"]) == (
            {"rdmap16s0": expected, "rdmap100s0": expected}, "4: ACTIVE\n", "5: LinkUp\n")

    def test_counters_on_disk_are_the_truth_and_cumulative(self, tmp_path: Path) -> None:
        """Each write holds the truth's cumulative counters; they never fall and rise by the truth's deltas."""
        tree = EfaSysfsTree(tmp_path / "ib", EfaNode(seed=1))
        first, second = tree.step(1.0), tree.step(2.0)
        on_disk = {name: int((tmp_path / "ib" / "rdmap43s0" / "ports/1/hw_counters" / name).read_text())
                   for name in PORT_COUNTERS}
        assert on_disk == {name: int(second.port[name][4]) for name in PORT_COUNTERS}
        assert all((second.port[n] - first.port[n] == second.delta[n].astype(np.uint64)).all() for n in PORT_COUNTERS)
        assert float(second.tx_bytes_s.mean()) == pytest.approx(10e9, rel=0.05)

    def test_keep_alive_rises_each_second_and_can_freeze(self, tmp_path: Path) -> None:
        """keep_alive_rcvd rises by one a second, and stops when frozen."""
        node = EfaNode(devices=2, names=["a", "b"], uptime_s=10.0)
        tree = EfaSysfsTree(tmp_path / "ib", node)
        def keep_alive(name: str) -> int:
            return int((tmp_path / "ib" / name / "hw_counters/keep_alive_rcvd").read_text())
        tree.step(1.0)
        before = (keep_alive("a"), keep_alive("b"))
        node.freeze_keep_alive(1)
        tree.step(4.0)
        assert (before, keep_alive("a"), keep_alive("b")) == ((11, 11), 14, 11)

    def test_a_degraded_port_moves_fewer_bytes_and_retransmits_more(self) -> None:
        """A degraded device moves about 0.3 of the bytes with many more retransmits than its peers."""
        truth = EfaNode(seed=2, faults=[EfaDegraded(device=5, start_s=0.0)]).advance(10.0)
        others = np.delete(np.arange(16), 5)
        assert (truth.tx_bytes_s[5] / truth.tx_bytes_s[others].mean() == pytest.approx(0.3, rel=0.1),
                truth.delta["retrans_pkts"][5] > 5 * truth.delta["retrans_pkts"][others].max(),
                truth.delta["unresponsive_remote_events"][5] > 0, bool(truth.degraded[5])) == (True, True, True, True)

    def test_a_vanishing_device_leaves_its_directory_only(self, tmp_path: Path) -> None:
        """From its start the vanished device's directory is gone and the others untouched; at its stop it
        returns with counters restarted."""
        node = EfaNode(seed=3, faults=[EfaVanish(device=0, start_s=2.0, stop_s=4.0)])
        tree = EfaSysfsTree(tmp_path / "ib", node)
        tree.step(1.0)
        gone = tree.step(2.0)
        listed = sorted(os.listdir(tmp_path / "ib"))
        tree.step(3.0)
        back = tree.step(5.0)
        assert ("rdmap16s0" in listed, len(listed), gone.names[0], int(back.port["tx_bytes"][0]) < 2 * 10e9,
                int(back.device["keep_alive_rcvd"][0])) == (False, 15, None, True, 1)

    def test_remove_rename_and_reset(self, tmp_path: Path) -> None:
        """Removing, renaming and resetting show on disk at the next write."""
        tree = EfaSysfsTree(tmp_path / "ib", EfaNode(seed=4, devices=3, names=["x", "y", "z"]))
        tree.step(1.0)
        tree.node.remove(0)
        tree.node.rename(1, "y2")
        tree.node.reset(2)
        tree.write()
        assert (sorted(os.listdir(tmp_path / "ib")),
                (tmp_path / "ib" / "z" / "ports/1/hw_counters/tx_bytes").read_text()) == (["y2", "z"], "0\n")

    def test_only_device_directories_ever_appear(self, tmp_path: Path) -> None:
        """Temporary files and half-built devices live outside the root."""
        tree = EfaSysfsTree(tmp_path / "ib", EfaNode(seed=5, devices=2, names=["a", "b"]))
        tree.step(1.0)
        tree.node.remove(1)
        tree.step(2.0)
        tree.node.restore(1)
        tree.step(3.0)
        assert (sorted(os.listdir(tmp_path / "ib")), os.listdir(tree.staging)) == (["a", "b"], [])

    def test_deterministic_from_the_seed(self) -> None:
        """The same seed and times give the same counters; another seed others."""
        def tx(seed: int) -> list[int]:
            return EfaNode(seed=seed).advance(1.0).port["tx_bytes"].tolist()
        assert (tx(8) == tx(8), tx(8) == tx(9)) == (True, False)

    def test_default_names_sort_differently_as_text(self) -> None:
        """The default EC2-style names are rdmap<bus>s0 whose text order is not their bus order."""
        names = default_device_names()
        assert (len(set(names)), names[0], sorted(names) == list(names)) == (16, "rdmap16s0", False)
