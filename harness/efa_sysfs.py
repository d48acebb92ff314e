"""The EFA driver's sysfs counters of a trn2.48xlarge, as files under a root a
test chooses (standing for /sys/class/infiniband), with the ground truth next to
them: the yardstick for a bridge that reads EFA devices by name.  The counter
model (``EfaNode``) is pure numpy and deterministic from a seed and the times
the caller passes; ``EfaSysfsTree`` writes it so a concurrent reader never sees
a half-written file or a half-built device.

Sources (the only ones):

- Counter names: the EFA driver in github.com/amzn/amzn-drivers at commit 64788ef7 (2026-05-11),
  kernel/linux/efa/src/efa_verbs.c: device counters ``EFA_DEFINE_DEVICE_STATS`` lines 54-66 (submitted_cmds,
  completed_cmds, cmds_err, no_completion_cmds, keep_alive_rcvd, alloc_pd_err, create_qp_err, create_cq_err,
  reg_mr_err, alloc_ucontext_err, create_ah_err, mmap_err) and, only in kernel-verbs builds, lines 68-72
  (alloc_mr_err, get_dma_mr_err); port counters ``EFA_DEFINE_PORT_STATS`` lines 74-96 (tx_bytes ...
  impaired_remote_conn_events).  The same names are in the upstream kernel's
  drivers/infiniband/hw/efa/efa_verbs.c (the patches adding the RDMA-write and network counters name them
  identically).  Device counters are filled from the driver's own atomics (lines 3649-3675), port counters
  by five get-stats admin commands per refresh (lines 3677-3751), which is why submitted_cmds/completed_cmds
  rise by 5 per refresh here.
- Layout and text: the kernel's drivers/infiniband/core/sysfs.c (torvalds/linux, commit 0147ebcf as stored):
  ``setup_hw_stats`` makes a ``hw_counters`` group holding one file per counter plus ``lifespan``, under the
  device for port 0 and under ``ports/<n>`` for each port; ``print_hw_stat`` writes ``"%llu\\n"``;
  ``state_show`` writes ``"%d: %s\\n"`` (``4: ACTIVE``) and ``phys_state_show`` ``5: LinkUp``.  The EFA driver
  has one port, numbered 1 (efa_verbs.c:503, 1573) and reports it ACTIVE and LinkUp unconditionally
  (efa_verbs.c:454-455): the port state is weak evidence, so it stays ``4: ACTIVE`` unless a test sets it.
- Counters are cumulative since the driver loaded (the atomics above start at zero when the device is
  probed); ``EfaNode(uptime_s=...)`` says how long before the first write that was.
- keep_alive_rcvd counts keep-alive events the device sends on its asynchronous event queue
  (efa_main.c:87-92; kernel/linux/efa/README:159-166).  The EFA sources do not state their cadence; ENA, the
  sibling device, documents "a Keep-Alive event is delivered by the device every second"
  (kernel/linux/ena/README.rst:397-398).  Here it is ``EfaTraffic.keep_alive_period_s``, default 1 s.

Where the sources are silent, a parameter: the number of EFA devices (16 by default; the Neuron docs give 16
for trn1n.32xlarge, frameworks/torch/torch-neuronx/setup-trn1-multi-node-execution.rst:15, and a trn2.48xlarge
node's EFAv3 bandwidth, 3,200 Gbps, about-neuron/arch/neuron-hardware/trn2-arch.rst:103-104, but not its device
count); device names (on EC2 they follow the PCI address, ``rdmap<bus>s0``, named by userspace policy, not the
driver: ``default_device_names`` gives 16 such names whose bus numbers do not sort the same as text and as
numbers); traffic, packet size, work-request size and error rates (``EfaTraffic``, this generator's model).

Use::

    tree = EfaSysfsTree(tmp_path / "infiniband", EfaNode(seed=3, faults=[EfaDegraded(device=5, start_s=60)]))
    truth = tree.step(1.0)                    # counters at t = 1 s, on disk
    tree.node.remove(2); tree.write()         # rdmap.. of device 2 disappears at once
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEVICE_COUNTERS",
    "KVERBS_DEVICE_COUNTERS",
    "PHYS_STATE_LINK_UP",
    "PORT_COUNTERS",
    "PORT_STATE_ACTIVE",
    "EfaDegraded",
    "EfaFault",
    "EfaNode",
    "EfaSysfsTree",
    "EfaTraffic",
    "EfaTruth",
    "EfaVanish",
    "default_device_names",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
Bools = npt.NDArray[np.bool_]

DEVICE_COUNTERS: Final = (  # efa_verbs.c:54-66
    "submitted_cmds", "completed_cmds", "cmds_err", "no_completion_cmds", "keep_alive_rcvd", "alloc_pd_err",
    "create_qp_err", "create_cq_err", "reg_mr_err", "alloc_ucontext_err", "create_ah_err", "mmap_err")
KVERBS_DEVICE_COUNTERS: Final = ("alloc_mr_err", "get_dma_mr_err")  # efa_verbs.c:68-72
PORT_COUNTERS: Final = (  # efa_verbs.c:74-96
    "tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes", "send_wrs", "recv_bytes", "recv_wrs",
    "rdma_read_wrs", "rdma_read_bytes", "rdma_read_wr_err", "rdma_read_resp_bytes", "rdma_write_wrs",
    "rdma_write_bytes", "rdma_write_wr_err", "rdma_write_recv_bytes", "retrans_bytes", "retrans_pkts",
    "retrans_timeout_events", "unresponsive_remote_events", "impaired_remote_conn_events")
PORT_STATE_ACTIVE: Final = "4: ACTIVE"  # efa_verbs.c:454 through sysfs.c state_show
PHYS_STATE_LINK_UP: Final = "5: LinkUp"  # efa_verbs.c:455 through sysfs.c phys_state_show
LIFESPAN_MS: Final = 10  # RDMA_HW_STATS_DEFAULT_LIFESPAN, shown by sysfs.c show_stats_lifespan
ADMIN_COMMANDS_PER_REFRESH: Final = 5  # efa_verbs.c:3689-3741: basic, messages, RDMA read, RDMA write, network
_P = {name: i for i, name in enumerate(PORT_COUNTERS)}
_D = {name: i for i, name in enumerate((*DEVICE_COUNTERS, *KVERBS_DEVICE_COUNTERS))}
_EVENT_COUNTERS: Final = ("retrans_timeout_events", "unresponsive_remote_events", "impaired_remote_conn_events",
                          "rdma_read_wr_err", "rdma_write_wr_err")
_RARE: Final = [_P[name] for name in ("retrans_pkts", "rx_drops", *_EVENT_COUNTERS)]
_PCI_BUSES: Final = (16, 17, 18, 19, 43, 44, 45, 46, 70, 71, 72, 73, 97, 98, 99, 100)


def default_device_names(devices: int = 16) -> tuple[str, ...]:
    """EC2-style EFA device names ``rdmap<bus>s0`` for ``devices`` devices (at most 16): bus numbers of two and
    three digits, so sorting the names as text and by number disagree."""
    if not 0 < devices <= len(_PCI_BUSES):
        raise ValueError(f"default names cover 1-{len(_PCI_BUSES)} devices, not {devices}")
    return tuple(f"rdmap{bus}s0" for bus in _PCI_BUSES[:devices])


@dataclass(frozen=True, kw_only=True)
class EfaTraffic:
    """A healthy device's traffic (this generator's model): bytes per second each way with a relative normal
    ``noise``; packets of ``packet_bytes``; RDMA reads and writes take the given shares of the bytes (the rest
    is send/receive), ``wr_bytes`` per work request; ``retrans_ratio`` retransmitted packets per packet sent
    and ``rx_drop_ratio`` drops per packet received; a keep-alive event every ``keep_alive_period_s``."""

    tx_bytes_s: float = 10e9
    rx_bytes_s: float = 10e9
    noise: float = 0.02
    packet_bytes: int = 8192
    rdma_read_share: float = 0.3
    rdma_write_share: float = 0.5
    wr_bytes: int = 2**20
    retrans_ratio: float = 1e-5
    rx_drop_ratio: float = 1e-7
    keep_alive_period_s: float = 1.0


@dataclass(frozen=True, kw_only=True)
class EfaDegraded:
    """A degraded port: ``bytes_factor`` of its bytes, ``retrans_factor`` times the retransmit ratio, and
    retransmit timeouts, unresponsive- and impaired-remote events and RDMA work-request errors at
    ``event_rate_s`` each per second."""

    device: int
    start_s: float
    stop_s: float = math.inf
    bytes_factor: float = 0.3
    retrans_factor: float = 50.0
    event_rate_s: float = 0.5


@dataclass(frozen=True, kw_only=True)
class EfaVanish:
    """The device disappears at ``start_s`` (its directory is removed at the next write); at ``stop_s`` it comes
    back with counters restarted, as after a driver reload."""

    device: int
    start_s: float
    stop_s: float = math.inf


EfaFault = EfaDegraded | EfaVanish


@dataclass(frozen=True, eq=False)
class EfaTruth:
    """The node's EFA state after ``EfaNode.advance(t_s)``: each device's current name (None once removed),
    presence, the cumulative counters as written (a vanished device keeps its last values), the true
    increments over the interval just simulated (bytes really moved, whatever resets did to the counters),
    the true transmit rate, and which devices were degraded or had keep-alive frozen."""

    t_s: float
    interval_s: float
    names: tuple[str | None, ...]
    present: Bools
    port: Mapping[str, U64]
    device: Mapping[str, U64]
    delta: Mapping[str, I64]
    tx_bytes_s: F64
    degraded: Bools
    keep_alive_frozen: Bools


class EfaNode:
    """The counters of a node's EFA devices (module docstring), indexed by device 0..devices-1.  Time only moves
    through ``advance``; manual changes (``remove``, ``rename``, ``reset``, ``freeze_keep_alive``, ``restore``,
    ``set_port_state``) act at the last advanced time."""

    def __init__(self, *, devices: int = 16, names: Sequence[str] | None = None, traffic: EfaTraffic | None = None,
                 faults: Sequence[EfaFault] = (), seed: int = 0, start_s: float = 0.0, uptime_s: float = 3600.0,
                 kverbs_device_stats: bool = False) -> None:
        self.traffic = traffic or EfaTraffic()
        self.faults = tuple(faults)
        self.device_names = tuple(names) if names is not None else default_device_names(devices)
        if len(self.device_names) != devices or len(set(self.device_names)) != devices:
            raise ValueError(f"need {devices} distinct device names, got {self.device_names!r}")
        for fault in self.faults:
            if not 0 <= fault.device < devices:
                raise ValueError(f"{type(fault).__name__}: EFA device {fault.device} is not on the node")
        self.devices = devices
        self.device_counter_names = (*DEVICE_COUNTERS, *(KVERBS_DEVICE_COUNTERS if kverbs_device_stats else ()))
        self.names: list[str | None] = list(self.device_names)
        self.port_state = [PORT_STATE_ACTIVE] * devices
        self._rng = np.random.default_rng([seed, 7])
        self._t = float(start_s)
        self._port = np.zeros((devices, len(PORT_COUNTERS)), np.uint64)
        self._device = np.zeros((devices, len(_D)), np.uint64)
        self._manual_gone = np.zeros(devices, bool)
        self._fault_gone = np.zeros(devices, bool)
        self._ka_base = np.zeros(devices, np.int64)
        self._ka_anchor_s = np.full(devices, start_s - uptime_s)
        self._ka_frozen = np.zeros(devices, bool)
        # The driver loaded uptime_s ago: counters start at what a healthy device accumulates in that time.
        if uptime_s > 0:
            ones = np.ones(devices)
            loaded = np.round(self._increments(uptime_s, ones, ones, np.zeros(devices), np.ones((2, devices))))
            loaded[:, _P["retrans_bytes"]] = loaded[:, _P["retrans_pkts"]] * self.traffic.packet_bytes
            self._port += loaded.astype(np.uint64)
            self._device[:, [_D["submitted_cmds"], _D["completed_cmds"]]] = 100

    @property
    def t_s(self) -> float:
        """The last advanced time."""
        return self._t

    @property
    def present(self) -> Bools:
        """Devices the driver lists now."""
        return ~(self._manual_gone | self._fault_gone)

    def port_counters(self, device: int) -> dict[str, int]:
        """The device's port-1 counters as the driver reports them now."""
        return {name: int(self._port[device, i]) for i, name in enumerate(PORT_COUNTERS)}

    def device_counters(self, device: int) -> dict[str, int]:
        """The device-level counters as the driver reports them now."""
        values = self._device[device].copy()
        values[_D["keep_alive_rcvd"]] = self._keep_alive(device, self._t)
        return {name: int(values[_D[name]]) for name in self.device_counter_names}

    # -- manual changes --

    def remove(self, device: int) -> None:
        """The device disappears (its directory goes at the next write) until ``restore``."""
        self._manual_gone[device] = True

    def restore(self, device: int) -> None:
        """A removed device comes back, counters restarted (a driver reload)."""
        self._manual_gone[device] = False
        self.reset(device)

    def rename(self, device: int, name: str) -> None:
        """The device takes a new name (its directory is renamed at the next write)."""
        if name in self.names:
            raise ValueError(f"an EFA device is already named {name!r}")
        self.names[device] = name

    def reset(self, device: int) -> None:
        """Every counter of the device restarts from zero (a driver reload), keep-alive from now."""
        self._reload(device, self._t)

    def freeze_keep_alive(self, device: int, frozen: bool = True) -> None:
        """keep_alive_rcvd stops rising (the device stopped sending keep-alives), or rises again."""
        if frozen and not self._ka_frozen[device]:
            self._ka_base[device] = self._keep_alive(device, self._t)
        elif not frozen and self._ka_frozen[device]:
            self._ka_anchor_s[device] = self._t
        self._ka_frozen[device] = frozen

    def set_port_state(self, device: int, state: str) -> None:
        """Write another port state (e.g. ``"1: DOWN"``); the real driver never does (efa_verbs.c:454)."""
        self.port_state[device] = state

    # -- time --

    def _keep_alive(self, device: int, t_s: float) -> int:
        if self._ka_frozen[device]:
            return int(self._ka_base[device])
        ticks = math.floor((t_s - float(self._ka_anchor_s[device])) / self.traffic.keep_alive_period_s + 1e-9)
        return int(self._ka_base[device]) + max(ticks, 0)

    def _degradation(self, a: float, b: float) -> tuple[F64, F64, F64]:
        """Time-weighted byte factor, retransmit factor and event rate of each device over ``[a, b]``."""
        bytes_factor = np.ones(self.devices)
        retrans = np.ones(self.devices)
        events = np.zeros(self.devices)
        for f in self.faults:
            if isinstance(f, EfaDegraded):
                share = max(0.0, min(b, f.stop_s) - max(a, f.start_s)) / (b - a)
                bytes_factor[f.device] *= 1 - share * (1 - f.bytes_factor)
                retrans[f.device] *= 1 + share * (f.retrans_factor - 1)
                events[f.device] += share * f.event_rate_s
        return bytes_factor, retrans, events

    def _increments(self, dt_s: float, bytes_factor: F64, retrans: F64, events_s: F64, noise: F64) -> F64:
        """Each device's counter increments over ``dt_s``: whole bytes, packets and work requests; the rare
        events' columns hold their expectations (the caller draws or rounds them); retrans_bytes left 0."""
        tr = self.traffic
        tx = np.floor(tr.tx_bytes_s * dt_s * bytes_factor * noise[0])
        rx = np.floor(tr.rx_bytes_s * dt_s * bytes_factor * noise[1])
        message_share = 1 - tr.rdma_read_share - tr.rdma_write_share
        columns = {
            "tx_bytes": tx, "rx_bytes": rx, "tx_pkts": np.ceil(tx / tr.packet_bytes),
            "rx_pkts": np.ceil(rx / tr.packet_bytes),
            "send_bytes": np.floor(tx * message_share), "recv_bytes": np.floor(rx * message_share),
            "rdma_read_bytes": np.floor(rx * tr.rdma_read_share),
            "rdma_read_resp_bytes": np.floor(tx * tr.rdma_read_share),
            "rdma_write_bytes": np.floor(tx * tr.rdma_write_share),
            "rdma_write_recv_bytes": np.floor(rx * tr.rdma_write_share),
        }
        for wrs, moved in (("send_wrs", "send_bytes"), ("recv_wrs", "recv_bytes"),
                           ("rdma_read_wrs", "rdma_read_bytes"), ("rdma_write_wrs", "rdma_write_bytes")):
            columns[wrs] = np.ceil(columns[moved] / tr.wr_bytes)
        columns["retrans_pkts"] = columns["tx_pkts"] * tr.retrans_ratio * retrans
        columns["rx_drops"] = columns["rx_pkts"] * tr.rx_drop_ratio
        for name in _EVENT_COUNTERS:
            columns[name] = events_s * dt_s
        out = np.zeros((self.devices, len(PORT_COUNTERS)))
        for name, values in columns.items():
            out[:, _P[name]] = values
        return out

    def _reload(self, device: int, at_s: float) -> None:
        self._port[device] = 0
        self._device[device] = 0
        self._ka_base[device] = 0
        self._ka_anchor_s[device] = at_s

    def advance(self, t_s: float) -> EfaTruth:
        """Move to ``t_s`` (after the last time) and return the truth there.

        Raises ValueError when ``t_s`` is not later than the last advanced time."""
        if t_s <= self._t:
            raise ValueError(f"time must move forward: {t_s} <= {self._t}")
        a, b = self._t, float(t_s)
        dt = b - a
        for f in self.faults:
            if isinstance(f, EfaVanish):
                gone = f.start_s <= b < f.stop_s
                if self._fault_gone[f.device] and not gone:
                    self._reload(f.device, f.stop_s)
                self._fault_gone[f.device] = gone
        present = self.present
        bytes_factor, retrans, events_s = self._degradation(a, b)
        noise = np.clip(1 + self._rng.normal(0.0, self.traffic.noise, (2, self.devices)), 0.0, None)
        increments = self._increments(dt, bytes_factor, retrans, events_s, noise)
        # Rare events are Poisson draws around their expectation, drawn for every device so that a fault on one
        # device leaves the others' random stream alone.
        increments[:, _RARE] = self._rng.poisson(increments[:, _RARE])
        increments[:, _P["retrans_bytes"]] = increments[:, _P["retrans_pkts"]] * self.traffic.packet_bytes
        delta = np.where(present[:, None], increments, 0.0).astype(np.int64)
        self._port += delta.astype(np.uint64)
        refreshed = np.where(present, ADMIN_COMMANDS_PER_REFRESH, 0).astype(np.uint64)
        self._device[:, _D["submitted_cmds"]] += refreshed
        self._device[:, _D["completed_cmds"]] += refreshed
        self._t = b
        device_values = np.array([list(self.device_counters(d).values()) for d in range(self.devices)], np.uint64)
        return EfaTruth(
            t_s=b, interval_s=dt, names=tuple(n if present[d] else None for d, n in enumerate(self.names)),
            present=present.copy(), port={name: self._port[:, i].copy() for i, name in enumerate(PORT_COUNTERS)},
            device={name: device_values[:, i] for i, name in enumerate(self.device_counter_names)},
            delta={name: delta[:, i] for i, name in enumerate(PORT_COUNTERS)},
            tx_bytes_s=delta[:, _P["tx_bytes"]] / dt, degraded=bytes_factor < 1,
            keep_alive_frozen=self._ka_frozen.copy())


class EfaSysfsTree:
    """Writes an ``EfaNode`` under ``root`` as the kernel lays it out under /sys/class/infiniband::

        root/<name>/hw_counters/<device counter>, root/<name>/hw_counters/lifespan
        root/<name>/ports/1/hw_counters/<port counter>, root/<name>/ports/1/hw_counters/lifespan
        root/<name>/ports/1/state        ("4: ACTIVE")
        root/<name>/ports/1/phys_state   ("5: LinkUp")

    Each file holds ``"%llu\\n"`` (sysfs.c print_hw_stat).  Writes are atomic for a concurrent reader: a file is
    written beside the tree (in ``<root>/../.<root name>.staging``) and renamed over the old one; a new device
    directory is built there and renamed into place whole; a removed one is renamed out, then deleted; a renamed
    device is one directory rename.  Nothing but device directories ever appears under ``root``.
    """

    def __init__(self, root: Path, node: EfaNode | None = None) -> None:
        self.root = Path(root)
        self.node = node or EfaNode()
        self.staging = self.root.parent / f".{self.root.name}.staging"
        self.root.mkdir(parents=True, exist_ok=True)
        self.staging.mkdir(parents=True, exist_ok=True)
        self._on_disk: dict[int, str] = {}
        self._written: dict[int, dict[str, str]] = {}  # per device: the text of each file as last written
        self._serial = 0

    def step(self, t_s: float) -> EfaTruth:
        """Advance the node to ``t_s`` and write the tree; return the truth."""
        truth = self.node.advance(t_s)
        self.write()
        return truth

    def write(self) -> None:
        """Make the tree match the node now: remove vanished devices, rename renamed ones, write every counter."""
        present = self.node.present
        for device, name in list(self._on_disk.items()):
            if not present[device]:
                self._remove_dir(self.root / name)
                del self._on_disk[device]
                self._written.pop(device, None)
            elif self.node.names[device] != name:
                os.rename(self.root / name, self.root / str(self.node.names[device]))
                self._on_disk[device] = str(self.node.names[device])
        for device in range(self.node.devices):
            if not present[device]:
                continue
            name = str(self.node.names[device])
            if device in self._on_disk:
                self._write_files(self.root / name, device)
            else:
                build = self._fresh_staging_dir()
                self._written.pop(device, None)
                self._write_files(build, device)
                os.rename(build, self.root / name)
                self._on_disk[device] = name

    def _files(self, device: int) -> dict[str, str]:
        node = self.node
        files = {f"hw_counters/{k}": f"{v}\n" for k, v in node.device_counters(device).items()}
        files |= {f"ports/1/hw_counters/{k}": f"{v}\n" for k, v in node.port_counters(device).items()}
        files |= {"hw_counters/lifespan": f"{LIFESPAN_MS}\n", "ports/1/hw_counters/lifespan": f"{LIFESPAN_MS}\n",
                  "ports/1/state": f"{node.port_state[device]}\n", "ports/1/phys_state": f"{PHYS_STATE_LINK_UP}\n"}
        return files

    def _write_files(self, directory: Path, device: int) -> None:
        written = self._written.setdefault(device, {})
        for relative, text in self._files(device).items():
            if written.get(relative) == text:
                continue  # unchanged since the last write: a reader sees the same either way
            written[relative] = text
            target = directory / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.staging / f"file-{self._serial}"
            self._serial += 1
            temporary.write_text(text)
            os.replace(temporary, target)

    def _fresh_staging_dir(self) -> Path:
        path = self.staging / f"dir-{self._serial}"
        self._serial += 1
        path.mkdir()
        return path

    def _remove_dir(self, path: Path) -> None:
        doomed = self._fresh_staging_dir()
        os.rename(path, doomed / "gone")
        shutil.rmtree(doomed)
