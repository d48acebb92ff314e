"""The bridge against every shape and bad value of the documentation-built
neuron-monitor generator (harness/neuron_monitor.py ``Variant``; none of it
derived from the bridge or a captured sample): for each, a run of 1 s reports
with the variant over three of them, through the bridge's own line reader and
report handling (``NeuronMonitorBridge.read_input``, the time it reads each
line taken from the generator).  The bridge keeps running; what the variant
spoils is left out of the frame (never a 0 in its place) and, for a bad
value, refused and counted by field and reason; the rest of the frame is
kept; and no later frame is lost: once the variant is over every frame is
whole and every chip's FLOP rate is the truth's."""

from __future__ import annotations

import asyncio
import json
import math
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from harness.neuron_monitor import NeuronMonitor, Sample, Schedule, Variant, runtime_per_core
from rainierd.bridge import BridgeConfig, NodeBridge
from rainierd.bridge import run as bridge_run
from rainierd.bridge.run import NeuronMonitorBridge
from rainierd.wire import NodeFrame, decode_json

T0 = 1.7e9
START_S, STOP_S, RUN_S = 6.0, 9.0, 20.0  # the variant over reports 6-8 of 20
DEVICE = 5  # the device a per-device variant spoils
CHIPS = 16


@dataclass
class Run:
    """What the bridge made of one generated stream."""

    samples: list[Sample]
    frames: list[dict[str, Any]]
    bridge: NeuronMonitorBridge
    source: dict[int, int] = field(default_factory=dict)  # each frame's seq: the sample whose line published it
    windowed: list[dict[str, Any]] = field(default_factory=list)  # frames of reports the variant touched

    def pairs(self) -> list[tuple[dict[str, Any], Sample]]:
        """Return each frame with the report whose line published it."""
        return [(f, self.samples[self.source[f["seq"]]]) for f in self.frames]

    def refused(self, name: str, reason: str) -> int:
        """Return how many values of ``name`` the bridge refused for ``reason``."""
        return self.bridge.node.refusals.counts[name, reason]


def bridged(variant: Variant | None, monkeypatch: pytest.MonkeyPatch) -> Run:
    """Run 20 s of 1 s reports (64 runtimes, one a logical core) with ``variant`` through a node's bridge."""
    monitor = NeuronMonitor(runtimes=runtime_per_core(lnc=2), schedule=Schedule(period_s=1.0), seed=7,
                            variants=[variant] if variant else [])
    samples = monitor.until(RUN_S)
    now = [T0]
    clock = types.SimpleNamespace(time=lambda: now[0], monotonic=lambda: now[0])
    monkeypatch.setattr(bridge_run, "time", clock)
    chunks = [(T0 + s.write_at_s, s.wire()) for s in samples]
    published: list[int] = []  # frames published before each sample's lines were read

    async def read(_n: int) -> bytes:
        # Called once the lines of the last chunk are handled (the line reader yields a chunk's lines first).
        published.append(bridge.node.seq)
        if not chunks:
            return b""
        now[0], chunk = chunks.pop(0)
        return chunk

    bridge = NeuronMonitorBridge(NodeBridge(node=0, publisher="n0", config=BridgeConfig()), efa_root=None,
                                 topic="t", qos=0)
    frames: list[dict[str, Any]] = []

    async def go() -> None:
        async def consume() -> None:
            while True:
                frames.append(json.loads(await bridge.outbox.get()))
                bridge.outbox.task_done()

        consumer = asyncio.create_task(consume())
        await bridge.read_input(read, asyncio.Event(), drain_s=5.0)
        consumer.cancel()

    asyncio.run(go())
    run = Run(samples, frames, bridge)
    run.source = {seq: k for k in range(len(samples)) for seq in range(published[k], published[k + 1])}
    run.windowed = [f for f, s in run.pairs() if START_S <= s.captured_at_s < STOP_S]
    return run


def assert_whole_after(run: Run) -> None:
    """Every report became a decodable frame (one whose NeuronCore counters were held folds into the next);
    after the variant (and its held groups) every frame is whole and each chip's FLOP rate between frames is the
    truth's."""
    assert len(run.samples) - (STOP_S - START_S) <= len(run.frames) <= len(run.samples)
    for frame in run.frames:
        assert isinstance(decode_json(json.dumps(frame, allow_nan=False).encode()), NodeFrame)
    later = [(f, s) for f, s in run.pairs() if s.captured_at_s >= STOP_S + 4.0]
    assert len(later) >= 6
    previous: dict[int, tuple[float, float]] = {}
    for frame, sample in later:
        chips = {c["chip"]: c for c in frame["chips"]}
        assert sorted(chips) == list(range(CHIPS))
        for d, chip in chips.items():
            assert {"util", "fp8_flop_total", "hbm_used_bytes", "ecc_corrected_total"} <= set(chip), (d, chip)
            assert sample.truth.cores is not None
            if d in previous:
                rate = (chip["fp8_flop_total"] - previous[d][1]) / (frame["t_s"] - previous[d][0])
                assert rate == pytest.approx(sample.truth.cores.flop_rate_s[d], rel=1e-6)
            previous[d] = (frame["t_s"], chip["fp8_flop_total"])


def windowed(kind: Any, **kw: Any) -> Variant:
    """Return the variant ``kind`` over the reports captured from START_S to STOP_S."""
    return Variant(kind=kind, start_s=START_S, stop_s=STOP_S, **kw)


def chip(frame: dict[str, Any], d: int) -> dict[str, Any]:
    return next(c for c in frame["chips"] if c["chip"] == d)


# Each variant: how it is made, and what the frames of the reports it touched must (not) say.
SHAPES: dict[str, tuple[Variant, str]] = {
    "counters group missing": (windowed("group_missing", group="neuroncore_counters"), "util"),
    "counters group null": (windowed("group_null", group="neuroncore_counters"), "util"),
    "counters group errored, zeroed": (
        windowed("group_error_zeroed", group="neuroncore_counters"), "util"),
    "counters group errored, absent": (
        windowed("group_error_absent", group="neuroncore_counters"), "util"),
    "ECC group errored, zeroed": (
        windowed("group_error_zeroed", group="neuron_hw_counters"), "ecc_corrected_total"),
    "memory group null": (windowed("group_null", group="memory_used"), "hbm_used_bytes"),
    "a runtime errored": (windowed("runtime_error", pid=20000 + 4 * DEVICE), "util"),
    "a runtime errored without a report": (
        windowed("runtime_error_no_report", pid=20000 + 4 * DEVICE), "util"),
    "latency null": (windowed("latency_null"), "exec_latency_us"),
    "no flops": (windowed("no_flops"), "fp8_flop_total"),
    "no flops on one device": (windowed("no_flops", device=DEVICE), "fp8_flop_total"),
    "device index missing": (windowed("missing_device_index", device=DEVICE), "ecc_corrected_total"),
    "ECC value null": (windowed("null_ecc", device=DEVICE), "ecc_corrected_total"),
}


class TestShapes:
    @pytest.mark.parametrize("case", list(SHAPES))
    def test_a_spoilt_group_is_unknown_never_zero_and_nothing_after_it_is_lost(
        self, case: str, monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """What the variant spoils is absent from its frames for the spoilt device(s), never 0; the other
        devices keep it where the variant is per device; every later frame is whole."""
        variant, spoilt = SHAPES[case]
        run = bridged(variant, monkeypatch)
        per_device = variant.device is not None or variant.pid is not None
        touched = [DEVICE] if per_device else list(range(CHIPS))
        for frame in run.windowed[1:]:  # a held group may stand in for one report (up to 2 periods + 1 s)
            for d in touched:
                assert chip(frame, d).get(spoilt) is None, (d, frame)
            if per_device:
                assert spoilt in chip(frame, (DEVICE + 1) % CHIPS)
        assert_whole_after(run)

    @pytest.mark.parametrize("kind", ["hardware_info_null", "hardware_info_error", "runtime_data_empty",
                                      "runtime_data_null", "runtime_data_object", "runtime_data_non_object"])
    def test_a_report_of_another_documented_shape_is_read_and_nothing_after_it_is_lost(
        self, kind: str, monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Hardware info null or errored, the runtime list empty, null, an object or holding a non-object: every
        report is a frame and every later frame is whole."""
        assert_whole_after(bridged(windowed(kind), monkeypatch))


# Bad values: (field set, value, the refusal's (field, reason), the chip field left out for DEVICE).
BAD: dict[str, tuple[str, Any, tuple[str, str], str]] = {
    "flops NaN": ("flops", math.nan, ("flops", "non_finite"), "fp8_flop_total"),
    "flops Infinity": ("flops", math.inf, ("flops", "non_finite"), "fp8_flop_total"),
    "flops negative": ("flops", -1.0e12, ("flops", "negative"), "fp8_flop_total"),
    "flops 1e300": ("flops", 1e300, ("flops", "above_peak"), "fp8_flop_total"),
    "flops a string": ("flops", "12", ("flops", "wrong_type"), "fp8_flop_total"),
    "utilisation NaN": ("neuroncore_utilization", math.nan, ("neuroncore_utilization", "non_finite"), "util"),
    "utilisation 250 %": ("neuroncore_utilization", 250.0, ("neuroncore_utilization", "out_of_range"), "util"),
    "ECC past 2**53": ("mem_ecc_corrected", 2**53 + 1, ("mem_ecc_corrected", "too_large"), "ecc_corrected_total"),
    "ECC negative": ("mem_ecc_uncorrected", -3, ("mem_ecc_uncorrected", "negative"), "ecc_uncorrected_total"),
}


class TestBadValues:
    @pytest.mark.parametrize("case", list(BAD))
    def test_a_bad_value_is_refused_counted_and_costs_only_itself(
        self, case: str, monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The value is refused and counted by field and reason; its chip's field is absent in those frames, the
        other chips keep theirs; nothing after it is lost (no NaN or 1e300 sticks)."""
        name, value, refusal, spoilt = BAD[case]
        run = bridged(windowed("value", device=DEVICE, field=name, value=value), monkeypatch)
        assert len(run.windowed) == 3
        assert run.refused(*refusal) >= len(run.windowed)
        for frame in run.windowed:
            assert spoilt not in chip(frame, DEVICE)
            assert spoilt in chip(frame, (DEVICE + 1) % CHIPS)
        assert_whole_after(run)


class TestLines:
    @pytest.mark.parametrize(("kind", "reason"), [("oversize_line", "oversize"), ("not_json", "not_json"),
                                                  ("json_not_object", "not_object")])
    def test_a_line_that_is_no_report_is_skipped_and_counted(
        self, kind: str, reason: str, monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A line over 16 MiB, one not JSON or a JSON value not an object is skipped and counted by reason; the
        report after it is read; nothing is lost."""
        run = bridged(windowed(kind), monkeypatch)
        assert run.bridge.skipped == {reason: 3}
        assert run.bridge.reports == len(run.samples)
        assert_whole_after(run)

    def test_a_clean_stream_refuses_and_skips_nothing(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The yardstick's own control: no variant, nothing refused or skipped, every frame whole."""
        run = bridged(None, monkeypatch)
        assert (dict(run.bridge.skipped), +run.bridge.node.refusals.counts) == ({}, {})
        assert_whole_after(run)
