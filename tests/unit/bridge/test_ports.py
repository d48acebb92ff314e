"""Specification of the EFA side of the bridge: the driver's sysfs files read
(rainierd/bridge/_efa.py) and turned into port records by device name
(rainierd/bridge/_ports.py): a map frozen once, a vanished device that
port's absence only, counters monotone across resets, physics bounding bytes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from rainierd.bridge import BridgeConfig, EfaDevice, EfaPorts, EfaSnapshot, natural_order, read_efa
from rainierd.bridge._values import Refusals
from tests.bridge_reports import EFA_NAMES, efa_counters, efa_tree

CONFIG = BridgeConfig()
LINE_BYTES_S = CONFIG.hardware.efa_port_bytes_s


def snapshot(read_s: float, **devices: dict[str, int]) -> EfaSnapshot:
    """Return a snapshot of the named devices' counters (state ACTIVE) read at ``read_s``."""
    return EfaSnapshot({name: EfaDevice(counters, "4: ACTIVE") for name, counters in devices.items()}, read_s)


def by_port(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["port"]: r for r in records}


class TestSysfs:
    def test_port_and_device_counters_and_the_state_are_read(self, tmp_path: Path) -> None:
        """Port counters from ports/1/hw_counters, keep_alive_rcvd from the device's hw_counters, the state."""
        root = efa_tree(tmp_path, {"rdmap16s0": efa_counters(7, rx_drops=2, keep_alive_rcvd=40)})
        device = read_efa(root, clock=lambda: 5.0).devices["rdmap16s0"]
        assert device == EfaDevice(efa_counters(7, rx_drops=2, keep_alive_rcvd=40), "4: ACTIVE")

    def test_a_missing_counter_is_absent_and_a_garbled_one_refused(self, tmp_path: Path) -> None:
        """An older driver without rx_drops: absent; a file that holds no integer: 'wrong_type'."""
        root = efa_tree(tmp_path, {"rdmap16s0": {"tx_bytes": 1}})
        (root / "class/infiniband/rdmap16s0/ports/1/hw_counters/rx_bytes").write_text("n/a\n")
        assert read_efa(root).devices["rdmap16s0"].counters == {"tx_bytes": 1, "rx_bytes": "wrong_type"}

    def test_only_efa_devices_unless_named(self, tmp_path: Path) -> None:
        """Without a map, devices named like the EFA driver's; with one, exactly those named (that exist)."""
        root = efa_tree(tmp_path, {"rdmap16s0": {}, "mlx5_0": {}, "efa_1": {}})
        assert (sorted(read_efa(root).devices), sorted(read_efa(root, names=["mlx5_0", "gone"]).devices)) == (
            ["efa_1", "rdmap16s0"], ["mlx5_0"])

    def test_no_infiniband_directory_is_no_listing(self, tmp_path: Path) -> None:
        """No EFA driver (or sysfs not mounted): the snapshot says it could not list, not that devices are gone."""
        assert read_efa(tmp_path / "nothing", clock=lambda: 1.0) == EfaSnapshot({}, 1.0, listed=False)


class TestPortMap:
    def test_natural_order(self) -> None:
        """rdmap96s0 before rdmap112s0: numbers compared as numbers."""
        assert natural_order(["rdmap112s0", "rdmap96s0", "rdmap16s0"]) == ["rdmap16s0", "rdmap96s0", "rdmap112s0"]

    def test_ports_are_numbered_from_the_node(self) -> None:
        """Node 6's port k is 6 x 16 + k, by the names' natural order at start."""
        ports = EfaPorts(first_port=96, config=CONFIG)
        records = ports.records(snapshot(0.0, **{n: efa_counters() for n in reversed(EFA_NAMES)}), Refusals())
        assert ([r["port"] for r in records], ports.names) == (list(range(96, 112)), EFA_NAMES)

    def test_a_vanished_device_is_its_port_absent_and_no_other_moves(self) -> None:
        """rdmap32s0 gone: port 1 is present false; port 2 keeps rdmap48s0's counters, not its neighbour's."""
        ports = EfaPorts(first_port=0, config=CONFIG)
        ports.records(snapshot(0.0, **{n: efa_counters(100 * k) for k, n in enumerate(EFA_NAMES)}), Refusals())
        later = {n: efa_counters(100 * k + 1) for k, n in enumerate(EFA_NAMES) if n != "rdmap32s0"}
        records = by_port(ports.records(snapshot(1.0, **later), Refusals()))
        assert (records[1], records[2]["tx_bytes_total"], (ports.seen, ports.missing)) == (
            {"port": 1, "present": False}, 201, (15, 1))

    def test_a_renamed_device_is_unmapped(self) -> None:
        """A device that comes back under a new name gets no port: its old port is absent, the new name counted."""
        ports = EfaPorts(first_port=0, config=CONFIG)
        ports.records(snapshot(0.0, rdmap16s0=efa_counters(), rdmap32s0=efa_counters()), Refusals())
        records = ports.records(snapshot(1.0, rdmap16s0=efa_counters(), rdmap33s0=efa_counters()), Refusals())
        assert (records[1], ports.unmapped) == ({"port": 1, "present": False}, 1)

    def test_the_inventory_order_wins(self) -> None:
        """efa_devices from the inventory: that order, and a listed device never seen is absent."""
        ports = EfaPorts(first_port=0, config=BridgeConfig(efa_devices=("rdmap48s0", "rdmap16s0", "rdmap999s0")))
        records = ports.records(snapshot(0.0, rdmap16s0=efa_counters(1), rdmap48s0=efa_counters(2)), Refusals())
        assert [(r["port"], r.get("tx_bytes_total"), r["present"]) for r in records] == [
            (0, 2, True), (1, 1, True), (2, None, False)]


class TestCounters:
    def test_every_wire_counter_from_the_driver(self) -> None:
        """The wire's fields, RDMA read and write errors summed, keep-alive from the device, the state ACTIVE."""
        ports = EfaPorts(first_port=0, config=CONFIG)
        counters = efa_counters(10, rx_bytes=20, retrans_bytes=3, retrans_pkts=4, retrans_timeout_events=5,
                                unresponsive_remote_events=6, impaired_remote_conn_events=7, rx_drops=8,
                                rdma_read_wr_err=9, rdma_write_wr_err=1, keep_alive_rcvd=11)
        assert ports.records(snapshot(0.0, rdmap16s0=counters), Refusals()) == [{
            "port": 0, "tx_bytes_total": 10, "rx_bytes_total": 20, "retrans_bytes_total": 3, "retrans_pkts_total": 4,
            "retrans_timeout_events_total": 5, "unresponsive_remote_events_total": 6,
            "impaired_remote_conn_events_total": 7, "rx_drops_total": 8, "rdma_wr_errors_total": 10,
            "keep_alive_total": 11, "port_active": True, "present": True}]

    def test_a_counter_going_backwards_is_a_reset(self) -> None:
        """rx_drops 50 then 3 (the device reset): the total goes 50, 53, and the reset is counted."""
        ports = EfaPorts(first_port=0, config=CONFIG)
        totals = [ports.records(snapshot(t, rdmap16s0=efa_counters(rx_drops=v)), Refusals())[0]["rx_drops_total"]
                  for t, v in ((0.0, 50), (1.0, 3), (2.0, 4))]
        assert (totals, dict(ports.resets)) == ([50, 53, 54], {"rx_drops": 1})

    def test_bytes_faster_than_the_line_rate_are_refused(self) -> None:
        """tx_bytes growing by twice the line rate in 1 s: refused (counted), the total keeps its old value, and
        the next reading counts from the new base."""
        ports, refusals = EfaPorts(first_port=0, config=CONFIG), Refusals()
        jump = int(2 * LINE_BYTES_S)
        records = [ports.records(snapshot(t, rdmap16s0=efa_counters(v)), refusals)[0].get("tx_bytes_total")
                   for t, v in ((0.0, 1_000), (1.0, 1_000 + jump), (2.0, 1_000 + jump + 500))]
        assert (records, refusals.counts) == ([1_000, None, 1_500], {("tx_bytes", "above_line_rate"): 1})

    def test_a_port_not_active_and_a_garbled_state(self) -> None:
        """'1: DOWN' is not active; a state the driver never writes is refused."""
        ports, refusals = EfaPorts(first_port=0, config=CONFIG), Refusals()
        down = EfaSnapshot({"rdmap16s0": EfaDevice({}, "1: DOWN"), "rdmap32s0": EfaDevice({}, "on fire")}, 0.0)
        records = ports.records(down, refusals)
        assert ([r.get("port_active") for r in records], refusals.counts) == (
            [False, None], {("state", "wrong_type"): 1})

    def test_an_unlistable_tree_reports_no_ports(self, tmp_path: Path) -> None:
        """Once mapped, a sysfs that cannot be listed leaves every port unknown (no records), not absent."""
        root = efa_tree(tmp_path / "sys", {"rdmap16s0": efa_counters()})
        ports = EfaPorts(first_port=0, config=CONFIG)
        ports.records(read_efa(root), Refusals())
        shutil.rmtree(root / "class")
        assert ports.records(read_efa(root), Refusals()) == []
