"""One node's bridge: each neuron-monitor report, with the EFA counters read
beside it, becomes at most one JSON node frame (docs/wire-format.md).
Pure apart from the EFA read it is handed (a callable): the wall time comes
in with the report, so tests drive it line by line.

Per report, in order, every check before any state changes:

1. **Identity.**  A report whose ``instance_info.instance_id`` is not the
   instance the inventory names for this node is refused whole (counted
   ``instance_mismatch``): a bridge started with the wrong ``--node`` must
   not speak for another node.
2. **Fill** a group the report leaves out with its last content, for at
   most two of its periods (``_hold``): left out, it was not due.
3. **Read** (``_report``) and **judge** per device (``_devices``), with
   each metric group judged new or repeated: neuron-monitor writes a
   complete report whenever any group is due (user guide, "Execution
   model"), so a group of a longer period reappears unchanged, and its
   per-period counts must not be counted again.  A group is new when it
   differs from the same group in the previous report; a report identical
   to the previous one as a whole is taken as new throughout (two real
   captures never agree to the nanosecond of their ``period``).
4. **Fold or publish.**  A report whose NeuronCore counters are all
   repeated (another group's period came round) adds its new counts to the
   totals and publishes nothing: the next frame carries them, so every
   frame's time advances by the period of the FLOP it carries.
5. **Time** (``_clock``): the frame's ``t_s`` is the sample clock advanced
   by the period (the NeuronCore counters' group, else the smallest new
   group's), its ``period_s`` that period.
6. **Totals**: FLOP (``flops`` times the group's own period, never times
   the time between reads), HBM and SRAM ECC (apart; per-period counts added up, or
   cumulative counts followed across resets, as ``ecc_counts`` says) and
   execution errors and timeouts, each a monotone total.
7. **EFA** (``_ports``), read only for a frame that is of now: the
   driver's counters are read now, so they go only with a report that did
   not wait in the pipe longer than usual (its lag at most
   ``_efa_tolerance`` above the clock's floor).  A frame of a backlog
   carries no EFA ports, and the next current one carries the counters
   over the whole gap.

What a frame leaves out, the monitor keeps unknown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from rainierd.bridge._clock import SampleClock, Tick
from rainierd.bridge._config import BridgeConfig
from rainierd.bridge._devices import DeviceReading, Devices, device_readings
from rainierd.bridge._hold import GroupHold
from rainierd.bridge._ports import EfaPorts, EfaSnapshot
from rainierd.bridge._report import ECC_FIELDS, Report, instance_id, read_report
from rainierd.bridge._totals import CumulativeTotal, FlopTotal, PeriodTotal
from rainierd.bridge._values import Refusals

ECC_WIRE_FIELDS: Final = {
    "mem_ecc_corrected": "ecc_corrected_total",
    "mem_ecc_uncorrected": "ecc_uncorrected_total",
    "sram_ecc_corrected": "sram_ecc_corrected_total",
    "sram_ecc_uncorrected": "sram_ecc_uncorrected_total",
}
# A frame whose lag is within this share of its period (at most _EFA_TOLERANCE_MAX_S) of the usual is of now.
_EFA_TOLERANCE: Final = 0.1
_EFA_TOLERANCE_MAX_S: Final = 0.25


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one report became."""

    frame: dict[str, Any] | None = None  # the JSON node frame to publish (None: nothing to publish)
    refused: str | None = None  # why the whole report was refused
    folded: bool = False  # its counts wait for the next frame
    tick: Tick | None = None
    period_s: float | None = None


class _DeviceTotals:
    """One device's monotone totals."""

    def __init__(self, ecc_counts: str) -> None:
        self.flop = FlopTotal()
        self.ecc: dict[str, PeriodTotal | CumulativeTotal] = {
            name: CumulativeTotal() if ecc_counts == "cumulative" else PeriodTotal() for name in ECC_FIELDS}
        self.errors = PeriodTotal()
        self.timeouts = PeriodTotal()


def _lead(report: Report) -> list[str]:
    """Return the keys of the groups that time a frame: every readable NeuronCore counters group."""
    return [f"{r.key}/neuroncore_counters" for r in report.runtimes if r.cores is not None]


class NodeBridge:
    """Turns one node's neuron-monitor reports into its frames (see the module docstring)."""

    def __init__(self, *, node: int, publisher: str, config: BridgeConfig) -> None:
        self.node, self.publisher, self.config = node, publisher, config
        self.first_chip = node * config.chips_per_node
        self.clock = SampleClock(max_lag_s=config.max_lag_s, clamp_ratio=config.clamp_ratio)
        self.ports = EfaPorts(first_port=node * config.efa_ports_per_node, config=config)
        self.hold = GroupHold()
        self._totals = [_DeviceTotals(config.ecc_counts) for _ in range(config.chips_per_node)]
        self._previous: Mapping[str, object] | None = None
        self._previous_groups: Mapping[str, object] = {}
        self.seq = 0
        # Counted since start, for the bridge's metrics.
        self.refusals = Refusals()
        self.resets: Counter[str] = Counter()
        self.steps: Counter[str] = Counter()
        self.group_errors: Counter[str] = Counter()
        self.exec_errors: Counter[str] = Counter()
        self.exec_unattributed: Counter[str] = Counter()
        self.exec_timeouts = 0
        self.runtime_errors = 0
        self.runtimes = 0  # in the last report
        self.devices_absent = 0  # reported gone in the last report

    def process(self, document: Mapping[str, object], *, wall_s: float,
                efa: Callable[[], EfaSnapshot] | None = None) -> Outcome:
        """Return what one report (a decoded JSON object read at ``wall_s``) becomes, and take its counts.

        ``efa`` reads the EFA counters (None: the node's ports are not
        reported).  Never raises on the report's content.
        """
        wanted, said = self.config.instance_id, instance_id(document)
        if wanted is not None and said is not None and said != wanted:
            return Outcome(refused="instance_mismatch")
        document = self.hold.fill(document, wall_s=wall_s)
        report = read_report(document, self.config)
        if document == self._previous:
            new = set(report.groups)
        else:
            new = {k for k, group in report.groups.items() if self._previous_groups.get(k) != group}
        self._previous, self._previous_groups = document, report.groups
        devices = device_readings(report, self.config, new.__contains__)
        self._count(report, devices)
        lead = _lead(report)
        publish = any(k in new for k in lead) if lead else bool(new) or not report.groups
        periods = [report.periods[k] for k in (lead if lead else report.groups) if k in new and k in report.periods]
        if lead and not periods:  # NeuronCore counters without a usable period: the smallest other one
            periods = [p for k, p in report.periods.items() if k in new]
        period_s = min(periods) if periods else None
        chips = self._chips(devices)
        if not publish:
            return Outcome(folded=True)
        tick = self.clock.advance(period_s, wall_s=wall_s)
        if tick.step is not None:
            self.steps[tick.step] += 1
        body: dict[str, Any] = {
            "v": 1, "kind": "node", "publisher": self.publisher, "seq": self.seq, "tick": self.seq,
            "t_s": tick.t_s, "node": self.node, "links": [], "efa": [],
            "chips": [c if tick.step is None else {k: v for k, v in c.items() if not k.endswith("_total")}
                      for c in chips],
        }
        body["chips"] = [c for c in body["chips"] if len(c) > 1]
        if period_s is not None:
            body["period_s"] = period_s
        if efa is not None and tick.step is None and tick.excess_s <= self._efa_tolerance(period_s):
            body["efa"] = self.ports.records(efa(), self.refusals)
            self.resets.update(self.ports.resets)
            self.ports.resets.clear()
        self.seq += 1
        return Outcome(frame=body, tick=tick, period_s=period_s)

    @staticmethod
    def _efa_tolerance(period_s: float | None) -> float:
        """Return how much longer than usual a report may have waited and still carry EFA counters read now."""
        return min(_EFA_TOLERANCE * period_s, _EFA_TOLERANCE_MAX_S) if period_s else _EFA_TOLERANCE_MAX_S

    def _count(self, report: Report, devices: Devices) -> None:
        """Take one report's counts into the bridge's own."""
        self.refusals.counts.update(report.refusals.counts)
        self.group_errors.update(report.group_errors)
        self.runtime_errors += report.runtime_errors
        self.runtimes = len(report.runtimes)
        self.exec_errors.update(devices.errors)
        self.exec_unattributed.update(devices.unattributed)
        self.exec_timeouts += devices.timeouts
        self.devices_absent = sum(d.present is False for d in devices.devices)

    def _chips(self, devices: Devices) -> list[dict[str, Any]]:
        """Return each device's chip record, advancing its totals."""
        return [self._chip(d, reading) for d, reading in enumerate(devices.devices)]

    def _chip(self, d: int, reading: DeviceReading) -> dict[str, Any]:
        """Return device ``d``'s chip record (only what is known), advancing its totals."""
        record: dict[str, Any] = {"chip": self.first_chip + d}
        if reading.present is False:
            record["present"] = False
            return record
        totals = self._totals[d]
        if reading.present:
            record["present"] = True
        if reading.util is not None:
            record["util"] = reading.util
        if reading.hbm_bytes is not None:
            record["hbm_used_bytes"] = reading.hbm_bytes
        if reading.flop is not None:
            totals.flop.add(reading.flop)
            if reading.flop_whole:
                record["fp8_flop_total"] = totals.flop.value
        self._ecc(reading, totals, record)
        for count, total, wire in ((reading.exec_errors, totals.errors, "exec_errors_total"),
                                   (reading.exec_timeouts, totals.timeouts, "exec_timeouts_total")):
            if count is None:
                continue
            if total.add(count):
                record[wire] = total.value
            else:
                self.refusals.add(wire.removesuffix("_total"), "too_large")
        if reading.latency_us is not None:
            record["exec_latency_us"] = reading.latency_us
        return record

    def _ecc(self, reading: DeviceReading, totals: _DeviceTotals, record: dict[str, Any]) -> None:
        """Advance a device's ECC totals (per-period counts added, cumulative ones followed) into ``record``."""
        for source, wire in ECC_WIRE_FIELDS.items():
            value, total = reading.ecc.get(source), totals.ecc[source]
            if value is None:
                continue
            if isinstance(total, CumulativeTotal):
                resets = total.resets
                taken = total.observe(value)
                if total.resets > resets:
                    self.resets[source] += 1
            else:
                taken = total.add(value)
            if taken:
                record[wire] = total.value
            else:
                self.refusals.add(source, "too_large")
