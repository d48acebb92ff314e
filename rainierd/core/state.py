"""The monitor's picture of the fleet: for every chip, NeuronLink, EFA port,
node and site, its latest sample column by column, when it was received, and
the per-second rates of its counters over its last interval.

Why columns: a detector reads the one float32 column it needs, contiguous,
instead of one field strided through 50-byte records, and a batch frame's
columns land with slice copies.  Why rates at ingest: a counter becomes a rate
the moment its next sample lands (``Table.apply``), so no previous record is
kept and a lost sample only lengthens the interval.  Why receive times: each
publisher has its own clock, so whether an entity has gone quiet is judged on
when the monitor heard from it (``rx_s``, on the monitor's listening clock),
never on tick numbers compared across publishers.

A field a publisher did not send is unknown, not zero: NaN in a gauge column,
its bit clear in ``known``, and NaN in the rate of a counter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd._types import F32, F64, I64, U16, U32, B
from rainierd.topology import Topology
from rainierd.wire.records import CHIP_DTYPE, COOLING_DTYPE, EFA_DTYPE, FACILITY_DTYPE, LINK_DTYPE, column_dtypes

__all__ = ["COUNTER_SUMS", "RATED", "RATE_F64", "FleetState", "Scratch", "Table", "contiguous"]

RATE_F64: Final = frozenset({"fp8_flop_total"})
"""Counters whose rate is kept in float64: fleet FLOP/s sums must match to 1e-9."""

RATED: Final = frozenset({
    "fp8_flop_total", "ecc_uncorrected_total",  # chips: effective FP8, failure
    "sram_ecc_uncorrected_total", "exec_errors_total", "exec_timeouts_total",  # chips: failure (detect/chips.py)
    "crc_errors_total", "replay_total",  # NeuronLinks: errors
    "tx_bytes_total", "rx_bytes_total", "retrans_pkts_total", "unresponsive_remote_events_total",  # EFA
    "rx_drops_total", "rdma_wr_errors_total", "keep_alive_total",  # EFA: the driver's (detect/efa_driver.py)
})
"""Counters that something judges per entity, and so get a per-second rate as each sample lands.

A rate costs a subtract, a divide and a store per entity and tick (at a
million chips, 19 million of them for every counter; 12 for these).  The
other counters keep only their latest total: their fleet and group sums are
exported as counters, and Prometheus's ``rate()`` makes the rate.  NeuronLink
``tx_bytes_total`` is rated on EFA only (where traffic share is judged).
The six judged since issue 33 (SRAM ECC, execution errors and timeouts per
chip; receive drops, RDMA work-request errors and keep-alives per EFA port)
cost three per chip and three per port a tick: at ``rainier`` about 3
million more, and 12 MB of float32 rates.  For a publisher that does not
send them (the simulator, a binary node frame) each is one NaN store per
entity a tick.
"""


COUNTER_SUMS: Final = (
    ("chips", "fp8_flop_total"), ("chips", "ecc_corrected_total"), ("chips", "ecc_uncorrected_total"),
    ("facility", "water_l_total"), ("facility", "it_energy_j_total"),
)
"""(table, field) of every counter whose increases are summed (``Table.take_increase``): chips per UltraServer
(and so site and fleet), the facility per site.

Why at ingest: an analysis sees only each entity's latest sample, so increases
taken from one analysis to the next lost every interval that began and ended
inside one window with no earlier total to subtract: a chip whose first two
frames shared an analysis lost its first interval from the FLOP counter.
"""


def contiguous(ids: I64) -> slice | I64:
    """Return ``ids`` as a slice when they are one ascending run (the common case), else unchanged."""
    n = ids.size
    if n and int(ids[-1]) - int(ids[0]) == n - 1 and (n == 1 or bool((ids[1:] > ids[:-1]).all())):
        return slice(int(ids[0]), int(ids[0]) + n)
    return ids


@dataclass(eq=False)
class Table:
    """The latest sample of ``n`` entities of one kind, one array per field.

    Gauges are float32 (NaN: unknown); counters keep their last total in the
    wire dtype and a per-second ``rates`` column (NaN until two samples, after
    a counter reset, or when either sample lacked it).
    """

    n: int
    fields: tuple[str, ...]
    gauges: dict[str, F32]
    totals: dict[str, npt.NDArray[Any]]
    rates: dict[str, npt.NDArray[np.floating[Any]]]
    t_s: F64  # the publisher's sample time of the latest sample (NaN: never)
    rx_s: F64  # when the monitor received it, on its listening clock (NaN: never)
    dt_s: F32  # publisher time between the last two samples (NaN: fewer than two)
    samples: U32  # samples applied so far
    known: U16  # bit i: field i was in the latest sample
    # Per summed counter: (its last known total, NaN: never; its increases since the last take_increase).
    summed: dict[str, tuple[F64, F64]] = field(default_factory=dict)

    @classmethod
    def empty(
        cls, n: int, dtype: np.dtype[np.void], *, skip: tuple[str, ...] = (), rated: frozenset[str] = RATED,
        summed: frozenset[str] = frozenset(),
    ) -> Table:
        """Return a table of ``n`` entities that have never reported (``skip``: id fields; ``rated``: counters
        that get a per-second rate; ``summed``: counters whose increases are accumulated as samples land)."""
        columns = {name: dt for name, dt in column_dtypes(dtype).items() if name not in skip}
        gauges: dict[str, F32] = {}
        totals: dict[str, npt.NDArray[Any]] = {}
        rates: dict[str, npt.NDArray[np.floating[Any]]] = {}
        for name, dt in columns.items():
            if name.endswith("_total"):
                totals[name] = np.zeros(n, dt)
                if name in rated:
                    rates[name] = np.full(n, np.nan, np.float64 if name in RATE_F64 else np.float32)
            else:
                gauges[name] = np.full(n, np.nan, np.float32)
        return cls(
            n, tuple(column_dtypes(dtype)), gauges, totals, rates,
            np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan, np.float32),
            np.zeros(n, np.uint32), np.zeros(n, np.uint16),
            {name: (np.full(n, np.nan), np.zeros(n)) for name in totals if name in summed},
        )

    def bit(self, name: str) -> int:
        """Return the ``known`` bit of field ``name``."""
        return 1 << self.fields.index(name)

    def reported(self) -> B:
        """Return which entities have reported at least once."""
        return self.samples > 0

    def has(self, *names: str) -> B:
        """Return which entities' latest sample carried every one of the fields ``names``."""
        mask = np.uint16(sum(self.bit(name) for name in names))
        return np.asarray((self.known & mask) == mask, dtype=bool)

    def apply(
        self,
        ids: I64 | slice,
        columns: Mapping[str, npt.NDArray[Any]],
        *,
        t_s: F64,
        rx_s: F64,
        known: int | U16,
        scratch: Scratch | None = None,
        per_frame: int = 0,
    ) -> None:
        """Store one sample for each of ``ids`` (unique), turning counters into rates.

        ``columns`` holds the sample's fields (a field absent from it, or with
        its ``known`` bit clear, is unknown); each is read once and stored
        before the next is read, so a mapping may hand them out in one reused
        buffer (the store's reordered columns do); ``t_s`` and ``rx_s`` are per
        record, or, with ``per_frame`` and ``ids`` a slice, per run of
        ``per_frame`` consecutive records (one frame's), broadcast without a
        per-record copy.  Every value must already be validated: this only stores.
        """
        at = ids if isinstance(ids, slice) else contiguous(ids)
        n = at.stop - at.start if isinstance(at, slice) else int(ids.size)  # type: ignore[union-attr]
        scratch = scratch or Scratch()
        dt = scratch.get("dt", n, np.float32)
        if per_frame:
            # (frames, per_frame) views: each frame's time reaches its records by broadcasting.
            np.subtract(t_s[:, None], self.t_s[at].reshape(-1, per_frame), out=dt.reshape(-1, per_frame),
                        casting="same_kind")
        else:
            np.subtract(t_s, self.t_s[at], out=dt, casting="same_kind")  # NaN for a first sample
        dt[~(dt > 0)] = np.nan  # a repeated or backwards timestamp gives no rate
        self._store_counters(at, columns, known, dt, scratch.get("rate", n, np.float64))
        self._store_gauges(at, columns, known)
        if per_frame:
            self.t_s[at].reshape(-1, per_frame)[:] = t_s[:, None]
            self.rx_s[at].reshape(-1, per_frame)[:] = rx_s[:, None]
        else:
            self.t_s[at] = t_s
            self.rx_s[at] = rx_s
        self.dt_s[at] = dt
        self.samples[at] += np.uint32(1)
        self.known[at] = known


    def take_increase(self, name: str) -> F64:
        """Return summed counter ``name``'s increase per entity since the last call, and start again from zero.

        Each sample adds its total less the entity's last known one: nothing
        for its first, the new total for a fall (a restart counted from zero,
        as Prometheus's ``rate()`` does), nothing for a sample without the
        counter (the last known total stays, for when it returns).  So every
        interval counts once, however many samples an analysis window holds.
        """
        pending = self.summed[name][1]
        increase = pending.copy()
        pending[:] = 0.0
        return increase

    def forget_rates(self, ids: I64) -> None:
        """Make the rates of ``ids`` unknown: their last sample counted from another start than the one before.

        A publisher that restarted (or another that took over) counts from its
        own start; a difference across the two is no rate, even when it is not
        negative (two restarts seconds apart leave counters that never went back).
        """
        for rate in self.rates.values():
            rate[ids] = np.nan

    def _store_counters(
        self, at: slice | I64, columns: Mapping[str, npt.NDArray[Any]], known: int | U16, dt: F32, rate: F64,
    ) -> None:
        """Store counter totals and, for rated counters, their rate since the entity's last sample."""
        uniform = isinstance(known, int)
        full = (1 << len(self.fields)) - 1
        # A counter has a rate only if the previous sample had it too.
        had = self.known[at]
        had_all = bool((had == full).all())
        for name, total in self.totals.items():
            bit = self.bit(name)
            if name not in columns or (uniform and not known & bit):
                if name in self.rates:
                    self.rates[name][at] = np.nan
                continue
            new = columns[name]
            if name in self.rates:
                # float64 differences are exact for counters below 2**53 and turn a
                # reset (the counter went backwards) into a negative value.
                np.subtract(new, total[at], out=rate, dtype=np.float64)
                np.divide(rate, dt, out=rate)
                rate[rate < 0] = np.nan
                if not had_all:
                    rate[(had & bit) == 0] = np.nan
                if not uniform:
                    rate[(np.asarray(known) & bit) == 0] = np.nan
                self.rates[name][at] = rate
            if name in self.summed:
                self._add_increase(name, at, new, None if uniform else (np.asarray(known) & bit) != 0, rate)
            total[at] = new

    def _add_increase(
        self, name: str, at: slice | I64, new: npt.NDArray[Any], present: B | None, increase: F64,
    ) -> None:
        """Add each entity's increase of summed counter ``name`` (``present``: which samples carry it; None: all),
        using ``increase`` (one float64 per entity) as work space."""
        last, pending = self.summed[name]
        before = last[at]
        np.subtract(new, before, out=increase, dtype=np.float64)  # NaN for a first sample
        fell = increase < 0
        if fell.any():  # a restart: the counter began again from zero
            np.copyto(increase, new, where=fell, casting="unsafe")
        if present is not None:
            increase[~present] = np.nan
        increase[np.isnan(increase)] = 0.0
        pending[at] += increase
        last[at] = new if present is None else np.where(present, new, before)

    def _store_gauges(self, at: slice | I64, columns: Mapping[str, npt.NDArray[Any]], known: int | U16) -> None:
        """Store gauges (float32), NaN where the sample lacked them."""
        uniform = isinstance(known, int)
        for name, gauge in self.gauges.items():
            if name not in columns or (uniform and not known & self.bit(name)):
                gauge[at] = np.nan
            elif uniform:
                gauge[at] = columns[name]
            else:
                present = (np.asarray(known) & self.bit(name)).astype(bool)
                gauge[at] = np.where(present, columns[name], np.nan)


def _id_fields(dtype: np.dtype[np.void]) -> tuple[str, ...]:
    assert dtype.names is not None
    return tuple(n for n in dtype.names if n in ("chip", "link", "port"))


@dataclass(eq=False)
class FleetState:
    """All entity tables of a fleet, sized by its topology, and the analysis clock."""

    topology: Topology
    chips: Table = field(init=False)
    links: Table = field(init=False)
    efa: Table = field(init=False)
    cooling: Table = field(init=False)
    facility: Table = field(init=False)
    latest_tick: int = -1  # the tick of the last window's median sample (shown only; never judges freshness)
    latest_t_s: float = float("nan")  # that sample's time
    # The monitor's listening clock at the current analysis: ages are now_s - rx_s.
    now_s: float = float("nan")

    def __post_init__(self) -> None:
        topo = self.topology
        summed = {table: frozenset(name for kind, name in COUNTER_SUMS if kind == table)
                  for table in ("chips", "facility")}
        self.chips = Table.empty(topo.n_chips, CHIP_DTYPE, skip=_id_fields(CHIP_DTYPE), summed=summed["chips"])
        self.links = Table.empty(topo.n_links, LINK_DTYPE, skip=_id_fields(LINK_DTYPE),
                                 rated=RATED - {"tx_bytes_total"})
        self.efa = Table.empty(topo.n_efa, EFA_DTYPE, skip=_id_fields(EFA_DTYPE))
        self.cooling = Table.empty(topo.n_nodes, COOLING_DTYPE)
        self.facility = Table.empty(topo.n_sites, FACILITY_DTYPE, summed=summed["facility"])

    def silent(self, table: Table, stale_after_s: float) -> B:
        """Return entities that reported once but not in the last ``stale_after_s`` before ``now_s``."""
        with np.errstate(invalid="ignore"):
            return np.asarray((self.now_s - table.rx_s) >= stale_after_s, dtype=bool)

    def fresh(self, table: Table, stale_after_s: float) -> B:
        """Return entities heard from in the last ``stale_after_s`` before ``now_s`` (the complement of silent)."""
        with np.errstate(invalid="ignore"):
            return np.asarray((self.now_s - table.rx_s) < stale_after_s, dtype=bool)

    def tables(self) -> dict[str, Table]:
        """Return the tables by record kind (the frame's names)."""
        return {"chips": self.chips, "links": self.links, "efa": self.efa, "cooling": self.cooling}



class Scratch:
    """Reusable work arrays, so a window's fleet-sized temporaries are allocated once, not every tick.

    A fresh 20 MB array costs ~5,000 page faults each time it is touched
    anew; numpy hands large arrays straight back to the operating system, so
    without reuse every tick pays them again (measured: a third of the
    admission time at 1,000,000 chips).  ``get`` returns a view of a buffer
    kept per key, grown when a larger one is needed; a view is valid until the
    next ``get`` of the same key.

    A buffer grown by a burst (one window far larger than the fleet's tick)
    is not kept for ever: once ``SHRINK_AFTER`` windows in a row have each
    needed under a quarter of a buffer over 1 MiB, it is replaced by one of
    the size needed, so the burst's memory can go back.  A steady fleet, each
    window alike, never meets that and reallocates nothing.
    """

    SHRINK_AFTER: Final = 8
    _SHRINK_RATIO: Final = 4
    _SHRINK_BYTES: Final = 2**20

    def __init__(self) -> None:
        self._buffers: dict[str, npt.NDArray[Any]] = {}
        self._small: dict[str, int] = {}  # gets in a row that needed under a quarter of the buffer

    def get(self, key: str, n: int, dtype: np.dtype[Any] | type[Any]) -> npt.NDArray[Any]:
        """Return an uninitialised array of ``n`` ``dtype`` values for ``key``."""
        dtype = np.dtype(dtype)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.dtype != dtype or buffer.size < n:
            buffer = self._buffers[key] = np.empty(max(n, 1), dtype)
            self._small[key] = 0
        elif buffer.nbytes > self._SHRINK_BYTES and buffer.size > self._SHRINK_RATIO * n:
            small = self._small.get(key, 0) + 1
            if small >= self.SHRINK_AFTER:
                buffer = self._buffers[key] = np.empty(max(n, 1), dtype)
                small = 0
            self._small[key] = small
        else:
            self._small[key] = 0
        return buffer[:n]

    def shared(self, key: str, n: int, dtype: np.dtype[Any] | type[Any]) -> npt.NDArray[Any]:
        """Return an uninitialised array of ``n`` ``dtype`` values in the buffer ``key`` keeps for every dtype
        of that item size, valid until the next ``shared`` of that key and item size."""
        dtype = np.dtype(dtype)
        return self.get(f"{key}.{dtype.itemsize}", n * dtype.itemsize, np.uint8).view(dtype)

    @property
    def nbytes(self) -> int:
        """Return the bytes the buffers hold."""
        return sum(buffer.nbytes for buffer in self._buffers.values())
