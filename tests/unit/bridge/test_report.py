"""Specification of reading one neuron-monitor report (rainierd/bridge/_report.py
and _cores.py): every shape AWS's user guide documents is accepted, each
core is placed on its device, what is missing or errored is unknown, and
each bad value is refused and counted by field and reason."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rainierd.bridge import BridgeConfig, read_report
from rainierd.bridge._cores import HardwareInfo, read_hardware_info
from rainierd.bridge._values import Refusals
from tests.bridge_reports import HARDWARE, HARDWARE_2_21, busy, core, device_cores, hw_counters, report, runtime

CONFIG = BridgeConfig()


def devices_of(document: dict[str, Any]) -> dict[int, int]:
    """Return each listed logical core's device, over every runtime of the report."""
    read = read_report(document, CONFIG)
    return {index: c.device for r in read.runtimes for index, c in (r.cores or {}).items()}


class TestHardwareInfo:
    @pytest.mark.parametrize(("info", "expected"), [
        (HARDWARE, HardwareInfo(16, 103079215104, 4)),
        (HARDWARE_2_21, HardwareInfo(16, 103079215104, 4)),
        ({"logical_neuroncore_config": 1, "error": ""}, HardwareInfo(None, None, 8)),
        ({"neuron_device_count": 16, "error": ""}, HardwareInfo(16, None, None)),
    ])
    def test_each_documented_shape_gives_logical_cores_per_device(
        self, info: dict[str, Any], expected: HardwareInfo,
    ) -> None:
        """Today's shape counts logical cores, the 2.21 shape physical ones over logical_neuroncore_size, LNC alone
        divides the 8 physical cores; a shape that says none of them leaves it to the default."""
        refusals = Refusals()
        assert (read_hardware_info(info, CONFIG, refusals), refusals.counts) == (expected, {})

    def test_a_self_contradicting_info_places_no_core(self) -> None:
        """4 logical cores a device at LNC=1 would be 4 physical cores, not 8: refused, no mapping from it."""
        refusals = Refusals()
        info = read_hardware_info({**HARDWARE, "logical_neuroncore_config": 1}, CONFIG, refusals)
        assert (info, refusals.counts) == (HardwareInfo(16, 103079215104, None, consistent=False),
                                           {("neuroncore_per_device_count", "inconsistent"): 1})

    @pytest.mark.parametrize(("info", "counted"), [
        (None, {}),
        ({**HARDWARE, "error": "neuron driver not loaded"}, {}),
        ("trainium2", {("neuron_hardware_info", "wrong_type"): 1}),
    ])
    def test_null_errored_or_malformed_info_is_no_info(self, info: object, counted: dict[Any, int]) -> None:
        """"neuron_hardware_info": null (AWS's own consumer guards against it), an error, or a non-object: None."""
        refusals = Refusals()
        assert (read_hardware_info(info, CONFIG, refusals), refusals.counts) == (None, counted)

    def test_values_beyond_the_node_are_refused(self) -> None:
        """More devices than the node has, or more memory than a Trainium2's HBM, are refused field by field."""
        refusals = Refusals()
        info = read_hardware_info({**HARDWARE, "neuron_device_count": 17, "neuron_device_memory_size": 2**40},
                                  CONFIG, refusals)
        assert (info, refusals.counts) == (HardwareInfo(None, None, 4), {
            ("neuron_device_count", "out_of_range"): 1, ("neuron_device_memory_size", "above_capacity"): 1})


class TestCorePlacement:
    def test_v3d_names_place_each_core(self) -> None:
        """nc_v3.N is on device N // 8, whatever the hardware info says."""
        document = report([runtime(device_cores(d)) for d in (0, 9, 15)], hardware=None)
        assert devices_of(document) == {c: c // 4 for d in (0, 9, 15) for c in range(4 * d, 4 * d + 4)}

    def test_the_2_21_shape_puts_64_cores_on_16_chips(self) -> None:
        """per_device_count 8 with logical_neuroncore_size 2 is 4 logical cores a chip: core 63 on chip 15, not 7."""
        cores = {str(c): core() for c in range(64)}
        assert devices_of(report([runtime(cores)], hardware=HARDWARE_2_21)) == {c: c // 4 for c in range(64)}

    def test_lnc_1_puts_128_cores_on_16_chips(self) -> None:
        """At LNC=1 a chip has 8 logical cores."""
        cores = {str(c): core(lnc=1) for c in range(128)}
        hardware = {**HARDWARE, "neuroncore_per_device_count": 8, "logical_neuroncore_config": 1}
        assert devices_of(report([runtime(cores)], hardware=hardware)) == {c: c // 8 for c in range(128)}

    def test_without_info_a_core_past_the_default_places_none(self) -> None:
        """No hardware info and core 100 listed: LNC=2's default cannot be the configuration, so no core is placed
        and the runtime's cores are unknown."""
        read = read_report(report([runtime({str(c): core() for c in range(128)})], hardware=None), CONFIG)
        assert (read.cores_complete, read.runtimes[0].cores, read.refusals.counts[("neuroncore_index",
                                                                                   "inconsistent")] >= 1) == (
            False, None, True)

    def test_v3d_on_two_devices_is_refused(self) -> None:
        """A logical core whose physical cores lie on two devices is refused as inconsistent; the hardware info
        places it."""
        odd = core(index=3) | {"v3d": {"nc_v3.7": {}, "nc_v3.8": {}}}
        read = read_report(report([runtime({"3": odd})]), CONFIG)
        assert (read.runtimes[0].cores[3].device, read.refusals.counts) == (  # type: ignore[index]
            0, {("v3d", "inconsistent"): 1})

    def test_v3d_numbered_per_device_places_nothing(self) -> None:
        """Physical cores numbered from 0 on every device (nc_v3.0-7 everywhere) would put 64 logical cores on
        device 0: the names are refused once, and the hardware info places each core."""
        cores = {str(c): core() | {"v3d": {f"nc_v3.{2 * (c % 4) + k}": {} for k in range(2)}} for c in range(64)}
        read = read_report(report([runtime(cores)]), CONFIG)
        assert (devices_of(report([runtime(cores)])), read.refusals.counts) == (
            {c: c // 4 for c in range(64)}, {("v3d", "inconsistent"): 1})

    def test_a_core_beyond_the_node_makes_its_runtime_unknown(self) -> None:
        """Core 64 at 4 a device would be device 16 of 16: refused, and the runtime's cores are unknown."""
        read = read_report(report([runtime({"64": core()}, with_memory=False)]), CONFIG)
        assert (read.runtimes[0].cores, read.cores_complete, read.refusals.counts) == (
            None, False, {("neuroncore_index", "out_of_range"): 1})


class TestRuntimeShapes:
    @pytest.mark.parametrize(("runtimes", "complete", "counted"), [
        ([], True, {}),
        (None, False, {}),
        ({"0": {}}, False, {("neuron_runtime_data", "wrong_type"): 1}),
        ("none", False, {("neuron_runtime_data", "wrong_type"): 1}),
    ])
    def test_runtime_data_empty_null_or_not_a_list(self, runtimes: Any, complete: bool,
                                                   counted: dict[Any, int]) -> None:
        """An empty list is a node running nothing (complete); null, an object or a string say nothing."""
        read = read_report(report(runtimes), CONFIG)
        assert (read.runtimes, read.cores_complete, read.refusals.counts) == ((), complete, counted)

    def test_a_missing_runtime_list_says_nothing(self) -> None:
        """A report without neuron_runtime_data leaves every runtime unknown, refusing nothing."""
        document = report([])
        del document["neuron_runtime_data"]
        read = read_report(document, CONFIG)
        assert (read.cores_complete, read.memory_complete, read.placement_complete) == (False, False, False)

    def test_an_entry_that_is_no_object_is_an_unknown_runtime(self) -> None:
        """A non-object entry is refused and counted a runtime error; the other runtimes are read."""
        read = read_report(report([42, runtime(device_cores(1))]), CONFIG)
        assert ([r.key for r in read.runtimes], read.cores_complete, read.runtime_errors, read.refusals.counts) == (
            ["runtime[1000|app]"], False, 1, {("neuron_runtime", "wrong_type"): 1})

    def test_a_runtime_error_makes_its_data_unknown_even_if_zeroed(self) -> None:
        """A runtime whose error is set is not read, however plausible its zeroed values."""
        errored = runtime(device_cores(2, util=0.0, flops=0.0), error="failed to connect to the runtime")
        read = read_report(report([errored]), CONFIG)
        assert (read.runtimes, read.cores_complete, read.runtime_errors) == ((), False, 1)

    def test_a_group_error_makes_that_group_unknown(self) -> None:
        """neuroncore_counters with an error string is unknown (counted), its runtime's memory still read."""
        errored = runtime(device_cores(2, util=0.0, flops=0.0), group_error="counters unavailable")
        read = read_report(report([errored]), CONFIG)
        only = read.runtimes[0]
        assert (only.cores, only.memory is not None, read.cores_complete, dict(read.group_errors)) == (
            None, True, False, {"neuroncore_counters": 1})

    def test_a_report_without_flops_has_unknown_flops(self) -> None:
        """The older shape has no flops: utilisation is read, FLOP/s unknown (never 0)."""
        read = read_report(report([runtime(device_cores(0, util=40.0, flops=None))]), CONFIG)
        cores = read.runtimes[0].cores
        assert cores is not None
        assert {(c.util, c.flops) for c in cores.values()} == {(0.4, None)}

    def test_each_group_period_is_kept(self) -> None:
        """Per-group periods are kept by group key, the system groups too."""
        document = busy([0], period=1.0)
        document["system_data"]["neuron_hw_counters"] = hw_counters(period=2.000731)
        periods = read_report(document, CONFIG).periods
        assert (periods["runtime[1000|rank0]/neuroncore_counters"], periods["system/neuron_hw_counters"]) == (
            1.0, 2.000731)


class TestValues:
    @pytest.mark.parametrize(("util", "reason"), [
        (math.nan, "non_finite"), (math.inf, "non_finite"), (-1.0, "negative"), (150.0, "out_of_range"),
        ("50", "wrong_type"), (True, "wrong_type"), (None, "wrong_type"), (10**400, "out_of_range"),
    ])
    def test_a_bad_utilisation_is_refused_by_reason(self, util: object, reason: str) -> None:
        """Each kind of bad utilisation is refused and counted; the core's FLOP/s is still read."""
        read = read_report(report([runtime({"0": {"neuroncore_utilization": util, "flops": 1e12}})]), CONFIG)
        sample = read.runtimes[0].cores[0]  # type: ignore[index]
        assert ((sample.util, sample.flops), read.refusals.counts) == (
            (None, 1e12), {("neuroncore_utilization", reason): 1})

    def test_a_hair_above_100_percent_is_full(self) -> None:
        """100.4 % over a measured period is the measurement's: read as 1.0."""
        read = read_report(report([runtime({"0": core(util=100.4)})]), CONFIG)
        assert read.runtimes[0].cores[0].util == 1.0  # type: ignore[index]

    @pytest.mark.parametrize(("value", "reason"), [
        (-1, "negative"), (2**53, "too_large"), (3.0, "wrong_type"), (None, "wrong_type"), (math.nan, "non_finite"),
    ])
    def test_a_bad_ecc_count_is_refused_and_the_device_kept(self, value: object, reason: str) -> None:
        """One bad ECC count is refused; the device's other counts stand."""
        document = report([])
        document["system_data"]["neuron_hw_counters"]["neuron_devices"][4]["mem_ecc_corrected"] = value
        read = read_report(document, CONFIG)
        assert read.ecc is not None
        assert (read.ecc[4], read.refusals.counts) == (
            {"mem_ecc_corrected": None, "mem_ecc_uncorrected": 0, "sram_ecc_corrected": 0, "sram_ecc_uncorrected": 0},
            {("mem_ecc_corrected", reason): 1})

    def test_a_device_without_an_index_is_dropped_and_the_list_not_whole(self) -> None:
        """An ECC entry without neuron_device_index is refused; the others are read, the list no longer whole."""
        document = report([])
        del document["system_data"]["neuron_hw_counters"]["neuron_devices"][3]["neuron_device_index"]
        read = read_report(document, CONFIG)
        assert (sorted(read.ecc or {}), read.devices_listed, read.refusals.counts) == (
            [d for d in range(16) if d != 3], None, {("neuron_device_index", "wrong_type"): 1})

    def test_the_instance_id_is_read(self) -> None:
        """instance_info.instance_id is the report's identity; without one it has none."""
        no_id = report([], instance={"instance_id": "", "error": "metadata service unavailable"})
        assert (read_report(report([]), CONFIG).instance_id, read_report(no_id, CONFIG).instance_id) == (
            "i-0011223344556677a", None)
