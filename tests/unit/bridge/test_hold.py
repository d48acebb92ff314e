"""Specification of holding the groups a report leaves out (rainierd/bridge/_hold.py):
a group left out is filled with its last content for at most two of its
periods and a second, never one that is null or errored, and a runtime list
is held only in a stream that leaves groups out."""

from __future__ import annotations

import copy
from typing import Any

from rainierd.bridge._hold import GroupHold
from tests.bridge_reports import busy, hw_counters, report


def without(document: dict[str, Any], *names: str) -> dict[str, Any]:
    """Return ``document`` with the system groups ``names`` left out."""
    out = copy.deepcopy(document)
    for name in names:
        del out["system_data"][name]
    return out


class TestGroupHold:
    def test_a_group_left_out_is_filled_with_its_last_content(self) -> None:
        """neuron_hw_counters (period 2 s) left out of the next report is its last content again, counted."""
        hold, first = GroupHold(), report([], hw=hw_counters({3: {"mem_ecc_corrected": 1}}, period=2.0))
        hold.fill(first, wall_s=100.0)
        filled = hold.fill(without(first, "neuron_hw_counters"), wall_s=101.0)
        assert (filled["system_data"]["neuron_hw_counters"], hold.filled) == (
            first["system_data"]["neuron_hw_counters"], 1)

    def test_the_hold_ends_after_two_periods_and_a_second(self) -> None:
        """Seen at 100 s with a 2 s period: filled at 105 s, not at 105.5 s."""
        hold, first = GroupHold(), report([], hw=hw_counters(period=2.0))
        hold.fill(first, wall_s=100.0)
        gone = without(first, "neuron_hw_counters")
        assert ["neuron_hw_counters" in hold.fill(gone, wall_s=t)["system_data"] for t in (105.0, 105.5)] == [
            True, False]

    def test_null_or_errored_is_never_filled(self) -> None:
        """A group that is null, or carries an error, says so: it is not replaced by its last content."""
        hold, first = GroupHold(), report([])
        hold.fill(first, wall_s=100.0)
        nulled = copy.deepcopy(first)
        nulled["system_data"]["neuron_hw_counters"] = None
        errored = copy.deepcopy(first)
        errored["system_data"]["neuron_hw_counters"] = hw_counters(error="driver query failed")
        assert [hold.fill(d, wall_s=100.5)["system_data"]["neuron_hw_counters"] for d in (nulled, errored)] == [
            None, errored["system_data"]["neuron_hw_counters"]]

    def test_runtime_groups_are_held_per_runtime(self) -> None:
        """A runtime whose report leaves out its NeuronCore counters gets its own last ones back."""
        hold, first = GroupHold(), busy([0, 1])
        hold.fill(first, wall_s=100.0)
        second = copy.deepcopy(first)
        del second["neuron_runtime_data"][1]["report"]["neuroncore_counters"]
        filled = hold.fill(second, wall_s=100.9)
        assert filled["neuron_runtime_data"][1]["report"]["neuroncore_counters"] == \
            first["neuron_runtime_data"][1]["report"]["neuroncore_counters"]

    def test_an_empty_runtime_list_is_no_runtime_in_a_stream_that_repeats(self) -> None:
        """Without a group ever left out, [] is a node running nothing, at once."""
        hold = GroupHold()
        hold.fill(busy([0]), wall_s=100.0)
        assert hold.fill(report([]), wall_s=101.0)["neuron_runtime_data"] == []

    def test_an_empty_runtime_list_is_held_in_a_stream_that_leaves_groups_out(self) -> None:
        """Once groups have been left out, [] in a report of other groups keeps the last runtimes for a while."""
        hold, first = GroupHold(), busy([0])
        hold.fill(first, wall_s=100.0)
        only_hw = without(report([]), "vcpu_usage", "memory_info")
        assert hold.fill(only_hw, wall_s=100.5)["neuron_runtime_data"] == first["neuron_runtime_data"]
        assert hold.fill(only_hw, wall_s=104.0)["neuron_runtime_data"] == []
