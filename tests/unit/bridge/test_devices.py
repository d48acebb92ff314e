"""Specification of a report as one reading per device (rainierd/bridge/_devices.py):
idle is only what every runtime's counters vouch for, unknown stays unknown,
physics bounds each figure, execution statistics count against a device
only when their runtime is wholly on it, and a gone device is said gone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rainierd.bridge import BridgeConfig, read_report
from rainierd.bridge._devices import DeviceReading, Devices, device_readings
from tests.bridge_reports import (
    HARDWARE,
    busy,
    device_cores,
    execution,
    hw_counters,
    report,
    runtime,
)

CONFIG = BridgeConfig()
ZERO_ECC = dict.fromkeys(("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected"),
                         0)


def readings(document: dict[str, Any], fresh: Callable[[str], bool] = lambda _: True,
             config: BridgeConfig = CONFIG) -> Devices:
    """Return the devices of ``document`` with every group new unless ``fresh`` says otherwise."""
    return device_readings(read_report(document, config), config, fresh)


def idle(**kw: Any) -> DeviceReading:
    """Return the reading of a present device no runtime uses."""
    return DeviceReading(present=True, util=0.0, flops=0.0, flop=0.0, flop_whole=True, hbm_bytes=0,
                         exec_errors=0, exec_timeouts=0, ecc=ZERO_ECC, **kw)


class TestUtilisationAndFlop:
    def test_a_node_running_nothing_is_idle(self) -> None:
        """No runtime, every count readable: every device idle, present, no error."""
        assert readings(report([])).devices == (idle(),) * 16

    def test_unlisted_devices_are_idle_only_if_every_runtime_is_known(self) -> None:
        """Device 3 busy, a second runtime errored: devices 0-2 and 4-15 unknown, device 3 known."""
        document = report([runtime(device_cores(3, util=80.0, flops=2e14)), runtime(None, pid=7, error="gone")])
        devices = readings(document).devices
        assert (devices[3].util, devices[3].flops) == (0.8, 8e14)
        assert {(d.util, d.flops, d.flop, d.hbm_bytes, d.exec_errors) for i, d in enumerate(devices) if i != 3} == {
            (None, None, None, None, None)}

    def test_a_partly_listed_device_averages_over_all_its_cores(self) -> None:
        """Two of device 5's four cores busy at 80 %: its utilisation is 40 %, not 80 %."""
        cores = dict(list(device_cores(5, util=80.0, flops=2e14).items())[:2])
        device = readings(report([runtime(cores)])).devices[5]
        assert (device.util, device.flops, device.flop) == (0.4, 4e14, 4e14)

    def test_flop_is_the_rate_times_its_own_period(self) -> None:
        """A 5.0013 s captured period: FLOP is flops x 5.0013, whatever the time between reads."""
        device = readings(busy([2], flops=1e14, period=5.0013)).devices[2]
        assert (device.flops, device.flop) == (4e14, pytest.approx(4e14 * 5.0013))

    def test_flop_above_the_peak_is_refused_and_the_rest_kept(self) -> None:
        """A device at 1e300 FLOP/s loses its FLOP (refused, counted); its utilisation and the others stand."""
        document = report([runtime(device_cores(0, flops=1e300), pid=1), runtime(device_cores(1), pid=2)])
        read = read_report(document, CONFIG)
        devices = device_readings(read, CONFIG, lambda _: True).devices
        assert ((devices[0].util, devices[0].flops, devices[0].flop), devices[1].flops, read.refusals.counts) == (
            (0.5, None, None), 4e14, {("flops", "above_peak"): 1})

    def test_a_report_without_flops_leaves_busy_flop_unknown(self) -> None:
        """Without flops a busy device's FLOP is unknown, never 0; idle ones still executed none."""
        devices = readings(report([runtime(device_cores(6, flops=None))])).devices
        assert ((devices[6].util, devices[6].flop), (devices[7].util, devices[7].flop)) == ((0.5, None), (0.0, 0.0))

    def test_repeated_counters_add_no_flop(self) -> None:
        """A NeuronCore counters group repeated from the last report adds nothing and covers no new period."""
        device = readings(busy([1]), fresh=lambda key: not key.endswith("neuroncore_counters")).devices[1]
        assert (device.util, device.flop, device.flop_whole) == (0.5, 0.0, False)


class TestMemory:
    def test_hbm_is_the_sum_over_the_devices_cores(self) -> None:
        """Four cores of 1 GiB and 1 KiB of code each: the device holds their sum; others hold none."""
        devices = readings(busy([4])).devices
        assert (devices[4].hbm_bytes, devices[5].hbm_bytes) == (4 * (2**30 + 1024), 0)

    def test_hbm_above_the_devices_memory_is_refused(self) -> None:
        """30 GiB on each of 4 cores is more than the 96 GiB the device has: refused, counted."""
        document = report([runtime(device_cores(4))])
        for usage in document["neuron_runtime_data"][0]["report"]["memory_used"]["neuron_runtime_used_bytes"][
                "usage_breakdown"]["neuroncore_memory_usage"].values():
            usage["tensors"] = 30 * 2**30
        read = read_report(document, CONFIG)
        assert (device_readings(read, CONFIG, lambda _: True).devices[4].hbm_bytes, read.refusals.counts) == (
            None, {("neuroncore_memory_usage", "above_capacity"): 1})


class TestExecution:
    def test_a_runtime_on_one_device_counts_against_it(self) -> None:
        """Generic, runtime and hardware errors count against the device; numerical ones are the job's."""
        stats = execution(generic=1, runtime=2, hardware=3, numerical=9, timed_out=4, p50_s=0.012)
        result = readings(report([runtime(device_cores(8), execution_stats=stats)]))
        device = result.devices[8]
        assert (device.exec_errors, device.exec_timeouts, device.latency_us) == (6, 4, pytest.approx(12_000.0))
        assert (result.errors["numerical"], result.unattributed, result.timeouts) == (9, {}, 4)

    def test_a_runtime_on_two_devices_is_unattributed(self) -> None:
        """A runtime spread over devices 0 and 1: its errors are counted unattributed and neither device has
        execution figures; device 2 has its own."""
        spread = runtime(device_cores(0) | device_cores(1), execution_stats=execution(generic=5))
        alone = runtime(device_cores(2), pid=2, execution_stats=execution(hardware=1))
        result = readings(report([spread, alone]))
        assert [result.devices[d].exec_errors for d in (0, 1, 2, 3)] == [None, None, 1, 0]
        assert result.unattributed["generic"] == 5

    def test_nothing_executed_is_no_latency(self) -> None:
        """Null latencies (no model ran in the period) give no latency, not 0."""
        device = readings(report([runtime(device_cores(3), execution_stats=execution(p50_s=None))])).devices[3]
        assert (device.exec_errors, device.latency_us) == (0, None)

    def test_a_repeated_group_adds_no_errors(self) -> None:
        """execution_stats repeated from the last report adds no errors (its total stands)."""
        document = report([runtime(device_cores(3), execution_stats=execution(generic=2))])
        device = readings(document, fresh=lambda key: not key.endswith("execution_stats")).devices[3]
        assert device.exec_errors == 0


class TestEccAndPresence:
    def test_ecc_is_read_per_device_hbm_and_sram_apart(self) -> None:
        """mem_* and sram_* stay apart, by device."""
        ecc = {5: {"mem_ecc_corrected": 3, "sram_ecc_uncorrected": 1}}
        device = readings(report([], hw=hw_counters(ecc))).devices[5]
        assert device.ecc == {"mem_ecc_corrected": 3, "mem_ecc_uncorrected": 0, "sram_ecc_corrected": 0,
                              "sram_ecc_uncorrected": 1}

    def test_a_repeated_group_counts_no_period_twice(self) -> None:
        """Per-period ECC of a repeated neuron_hw_counters is zero new counts; cumulative ones are read as said."""
        document = report([], hw=hw_counters({5: {"mem_ecc_corrected": 3}}))
        stale = lambda key: key != "system/neuron_hw_counters"  # noqa: E731 - a predicate, read in place
        cumulative = BridgeConfig(ecc_counts="cumulative")
        assert (readings(document, stale).devices[5].ecc["mem_ecc_corrected"],
                readings(document, stale, cumulative).devices[5].ecc["mem_ecc_corrected"]) == (0, 3)

    def test_an_errored_group_leaves_ecc_unknown(self) -> None:
        """neuron_hw_counters with an error and zeroed counts: ECC unknown, presence unknown."""
        device = readings(report([], hw=hw_counters(error="driver query failed"))).devices[0]
        assert (device.ecc, device.present) == (dict.fromkeys(ZERO_ECC), None)

    def test_a_device_gone_is_said_gone_and_nothing_else(self) -> None:
        """15 devices counted and device 7 not listed: device 7 is gone, the others present."""
        document = report([], hw=hw_counters(devices=[d for d in range(16) if d != 7]),
                          hardware={**HARDWARE, "neuron_device_count": 15})
        devices = readings(document).devices
        assert (devices[7], devices[6].present) == (DeviceReading(present=False), True)

    def test_a_short_list_alone_is_not_a_device_gone(self) -> None:
        """Device 7 not listed while the hardware info counts 16: its presence and ECC are unknown."""
        devices = readings(report([], hw=hw_counters(devices=[d for d in range(16) if d != 7]))).devices
        assert (devices[7].present, devices[7].ecc) == (None, dict.fromkeys(ZERO_ECC))
