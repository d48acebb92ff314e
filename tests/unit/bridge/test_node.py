"""Specification of one node's bridge (rainierd/bridge/_node.py): reports in,
JSON node frames out, every frame one the wire accepts, nothing invented,
rates from the reports' own periods however the lines were read, one bad
value costing that value only, and a report of another instance refused."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rainierd.bridge import BridgeConfig, EfaSnapshot, NodeBridge, Outcome, read_efa
from rainierd.wire import NodeFrame, decode_json
from tests.bridge_reports import (
    EFA_NAMES,
    HARDWARE,
    HARDWARE_2_21,
    busy,
    device_cores,
    efa_counters,
    efa_tree,
    execution,
    hw_counters,
    report,
    runtime,
)

PEAK = BridgeConfig().hardware.fp8_dense_flops


def bridge(**config: Any) -> NodeBridge:
    """Return node 2's bridge (chips 32-47, ports 32-47)."""
    return NodeBridge(node=2, publisher="n2", config=BridgeConfig(**config))


def chips(outcome: Outcome) -> dict[int, dict[str, Any]]:
    """Return the frame's chip records by device index, having checked the wire decodes the frame."""
    assert outcome.frame is not None
    assert isinstance(decode_json(json.dumps(outcome.frame, allow_nan=False).encode()), NodeFrame)
    return {c["chip"] - 32: c for c in outcome.frame["chips"]}


def varied(document: dict[str, Any], k: int) -> dict[str, Any]:
    """Return ``document`` with every group's period nudged by ``k`` ns, as real captures never repeat."""
    out = copy.deepcopy(document)
    for entry in out["neuron_runtime_data"] or ():
        for group in entry["report"].values():
            group["period"] += k * 1e-9
    for group in out["system_data"].values():
        group["period"] += k * 1e-9
    return out


class TestFrames:
    def test_a_report_becomes_a_frame_the_wire_accepts(self) -> None:
        """Header, period, one record a chip with only what the report says; no links, no cooling."""
        outcome = bridge().process(busy([0], util=60.0, flops=2e14), wall_s=1_000.0)
        assert outcome.frame is not None
        header = {k: v for k, v in outcome.frame.items() if k not in ("chips", "efa")}
        assert header == {"v": 1, "kind": "node", "publisher": "n2", "seq": 0, "tick": 0, "t_s": 1_000.0, "node": 2,
                          "links": [], "period_s": 1.0}
        assert chips(outcome)[0] == {
            "chip": 32, "present": True, "util": 0.6, "hbm_used_bytes": 4 * (2**30 + 1024), "fp8_flop_total": 8e14,
            "ecc_corrected_total": 0, "ecc_uncorrected_total": 0, "sram_ecc_corrected_total": 0,
            "sram_ecc_uncorrected_total": 0, "exec_errors_total": 0, "exec_timeouts_total": 0,
            "exec_latency_us": 10_000.0}

    def test_what_is_errored_is_left_out_not_zeroed(self) -> None:
        """An errored runtime and errored hw counters, zeroed: no chip has a figure (the errored runtime could be on
        any of them), so the frame has no chip record."""
        document = report([runtime(device_cores(0, util=0.0, flops=0.0), error="runtime unreachable")],
                          hw=hw_counters(error="sysfs read failed"))
        assert chips(bridge().process(document, wall_s=1_000.0)) == {}

    def test_a_report_without_flops_publishes_no_flop(self) -> None:
        """The captured shape without flops: utilisation, no fp8_flop_total (never 0)."""
        record = chips(bridge().process(report([runtime(device_cores(1, flops=None))]), wall_s=1_000.0))[1]
        assert (record["util"], "fp8_flop_total" in record) == (0.5, False)

    def test_the_2_21_shape_fills_all_16_chips(self) -> None:
        """64 logical cores under the 2.21 hardware info: every chip busy, none above its 96 GiB."""
        cores = {str(c): {"neuroncore_utilization": 50.0, "flops": 1e14} for c in range(64)}
        records = chips(bridge().process(report([runtime(cores)], hardware=HARDWARE_2_21), wall_s=1_000.0))
        assert [(records[d]["util"], records[d]["hbm_used_bytes"]) for d in range(16)] == [
            (0.5, 4 * (2**30 + 1024))] * 16

    def test_a_device_gone_is_present_false_only(self) -> None:
        """Device 7 gone (15 counted, not listed): its record says so and nothing else."""
        document = report([], hw=hw_counters(devices=[d for d in range(16) if d != 7]),
                          hardware={**HARDWARE, "neuron_device_count": 15})
        assert chips(bridge().process(document, wall_s=1_000.0))[7] == {"chip": 39, "present": False}


class TestRuntimesComeAndGo:
    def test_a_runtime_leaving_makes_its_device_idle_and_its_totals_stand(self) -> None:
        """Device 3's application ends: the device reads idle, its FLOP and error totals keep their values; a new
        application on device 5 starts adding to device 5's."""
        b = bridge()
        stats = execution(generic=2)
        first = chips(b.process(report([runtime(device_cores(3), pid=1, execution_stats=stats)]), wall_s=1_000.0))
        second = chips(b.process(report([runtime(device_cores(5), pid=2, execution_stats=stats)]), wall_s=1_001.0))
        assert [(r["util"], r["fp8_flop_total"], r["exec_errors_total"]) for r in (first[3], second[3], second[5])] == [
            (0.5, 4e14, 2), (0.0, 4e14, 2), (0.5, 4e14, 2)]


class TestTime:
    def test_a_backlog_after_a_stall_gives_the_right_rates(self) -> None:
        """Lines queued during a 5 s stall and read 6 ms apart: each frame a period on, the FLOP rate the report's."""
        b = bridge()
        # Read on time until 1_002, then stalled until 1_008: six reports waited in the pipe.
        walls = [1_000.0, 1_001.0, 1_002.0, *(1_008.0 + 0.006 * j for j in range(6))]
        frames = [b.process(varied(busy([0], flops=3e14), k), wall_s=wall) for k, wall in enumerate(walls)]
        t_s = np.array([f.frame["t_s"] for f in frames if f.frame])  # type: ignore[index]
        total = np.array([chips(f)[0]["fp8_flop_total"] for f in frames])
        rates = np.diff(total) / np.diff(t_s)
        assert (np.diff(t_s).tolist(), rates.tolist()) == (pytest.approx([1.0] * 8), pytest.approx([1.2e15] * 8))
        assert rates.max() <= PEAK

    def test_a_stepped_frame_carries_no_counters_and_no_efa(self, tmp_path: Path) -> None:
        """The clock stepped (the start was late): util stays, every *_total and the EFA ports wait."""
        root = efa_tree(tmp_path, {"rdmap16s0": efa_counters(5)})
        b = bridge()
        b.process(busy([0]), wall_s=1_000.0, efa=lambda: read_efa(root))
        outcome = b.process(varied(busy([0]), 1), wall_s=1_000.2, efa=lambda: read_efa(root))
        assert outcome.tick is not None
        assert outcome.frame is not None
        assert (outcome.tick.step, sorted(chips(outcome)[0]), outcome.frame["efa"], dict(b.steps)) == (
            "ahead", ["chip", "exec_latency_us", "hbm_used_bytes", "present", "util"], [], {"ahead": 1})

    def test_backlog_frames_carry_no_efa_and_the_next_current_one_does(self, tmp_path: Path) -> None:
        """EFA counters are of now: a frame 3 s behind the wall clock has none, a current one has them."""
        root = efa_tree(tmp_path, {"rdmap16s0": efa_counters(5)})
        reads: list[float] = []

        def efa() -> EfaSnapshot:
            reads.append(1.0)
            return read_efa(root)

        b = bridge()
        first = b.process(busy([0]), wall_s=1_000.0, efa=efa)
        behind = b.process(varied(busy([0]), 1), wall_s=1_004.0, efa=efa)
        caught_up = [b.process(varied(busy([0]), k), wall_s=1_004.0 + 0.001 * k, efa=efa) for k in (2, 3, 4)]
        assert [len(o.frame["efa"]) for o in (first, behind, *caught_up)] == [1, 0, 0, 0, 1]  # type: ignore[index]
        assert len(reads) == 2

    def test_repeated_counters_fold_into_the_next_frame(self) -> None:
        """A report whose NeuronCore counters repeat the last (hw counters came due) publishes nothing; its new ECC
        counts arrive with the next frame."""
        b = bridge()
        first = busy([0])
        b.process(first, wall_s=1_000.0)
        second = copy.deepcopy(first)
        second["system_data"]["neuron_hw_counters"] = hw_counters({0: {"mem_ecc_corrected": 2}}, period=1.5)
        folded = b.process(second, wall_s=1_000.5)
        third = varied(second, 1)
        third["system_data"]["neuron_hw_counters"] = second["system_data"]["neuron_hw_counters"]  # repeated
        after = b.process(third, wall_s=1_001.0)
        assert (folded, chips(after)[0]["ecc_corrected_total"], after.frame["seq"]) == (  # type: ignore[index]
            Outcome(folded=True), 2, 1)

    def test_an_identical_report_is_new_throughout(self) -> None:
        """A report equal to the last in every byte is taken as a new capture, not a repeat."""
        b = bridge()
        document = report([], hw=hw_counters({3: {"mem_ecc_uncorrected": 1}}))
        outcomes = [b.process(document, wall_s=1_000.0 + k) for k in range(3)]
        assert [chips(o)[3]["ecc_uncorrected_total"] for o in outcomes] == [1, 2, 3]


class TestTotals:
    def test_per_period_ecc_adds_up_hbm_and_sram_apart(self) -> None:
        """ecc_counts per-period (the default): HBM and SRAM counts each summed into their own totals."""
        b = bridge()
        for k, (mem, sram) in enumerate(((1, 0), (0, 2), (3, 1))):
            hw = hw_counters({4: {"mem_ecc_corrected": mem, "sram_ecc_corrected": sram}}, period=1.0 + k * 1e-9)
            record = chips(b.process(report([], hw=hw), wall_s=1_000.0 + k))[4]
        assert (record["ecc_corrected_total"], record["sram_ecc_corrected_total"]) == (4, 3)

    def test_cumulative_ecc_follows_the_counter_across_a_reset(self) -> None:
        """ecc_counts cumulative: 5, 7, then 2 (the driver reloaded): totals 5, 7, 9, and one reset counted."""
        b = bridge(ecc_counts="cumulative")
        totals = [chips(b.process(report([], hw=hw_counters({4: {"mem_ecc_uncorrected": v}}, period=1.0 + k * 1e-9)),
                                  wall_s=1_000.0 + k))[4]["ecc_uncorrected_total"] for k, v in enumerate((5, 7, 2))]
        assert (totals, dict(b.resets)) == ([5, 7, 9], {"mem_ecc_uncorrected": 1})

    def test_execution_errors_and_timeouts_add_up(self) -> None:
        """generic + runtime + hardware errors and timeouts of each period, added to monotone totals."""
        b = bridge()
        for k in range(3):
            stats = execution(generic=1, hardware=k, timed_out=1, period=1.0 + k * 1e-9)
            record = chips(b.process(varied(report([runtime(device_cores(9), execution_stats=stats)]), k),
                                     wall_s=1_000.0 + k))[9]
        assert (record["exec_errors_total"], record["exec_timeouts_total"]) == (6, 3)


class TestBadValues:
    @pytest.mark.parametrize("flops", [math.nan, math.inf, 1e300, -5.0])
    def test_one_bad_flops_costs_that_frame_only(self, flops: float) -> None:
        """A NaN, infinite, impossible or negative flops: that device's FLOP left out of that frame; the next
        frame's total continues as if the bad period had not been."""
        b = bridge()
        good = [b.process(varied(busy([0, 1]), 0), wall_s=1_000.0)]
        bad = busy([0, 1])
        for core in bad["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"].values():
            core["flops"] = flops
        poisoned = b.process(varied(bad, 1), wall_s=1_001.0)
        after = b.process(varied(busy([0, 1]), 2), wall_s=1_002.0)
        assert ("fp8_flop_total" in chips(poisoned)[0], chips(poisoned)[1]["fp8_flop_total"]) == (
            False, pytest.approx(8e14))
        assert chips(after)[0]["fp8_flop_total"] == pytest.approx(chips(good[0])[0]["fp8_flop_total"] + 4e14)
        assert sum(b.refusals.counts.values()) >= 1

    def test_a_null_ecc_value_costs_that_value_only(self) -> None:
        """"mem_ecc_corrected": null on device 4: that total left out, every other field and device kept."""
        hw = hw_counters()
        hw["neuron_devices"][4]["mem_ecc_corrected"] = None
        records = chips(bridge().process(report([], hw=hw), wall_s=1_000.0))
        assert ("ecc_corrected_total" in records[4], records[4]["ecc_uncorrected_total"],
                records[5]["ecc_corrected_total"]) == (False, 0, 0)


class TestIdentity:
    def test_a_report_of_another_instance_is_refused(self) -> None:
        """The inventory names i-0a…; a report of i-00… is refused whole and changes nothing."""
        b = bridge(instance_id="i-0a1b2c3d4e5f60718")
        assert (b.process(busy([0]), wall_s=1_000.0), b.seq, b.clock.t_s) == (
            Outcome(refused="instance_mismatch"), 0, None)

    def test_the_right_instance_or_none_said_is_published(self) -> None:
        """The inventory's instance, or a report that cannot say its own, is published."""
        b = bridge(instance_id="i-0011223344556677a")
        unknown = busy([0], instance={"instance_id": "", "error": "metadata service unavailable"})
        assert [b.process(varied(d, k), wall_s=1_000.0 + k).frame is not None
                for k, d in enumerate((busy([0]), unknown))] == [True, True]


class TestEfa:
    def test_ports_come_by_name_and_a_vanished_device_is_absent(self, tmp_path: Path) -> None:
        """Node 2's 16 ports from the tree; rdmap48s0 removed: port 34 present false, port 35 unchanged."""
        root = efa_tree(tmp_path, {name: efa_counters(1_000 * k) for k, name in enumerate(EFA_NAMES)})
        b = bridge()
        first = b.process(busy([0]), wall_s=1_000.0, efa=lambda: read_efa(root))
        for path in sorted((root / "class/infiniband/rdmap48s0").rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (root / "class/infiniband/rdmap48s0").rmdir()
        second = b.process(varied(busy([0]), 1), wall_s=1_001.0, efa=lambda: read_efa(root))
        ports = {p["port"]: p for p in second.frame["efa"]}  # type: ignore[index]
        assert (len(first.frame["efa"]), ports[34], ports[35]["tx_bytes_total"]) == (  # type: ignore[index]
            16, {"port": 34, "present": False}, 3_000)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Return the path of every node of a JSON value (the root is ``()``)."""
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out += paths(child, (*prefix, i))
    return out


def replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    """Return ``document`` with the node at ``path`` replaced by ``value`` (a deep copy)."""
    if not path:
        return value
    out = copy.deepcopy(document)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return out


class TestNeverDies:
    @settings(max_examples=300, deadline=None)
    @given(data=st.data())
    def test_any_part_of_a_report_replaced_by_any_json_is_survived(self, data: st.DataObject) -> None:
        """Any node of a valid report replaced by any JSON value (NaN, 2**70, a string, a list ...): the bridge
        returns a frame the wire accepts (or folds or refuses the report), and the next good report is a frame."""
        document = busy([0, 1])
        targets = paths(document)[1:]  # the root is always an object: the role skips a line that is not
        path = targets[data.draw(st.integers(0, len(targets) - 1), label="node")]
        b = bridge()
        outcome = b.process(replaced(document, path, data.draw(JSON, label="value")), wall_s=1_000.0)
        if outcome.frame is not None:
            assert isinstance(decode_json(json.dumps(outcome.frame, allow_nan=False).encode()), NodeFrame)
        assert chips(b.process(varied(busy([0, 1]), 1), wall_s=1_001.0))[0]["util"] == 0.5
