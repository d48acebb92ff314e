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

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from rainierd import native
from rainierd._types import F32, F64, I64, U16, U32, B
from rainierd.core.bounds import EXACT, OUT_OF_RANGE, RATIOS, REFUSAL_REASONS, Bound, CounterBounds
from rainierd.core.cadence import Cadence
from rainierd.fleet import Topology
from rainierd.wire import CHIP_DTYPE, COOLING_DTYPE, EFA_DTYPE, FACILITY_DTYPE, LINK_DTYPE, column_dtypes


@runtime_checkable
class Direct(Protocol):
    """Columns that can write one straight into where it is stored (``Store``'s window in node order), sparing
    a buffer and a pass; ``into`` returns False, having written nothing, where it cannot (another dtype)."""

    def into(self, name: str, out: npt.NDArray[Any]) -> bool:
        """Write column ``name`` into ``out``, or return False."""
        ...


def _into(columns: Mapping[str, npt.NDArray[Any]], name: str, out: npt.NDArray[Any], at: slice | I64) -> bool:
    """Write column ``name`` straight into ``out[at]`` where ``columns`` can and ``at`` is a run (a view)."""
    return isinstance(at, slice) and isinstance(columns, Direct) and columns.into(name, out[at])


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


_DTYPES: Final = {"chips": CHIP_DTYPE, "links": LINK_DTYPE, "efa": EFA_DTYPE, "cooling": COOLING_DTYPE,
                  "facility": FACILITY_DTYPE}
_RATED_BY_TABLE: Final = {"chips": RATED, "links": RATED - {"tx_bytes_total"}, "efa": RATED, "cooling": RATED,
                          "facility": RATED}
_SUMMED_BY_TABLE: Final = {table: frozenset(name for kind, name in COUNTER_SUMS if kind == table) for table in _DTYPES}

CONSUMED: Final = {
    table: frozenset(name for name in column_dtypes(dtype) if name.endswith("_total")
                     and (name in _RATED_BY_TABLE[table] or name in _SUMMED_BY_TABLE[table]))
    for table, dtype in _DTYPES.items()
}
"""Per table, the counters something derives a figure from (a rate, a sum): each is bounded (``core/bounds.py``).
A counter kept only as its latest total (shown, never differenced) is stored as sent."""

REFUSALS: Final = tuple(
    (table, name, reason) for table in _DTYPES for name in sorted(CONSUMED[table]) for reason in REFUSAL_REASONS
    if reason != "negative" or column_dtypes(_DTYPES[table])[name].kind == "f"
) + tuple((table, name, OUT_OF_RANGE) for table, names in RATIOS.items() for name in names)
"""Every (table, field, reason) a sample's counter (or ratio gauge, ``core/bounds.py`` RATIOS) can be refused
for: the series of ``rainier_ingest_counters_refused_total`` (a total of unsigned integers cannot be negative)."""


def contiguous(ids: I64) -> slice | I64:
    """Return ``ids`` as a slice when they are one ascending run (the common case), else unchanged."""
    n = ids.size
    if n and int(ids[-1]) - int(ids[0]) == n - 1 and (n == 1 or bool((ids[1:] > ids[:-1]).all())):
        return slice(int(ids[0]), int(ids[0]) + n)
    return ids


@dataclass(eq=False)
class Summed:
    """One summed counter of a table: its reference total, and its increases since the last ``take_increase``.

    The reference is the last total a sample carried, refused or not (NaN:
    never), and, where the counter's bound is per second, the latest sample
    time that carried one: it never goes back, so no second of an entity's
    sample clock is counted twice, however its sample times wander.
    """

    last: F64
    last_t_s: F64 | None  # None: a bound per sample, which needs no time
    pending: F64


@dataclass(eq=False)
class Table:
    """The latest sample of ``n`` entities of one kind, one array per field.

    Gauges are float32 (NaN: unknown); counters keep their last total in the
    wire dtype and a per-second ``rates`` column (NaN until two samples, after
    a counter reset, when either sample lacked it, or when the sample was
    refused as over its bound).
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
    summed: dict[str, Summed] = field(default_factory=dict)
    # The bound of every counter a rate or a sum is made of (core/bounds.py).
    bounds: dict[str, Bound] = field(default_factory=dict)
    # The gauges that are ratios in [0, 1] (core/bounds.py RATIOS): a value outside is stored unknown.
    ratios: frozenset[str] = frozenset()

    @classmethod
    def empty(
        cls, n: int, dtype: np.dtype[np.void], *, skip: tuple[str, ...] = (), rated: frozenset[str] = RATED,
        summed: frozenset[str] = frozenset(), bounds: Mapping[str, Bound] | None = None,
        ratios: frozenset[str] = frozenset(),
    ) -> Table:
        """Return a table of ``n`` entities that have never reported (``skip``: id fields; ``rated``: counters
        that get a per-second rate; ``summed``: counters whose increases are accumulated as samples land;
        ``bounds``: the physical bound of counters that have one, the others being bounded per sample)."""
        bounds = bounds or {}
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
        consumed = {name for name in totals if name in rated or name in summed}
        limits = {name: bounds.get(name, Bound()) for name in sorted(consumed)}
        return cls(
            n, tuple(column_dtypes(dtype)), gauges, totals, rates,
            np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan, np.float32),
            np.zeros(n, np.uint32), np.zeros(n, np.uint16),
            {name: Summed(np.full(n, np.nan), None if limits[name].per_s is None else np.full(n, np.nan),
                          np.zeros(n)) for name in totals if name in summed},
            limits, frozenset(ratios) & set(gauges),
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
    ) -> Counter[tuple[str, str]]:
        """Store one sample for each of ``ids`` (unique), turning counters into rates; return the counters
        refused, by (field, reason) (``core/bounds.py``).

        ``columns`` holds the sample's fields (a field absent from it, or with
        its ``known`` bit clear, is unknown); each is read once and stored
        before the next is read, so a mapping may hand them out in one reused
        buffer (the store's reordered columns do); ``t_s`` and ``rx_s`` are per
        record, or, with ``per_frame`` and ``ids`` a slice, per run of
        ``per_frame`` consecutive records (one frame's), broadcast without a
        per-record copy.  Every value must already be validated: this only
        stores, and bounds the counters it derives a rate or a sum from.
        """
        at = ids if isinstance(ids, slice) else contiguous(ids)
        n = at.stop - at.start if isinstance(at, slice) else int(ids.size)  # type: ignore[union-attr]
        scratch = scratch or Scratch()
        dt = scratch.get("dt", n, np.float32)
        if per_frame:
            # (frames, per_frame) views: each frame's time reaches its records by broadcasting.
            np.subtract(t_s[:, None], self.t_s[at].reshape(-1, per_frame), out=dt.reshape(-1, per_frame),
                        casting="same_kind")
            self.t_s[at].reshape(-1, per_frame)[:] = t_s[:, None]
            self.rx_s[at].reshape(-1, per_frame)[:] = rx_s[:, None]
            t_s = self.t_s[at]  # per record now: a view (``at`` is a slice)
        else:
            np.subtract(t_s, self.t_s[at], out=dt, casting="same_kind")  # NaN for a first sample
            self.t_s[at] = t_s
            self.rx_s[at] = rx_s
        dt[~(dt > 0)] = np.nan  # a repeated or backwards timestamp gives no rate
        refused = self._store_counters(at, columns, known, dt=dt, t_s=t_s, scratch=scratch)
        self._store_gauges(at, columns, known, refused)
        self.dt_s[at] = dt
        self.samples[at] += np.uint32(1)
        self.known[at] = known
        return refused

    def take_increase(self, name: str) -> F64:
        """Return summed counter ``name``'s increase per entity since the last call, and start again from zero.

        Each sample adds its total less the entity's last known one: nothing
        for its first, the new total for a fall (a restart counted from zero,
        as Prometheus's ``rate()`` does), nothing for a sample without the
        counter (the last known total stays, for when it returns), nothing
        for a sample refused as over its bound (``core/bounds.py``).  So every
        interval counts at most once, however many samples an analysis window
        holds, and never by more than its bound.
        """
        pending = self.summed[name].pending
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
        self, at: slice | I64, columns: Mapping[str, npt.NDArray[Any]], known: int | U16, *, dt: F32, t_s: F64,
        scratch: Scratch,
    ) -> Counter[tuple[str, str]]:
        """Store counter totals and, for rated counters, their rate since the entity's last sample; add summed
        counters' increases; return the counters refused over their bounds, by (field, reason)."""
        refused: Counter[tuple[str, str]] = Counter()
        uniform = isinstance(known, int)
        work = scratch.get("rate", dt.size, np.float64) if self.summed else None
        for name, total in self.totals.items():
            bit = self.bit(name)
            if name not in columns or (uniform and not known & bit):
                if name in self.rates:
                    self.rates[name][at] = np.nan
                continue
            present = None if uniform else np.asarray(known)
            if name not in self.rates and name not in self.summed:  # its latest total, kept as sent
                if not _into(columns, name, total, at):
                    native.counter_step(columns[name], total, at, None)
                continue
            new = columns[name]
            if name in self.rates:
                # A summed counter is judged by its sum (below), whose reference is at least as strict.
                self._store_rate(name, at, new, present=present, dt=dt,
                                 refused=None if name in self.summed else refused)
            else:
                native.counter_step(new, total, at, None)
            if name in self.summed:
                assert work is not None
                self._add_increase(name, at, new, present=None if present is None else (present & bit) != 0, t_s=t_s,
                                   increase=work, scratch=scratch, refused=refused)
        return refused

    def _store_rate(
        self, name: str, at: slice | I64, new: npt.NDArray[Any], *, present: U16 | None, dt: F32,
        refused: Counter[tuple[str, str]] | None,
    ) -> None:
        """Store rated counter ``name``'s new totals and its rate since each entity's last sample: the new total
        less the last (float64: exact below 2**53, and a reset, the counter gone backwards, is negative) over
        ``dt``; NaN where either sample lacked it (the table's ``known``, ``present``: None, all carry it),
        across a reset, or over its bound (then counted in ``refused``, unless None), in one compiled pass."""
        bound = self.bounds[name]
        per_s = bound.per_s
        per_kind = np.asarray(per_s, np.float64) if isinstance(per_s, tuple) else None
        over, negative, reset_over = native.counter_rate(
            new, self.totals[name], at, dt=dt, had=self.known, present=present, bit=self.bit(name),
            limit=EXACT if per_s is None else per_s if not isinstance(per_s, tuple) else 0.0,
            per_kind=per_kind, kind_of=None if per_kind is None else bound.kind_of, per_s=bound.per_s is not None,
            rate=self.rates[name])
        if refused is None:
            return
        for reason, count in (("over_bound", over), ("negative", negative), ("reset_over_bound", reset_over)):
            if count:
                refused[name, reason] += count

    def _add_increase(
        self, name: str, at: slice | I64, new: npt.NDArray[Any], *, present: B | None, t_s: F64, increase: F64,
        scratch: Scratch, refused: Counter[tuple[str, str]],
    ) -> None:
        """Add each entity's increase of summed counter ``name`` (``present``: which samples carry it; None: all)
        unless it is over the counter's bound, using ``increase`` (one float64 per entity) as work space."""
        summed, bound = self.summed[name], self.bounds[name]
        before = summed.last[at]
        np.subtract(new, before, out=increase, dtype=np.float64)  # NaN for a first sample
        if present is not None:
            increase[~present] = np.nan
        limit: float | F64 = EXACT
        if summed.last_t_s is not None:
            # At most the bound over the time since the reference; nothing in no time.
            interval = scratch.get("interval", increase.size, np.float64)
            np.subtract(t_s, summed.last_t_s[at], out=interval)
            np.maximum(interval, 0.0, out=interval)
            np.multiply(interval, bound.limit_per_s(at), out=interval)
            limit = interval
        over = increase > limit  # NaN (a first sample, unknown) compares False
        fell = np.flatnonzero(increase < 0)
        bad = over
        if fell.size:  # a restart: the counter began again from zero, and its new total is the increase
            wrong = _judge_resets(name, fell, new, limit, refused)
            increase[fell] = np.where(wrong, 0.0, new[fell])
            if wrong.any():
                bad = over.copy()
                bad[fell[wrong]] = True
        if over.any():
            refused[name, "over_bound"] += int(np.count_nonzero(over))
            increase[over] = 0.0
        increase[np.isnan(increase)] = 0.0
        summed.pending[at] += increase
        # The sample is the new reference, refused or not: the next is judged against it, so a wrong total costs
        # its own interval and, if the next falls back below it, that one's, never more.
        if present is None:
            summed.last[at] = new
            if summed.last_t_s is not None:
                summed.last_t_s[at] = np.fmax(summed.last_t_s[at], t_s)
        else:
            summed.last[at] = np.where(present, new, before)
            if summed.last_t_s is not None:
                since = summed.last_t_s[at]
                summed.last_t_s[at] = np.where(present, np.fmax(since, t_s), since)
        if name in self.rates and bad.any():
            rates = self.rates[name]
            if isinstance(at, slice):
                rates[at][bad] = np.nan
            else:
                rates[at[bad]] = np.nan

    def _store_gauges(
        self, at: slice | I64, columns: Mapping[str, npt.NDArray[Any]], known: int | U16,
        refused: Counter[tuple[str, str]],
    ) -> None:
        """Store gauges (float32), NaN where the sample lacked them or where a ratio (``self.ratios``) is outside
        [0, 1], counted in ``refused`` as ``out_of_range``."""
        uniform = isinstance(known, int)
        for name, gauge in self.gauges.items():
            if name not in columns or (uniform and not known & self.bit(name)):
                gauge[at] = np.nan
                continue
            if uniform:
                if not _into(columns, name, gauge, at):
                    gauge[at] = columns[name]
            else:
                present = (np.asarray(known) & self.bit(name)).astype(bool)
                gauge[at] = np.where(present, columns[name], np.nan)
            if name in self.ratios:
                stored = gauge[at]
                outside = (stored < 0) | (stored > 1)
                if outside.any():
                    stored[outside] = np.nan
                    gauge[at] = stored
                    refused[name, OUT_OF_RANGE] += int(np.count_nonzero(outside))


def _judge_resets(
    name: str, fell: I64, new: npt.NDArray[Any], limit: float | F64, refused: Counter[tuple[str, str]],
) -> B:
    """Return which of the samples ``fell`` (a counter that went backwards: a restart) are refused: a negative
    total, or a new total above ``limit`` (its bound over the interval); count them in ``refused``."""
    value = new[fell].astype(np.float64)
    bound = limit if isinstance(limit, float) else limit[fell]
    negative = value < 0
    over = ~negative & ~(value <= bound)  # NaN bound (no interval known): not believed
    if negative.any():
        refused[name, "negative"] += int(negative.sum())
    if over.any():
        refused[name, "reset_over_bound"] += int(over.sum())
    return np.asarray(negative | over, dtype=bool)


def _id_fields(dtype: np.dtype[np.void]) -> tuple[str, ...]:
    assert dtype.names is not None
    return tuple(n for n in dtype.names if n in ("chip", "link", "port"))


@dataclass(eq=False)
class FleetState:
    """All entity tables of a fleet, sized by its topology, each stream's period, and the analysis clock.

    ``bounds`` are the figures counters are bounded by (from the monitor's
    configuration: ``MonitorConfig.counter_bounds``); ``stale_after_ticks``
    is how many of its own periods a stream may be unheard before it is
    silent (``silent``).
    """

    topology: Topology
    bounds: CounterBounds = field(default_factory=CounterBounds)
    stale_after_ticks: int = 3
    chips: Table = field(init=False)
    links: Table = field(init=False)
    efa: Table = field(init=False)
    cooling: Table = field(init=False)
    facility: Table = field(init=False)
    # How often each node's and each site's frames come (core/cadence.py): their silence is judged in it.
    node_cadence: Cadence = field(init=False)
    site_cadence: Cadence = field(init=False)
    latest_tick: int = -1  # the tick of the last window's median sample (shown only; never judges freshness)
    latest_t_s: float = float("nan")  # that sample's time
    # The monitor's listening clock at the current analysis: ages are now_s - rx_s.
    now_s: float = float("nan")

    def __post_init__(self) -> None:
        topo = self.topology

        def table(kind: str, n: int, **options: Any) -> Table:
            return Table.empty(n, _DTYPES[kind], rated=_RATED_BY_TABLE[kind], summed=_SUMMED_BY_TABLE[kind],
                               bounds=self.bounds.of(kind, topo), ratios=frozenset(RATIOS.get(kind, ())),
                               **options)

        self.chips = table("chips", topo.n_chips, skip=_id_fields(CHIP_DTYPE))
        self.links = table("links", topo.n_links, skip=_id_fields(LINK_DTYPE))
        self.efa = table("efa", topo.n_efa, skip=_id_fields(EFA_DTYPE))
        self.cooling = table("cooling", topo.n_nodes)
        self.facility = table("facility", topo.n_sites)
        self.node_cadence = Cadence(topo.n_nodes)
        self.site_cadence = Cadence(topo.n_sites)

    def stale_after(self, table: Table, stale_after_s: float) -> float | F64:
        """Return how long ``table``'s entities may go unheard before they are silent: ``stale_after_s``, or
        ``stale_after_ticks`` of their stream's period where that is longer.

        A figure when it is ``stale_after_s`` for every entity; else one per
        stream (node, or site for the facility table) as a column, which
        broadcasts over the stream's entities laid out as rows (each node's
        chips, links and ports are one contiguous run of ids).
        """
        cadence = self.site_cadence if table is self.facility else self.node_cadence
        with np.errstate(invalid="ignore"):
            per_stream: F64 = np.fmax(self.stale_after_ticks * cadence.period_s, stale_after_s)  # NaN: unknown
        if not (per_stream > stale_after_s).any():
            return float(stale_after_s)
        column: F64 = per_stream[:, None]
        return column

    def node_stale_after_s(self, stale_after_s: float) -> F64:
        """Return each node's silence threshold (``stale_after``, one figure per node)."""
        limit = self.stale_after(self.cooling, stale_after_s)
        return np.full(self.topology.n_nodes, limit) if isinstance(limit, float) else limit[:, 0]

    def silent(self, table: Table, stale_after_s: float) -> B:
        """Return entities that reported once but were not heard within their ``stale_after`` before ``now_s``."""
        limit = self.stale_after(table, stale_after_s)
        with np.errstate(invalid="ignore"):
            age = self.now_s - table.rx_s
            if isinstance(limit, float):
                return np.asarray(age >= limit, dtype=bool)
            return np.asarray(age.reshape(limit.shape[0], -1) >= limit, dtype=bool).ravel()

    def fresh(self, table: Table, stale_after_s: float) -> B:
        """Return entities heard from within their ``stale_after`` before ``now_s`` (those that reported and are
        not silent)."""
        limit = self.stale_after(table, stale_after_s)
        with np.errstate(invalid="ignore"):
            age = self.now_s - table.rx_s
            if isinstance(limit, float):
                return np.asarray(age < limit, dtype=bool)
            return np.asarray(age.reshape(limit.shape[0], -1) < limit, dtype=bool).ravel()

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
    needed under a quarter of a buffer over 64 KiB, it is replaced by one of
    the size needed, so the burst's memory can go back.  A steady fleet, each
    window alike, never meets that and reallocates nothing.  (Over 1 MiB
    before issue 35: a fuzz's windows grew the demo fleet's buffers, each
    under 1 MiB, from 10 KiB to 0.7 MiB together, kept for good.)
    """

    SHRINK_AFTER: Final = 8
    _SHRINK_RATIO: Final = 4
    _SHRINK_BYTES: Final = 2**16

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
