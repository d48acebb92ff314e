"""Specification of what the EFA driver's own counters and a device's presence make of a port (issue 33,
``core/detect/efa_driver.py`` and ``efa.py``): a device reported gone is ``stale`` at once and its node's other
ports untouched; receive drops and RDMA work-request errors that persist degrade it, one burst does not; a
device present whose keep-alives stop is down, one whose cadence is slower than the samples is not.

The feed is crafted: every port of two UltraServers carrying 5 GB/s each way, sampled every second straight
into the state.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rainierd._types import F64
from rainierd.core.detect._common import reason_names
from rainierd.core.detect.efa import EfaDetector
from rainierd.core.state import FleetState
from rainierd.fleet.topology import build_fleet

PORT = 37  # node 2, port 5
NAMES = ("healthy", "degraded", "down", "stale")
COUNTERS = ("rx_drops_total", "rdma_wr_errors_total", "keep_alive_total")


class PortFeed:
    """Busy EFA ports of two UltraServers, one sample a second (module docstring)."""

    def __init__(self) -> None:
        self.topo = build_fleet(1, 2)
        self.state = FleetState(self.topo)
        self.detector = EfaDetector(self.state)
        n = self.topo.n_efa
        self.bytes = np.zeros(n)
        self.counters = {name: np.zeros(n, np.uint64) for name in COUNTERS}
        self.rng = np.random.default_rng(0)
        self.t = 0
        self.raised: list[tuple[int, int, str, tuple[str, ...]]] = []
        self.cleared: list[tuple[int, int]] = []

    def second(self, *, add: Mapping[str, F64] | None = None, present: F64 | None = None) -> None:
        """Feed one second: 5 GB/s each way, counter increments ``add``, ``present`` (left out by default)."""
        n = self.topo.n_efa
        self.bytes += 5e9 * (1.0 + self.rng.normal(0.0, 0.01, n))
        for name, increment in (add or {}).items():
            self.counters[name] += increment.astype(np.uint64)
        columns: dict[str, np.ndarray] = {"tx_bytes_total": self.bytes.astype(np.uint64),
                                          "rx_bytes_total": self.bytes.astype(np.uint64), **self.counters}
        if present is not None:
            columns["present"] = present.astype(np.uint8)
        table = self.state.efa
        t_s = np.full(n, float(self.t))
        known = np.full(n, sum(table.bit(name) for name in columns), np.uint16)
        if present is not None:  # a device gone reports nothing else
            known[present == 0] = table.bit("present")
        table.apply(np.arange(n, dtype=np.int64), columns, t_s=t_s, rx_s=t_s, known=known)
        self.state.now_s = float(self.t)
        changes = self.detector.update(self.t)
        for port, after in zip(changes.ids.tolist(), changes.after.tolist(), strict=True):
            if after == 0:
                self.cleared.append((self.t, port))
            else:
                reasons = tuple(reason_names(int(self.detector.tracker.reason[port])))
                self.raised.append((self.t, port, NAMES[after], reasons))
        self.t += 1


def one(n: int, value: float, rest: float = 0.0) -> F64:
    """Return ``n`` values of ``rest``, ``PORT``'s ``value``."""
    out = np.full(n, rest)
    out[PORT] = value
    return out


class TestPresence:
    def test_a_device_reported_gone_is_stale_at_once_and_its_nodes_other_ports_untouched(self) -> None:
        """``present`` 0 on one port: that port stale (absent) on that sample, no other port raised; back for
        6 s, it clears; the model prices it as a port down (its node's other ports carry its share)."""
        feed = PortFeed()
        n = feed.topo.n_efa
        for _ in range(40):
            feed.second(present=np.ones(n))
        for _ in range(10):
            feed.second(present=one(n, 0.0, 1.0))
        assert feed.raised == [(40, PORT, "stale", ("absent",))]
        assert feed.detector.path_fraction()[PORT] == feed.detector.failover_fraction
        for _ in range(10):
            feed.second(present=np.ones(n))
        assert [port for _t, port in feed.cleared] == [PORT]


class TestDriverCounters:
    def test_receive_drops_that_persist_degrade_the_port_and_one_burst_does_not(self) -> None:
        """A burst of 5,000 drops in one second raises nothing; 10 drops a second for a minute degrade the port
        (rx_drops) within six samples."""
        feed = PortFeed()
        n = feed.topo.n_efa
        for t in range(100):
            feed.second(add={"rx_drops_total": one(n, 5_000.0)} if t == 40 else None)
        assert feed.raised == []
        for _ in range(60):
            feed.second(add={"rx_drops_total": one(n, 10.0)})
        assert [(port, state, reasons) for _t, port, state, reasons in feed.raised] == [
            (PORT, "degraded", ("rx_drops",))]
        assert feed.raised[0][0] - 100 <= 6

    def test_rdma_work_request_errors_that_persist_degrade_the_port_until_a_minute_without(self) -> None:
        """One error raises nothing; an error every 5 s from 60 s degrades it (rdma_wr_errors) once, held
        between errors; it clears a minute and 5 clean seconds after the last."""
        feed = PortFeed()
        n = feed.topo.n_efa
        for t in range(250):
            error = t == 20 or (60 <= t <= 120 and t % 5 == 0)
            feed.second(add={"rdma_wr_errors_total": one(n, 1.0)} if error else None)
        assert [(port, state, reasons) for _t, port, state, reasons in feed.raised] == [
            (PORT, "degraded", ("rdma_wr_errors",))]
        assert len(feed.cleared) == 1
        assert 120 + 60 <= feed.cleared[0][0] <= 120 + 60 + 8


class TestKeepAlive:
    def test_a_present_device_whose_keep_alives_stop_is_down(self) -> None:
        """Keep-alives every second, then none from 60 s on: the port is down (keep_alive) 10 s later, and
        clears when they come back."""
        feed = PortFeed()
        n = feed.topo.n_efa
        for t in range(120):
            beating = np.ones(n)
            if 60 <= t < 100:
                beating[PORT] = 0.0
            feed.second(add={"keep_alive_total": beating}, present=np.ones(n))
        assert [(t, port, state, reasons) for t, port, state, reasons in feed.raised] == [
            (70, PORT, "down", ("keep_alive",))]
        assert [port for _t, port in feed.cleared] == [PORT]

    def test_a_device_whose_keep_alives_come_slower_than_the_samples_is_not_down(self) -> None:
        """Keep-alives every 30 s (a cadence slower than the samples) for ten minutes: nothing raises."""
        feed = PortFeed()
        n = feed.topo.n_efa
        for t in range(600):
            feed.second(add={"keep_alive_total": np.full(n, float(t % 30 == 7))}, present=np.ones(n))
        assert feed.raised == []

    def test_a_publisher_without_the_counter_judges_nothing(self) -> None:
        """Ports whose samples carry no keep-alive counter raise nothing however long."""
        feed = PortFeed()
        del feed.counters["keep_alive_total"]
        for _ in range(120):
            feed.second()
        assert feed.raised == []
