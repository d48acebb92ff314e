"""The samples a frame carries, as little-endian numpy record dtypes, and the
decoded frame types the encodings produce: a node's frame, a site's facility
frame, and a batch of many nodes' frames held column by column.

One dtype per kind of sample keeps the binary frame a plain concatenation of
record arrays, and lets the monitor scatter a whole batch of frames into its
state arrays by id without a Python loop over records.  Counters (``*_total``)
are monotone from the publisher's start; gauges are the value at the sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

WIRE_VERSION: Final = 1

CHIP_DTYPE: Final = np.dtype(
    [
        ("chip", "<u4"),
        ("util", "<f4"),  # mean NeuronCore utilisation over the tick, 0..1
        ("clock_ratio", "<f4"),  # clock / nominal clock, 0..1
        ("throttled", "u1"),  # 1 while the chip's firmware throttles it
        ("temp_c", "<f4"),
        ("power_w", "<f4"),
        ("hbm_used_bytes", "<u8"),
        ("fp8_flop_total", "<f8"),  # FLOP executed since publisher start
        ("ecc_corrected_total", "<u8"),  # HBM (the device's DRAM)
        ("ecc_uncorrected_total", "<u8"),  # HBM
        # Fields added since the binary node frame's layout was fixed (CHIP_DTYPE_V1): JSON and batch frames
        # carry them, a binary node frame never does.
        ("sram_ecc_corrected_total", "<u8"),  # on-chip SRAM
        ("sram_ecc_uncorrected_total", "<u8"),
        ("exec_errors_total", "<u8"),  # executions failed by the device or its runtime (generic, runtime, hardware)
        ("exec_timeouts_total", "<u8"),  # executions that outran the runtime's timeout
        ("exec_latency_us", "<f4"),  # median time on the device of one execution over the sample's period
        ("present", "u1"),  # 0: the node's agent reports the device gone (its driver no longer lists it)
    ]
)

LINK_DTYPE: Final = np.dtype(
    [
        ("link", "<u4"),
        ("tx_bytes_total", "<u8"),
        ("bw_bytes_s", "<f4"),  # bandwidth measured over the tick's transfers
        ("lanes_up", "u1"),
        ("crc_errors_total", "<u8"),
        ("replay_total", "<u8"),
        ("latency_us", "<f4"),
    ]
)

EFA_DTYPE: Final = np.dtype(
    [
        ("port", "<u4"),
        ("tx_bytes_total", "<u8"),
        ("rx_bytes_total", "<u8"),
        ("retrans_bytes_total", "<u8"),
        ("retrans_pkts_total", "<u8"),
        ("retrans_timeout_events_total", "<u8"),
        ("unresponsive_remote_events_total", "<u8"),
        ("impaired_remote_conn_events_total", "<u8"),
        ("latency_us", "<f4"),
        # Added since the binary node frame's layout was fixed (EFA_DTYPE_V1): JSON and batch frames only.
        ("rx_drops_total", "<u8"),
        ("rdma_wr_errors_total", "<u8"),  # RDMA read and write work requests that completed in error
        ("keep_alive_total", "<u8"),  # keep-alive messages the driver received from the device
        ("port_active", "u1"),  # the port's state reads ACTIVE (the EFA driver reports it whatever the link's)
        ("present", "u1"),  # 0: the node's agent reports the device gone
    ]
)

COOLING_DTYPE: Final = np.dtype(
    [
        ("inlet_c", "<f4"),
        ("outlet_c", "<f4"),
        ("fan_rpm", "<f4"),
        ("power_w", "<f4"),  # whole node, chips and host
    ]
)

FACILITY_DTYPE: Final = np.dtype(
    [
        ("outside_c", "<f4"),
        ("cooling_mode", "u1"),  # 0 outside air, 1 evaporative (water) assist
        ("water_l_total", "<f8"),
        ("it_energy_j_total", "<f8"),
    ]
)




def _prefix(dtype: np.dtype[np.void], n: int) -> np.dtype[np.void]:
    """Return the packed dtype of the first ``n`` fields of ``dtype``."""
    assert dtype.names is not None
    assert dtype.fields is not None
    return np.dtype([(name, dtype.fields[name][0]) for name in dtype.names[:n]])


CHIP_DTYPE_V1: Final = _prefix(CHIP_DTYPE, 10)
"""A chip record as a binary node frame carries it: the first ten fields, fixed since wire version 1."""
EFA_DTYPE_V1: Final = _prefix(EFA_DTYPE, 9)
"""An EFA record as a binary node frame carries it: the first nine fields, fixed since wire version 1."""


RECORD_KINDS: Final = ("chips", "links", "efa", "cooling")
"""The kinds of record a node reports, in frame order."""

RECORD_DTYPES: Final[dict[str, np.dtype[np.void]]] = {
    "chips": CHIP_DTYPE, "links": LINK_DTYPE, "efa": EFA_DTYPE, "cooling": COOLING_DTYPE,
}
NODE_FRAME_DTYPES: Final[dict[str, np.dtype[np.void]]] = {
    "chips": CHIP_DTYPE_V1, "links": LINK_DTYPE, "efa": EFA_DTYPE_V1, "cooling": COOLING_DTYPE,
}
"""The records of a binary node frame (kind 1), by kind: wire version 1's layouts, unchanged, so publishers
written to that layout keep working.  A record's fields added since (``RECORD_DTYPES`` has them all) travel
in JSON and batch frames, where every field is optional; in a binary node frame they are unknown."""
ID_FIELDS: Final[dict[str, str | None]] = {"chips": "chip", "links": "link", "efa": "port", "cooling": None}


def column_dtypes(dtype: np.dtype[np.void]) -> dict[str, np.dtype[Any]]:
    """Return each field of a record dtype as its own (little-endian) column dtype."""
    assert dtype.names is not None
    assert dtype.fields is not None
    return {name: dtype.fields[name][0] for name in dtype.names}


def float_fields(dtype: np.dtype[np.void]) -> tuple[str, ...]:
    """Return the names of the floating-point fields of a record dtype."""
    assert dtype.names is not None
    return tuple(n for n in dtype.names if dtype.fields is not None and dtype.fields[n][0].kind == "f")


def _empty(dtype: np.dtype[np.void]) -> npt.NDArray[np.void]:
    return np.zeros(0, dtype=dtype)


@dataclass(frozen=True, eq=False)
class NodeFrame:
    """One node's samples for one tick."""

    publisher: str
    seq: int
    tick: int
    t_s: float
    node: int
    chips: npt.NDArray[np.void] = field(default_factory=lambda: _empty(CHIP_DTYPE))
    links: npt.NDArray[np.void] = field(default_factory=lambda: _empty(LINK_DTYPE))
    efa: npt.NDArray[np.void] = field(default_factory=lambda: _empty(EFA_DTYPE))
    cooling: npt.NDArray[np.void] = field(default_factory=lambda: _empty(COOLING_DTYPE))
    # Per record kind, per record: which fields it carries (bit i: the dtype's
    # i-th field); None, or a kind left out, means every field of its records'
    # dtype.  Only the JSON form can leave fields out.  Records are of
    # ``RECORD_DTYPES`` (JSON) or ``NODE_FRAME_DTYPES`` (binary, and the
    # simulator's), whose later fields are then unknown.
    known: dict[str, npt.NDArray[np.uint16]] | None = None
    # How often the publisher sends this node's frames, as it declares it (JSON ``period_s``); NaN: not said.
    period_s: float = float("nan")

    def complete(self) -> bool:
        """Return True when every record carries every field of its records' dtype."""
        if not self.known:
            return True
        return all(bool((mask == (1 << len(getattr(self, kind).dtype.names or ())) - 1).all())
                   for kind, mask in self.known.items())


@dataclass(frozen=True, eq=False)
class FacilityFrame:
    """One site's facility (cooling plant) sample for one tick."""

    publisher: str
    seq: int
    tick: int
    t_s: float
    site: int
    facility: npt.NDArray[np.void] = field(default_factory=lambda: _empty(FACILITY_DTYPE))


@dataclass(frozen=True, eq=False)
class NodeBatch:
    """Many nodes' frames at once, column by column, as an aggregator publishes them.

    Entry ``i`` is one node's frame: ``node[i]`` with its own ``node_seq``,
    ``node_tick`` and ``node_t_s``, and ``counts[kind][i]`` records of each
    kind, stored consecutively in node order in ``columns[kind][field]``.  A
    field a publisher does not have is absent from ``columns[kind]`` (an id
    field never is).  ``seq``, ``tick`` and ``t_s`` are the batch's own.
    """

    publisher: str
    seq: int
    tick: int
    t_s: float
    site: int
    node: npt.NDArray[np.uint32]
    node_seq: npt.NDArray[np.uint64]
    node_tick: npt.NDArray[np.uint64]
    node_t_s: npt.NDArray[np.float64]
    counts: dict[str, npt.NDArray[np.uint16]]
    columns: dict[str, dict[str, npt.NDArray[Any]]]
    # Per record kind, per record: which fields it carries, on top of which
    # columns are present (a node frame turned batch keeps its JSON gaps).
    known: dict[str, npt.NDArray[np.uint16]] | None = None
    # Each entry's own publisher, as an index into ``publishers`` (an aggregator's batch of many agents'
    # frames); None: every entry is ``publisher``'s, as the simulator's batches are.
    node_publisher: npt.NDArray[np.uint16] | None = None
    publishers: tuple[str, ...] = ()

    @property
    def n_nodes(self) -> int:
        """Return how many node frames the batch carries."""
        return int(self.node.size)

    def entry_publishers(self) -> list[str]:
        """Return the publisher id of each entry, in entry order."""
        if self.node_publisher is None:
            return [self.publisher] * self.n_nodes
        return [self.publishers[i] for i in self.node_publisher.tolist()]


Frame = NodeFrame | FacilityFrame | NodeBatch
