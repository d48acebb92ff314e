"""rainierd's compiled passes (``kernels.c``), loaded once with ctypes, each behind a typed Python function.

Why compiled: at a million chips a tick's numpy calls each make a whole pass
with its own temporary, and a column joined from ~1,300 messages paid Python
for every piece (issue 39).  Why C through ctypes: the install step builds it
(pyproject.toml's ``ext-modules``, gcc and libc's headers; no Python headers),
so a process loads a finished library in about a millisecond and compiles
nothing, ever (numba's run-time compilation and ~2 s of loading were the
alternative measured and reverted); ctypes releases the GIL for each call, so
admission off the event loop stays off it.  There is one code path: no numpy
twin of a kernel is kept to agree with it.

Each wrapper checks the shapes and dtypes it hands over; the C side checks
every index against the sizes it is given and refuses (-1) rather than write
out of bounds, which the wrapper raises as ``RuntimeError`` (a defect, not bad
input: what reaches a kernel has passed the wire's checks).
"""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd._types import F32, F64, I64, U64, B, Floats

_MODULE: Final = "rainierd.native._kernels"


def library_path() -> str:
    """Return the path of the built library, or raise ImportError saying how to build it."""
    spec = importlib.util.find_spec(_MODULE)
    if spec is None or spec.origin is None:
        raise ImportError(
            "rainierd's compiled kernels are not built (rainierd/native/kernels.c): install rainierd with pip, "
            "which compiles them (it needs gcc and libc6-dev; scripts/run and scripts/test install both)")
    return spec.origin


_lib = ctypes.CDLL(library_path())
_i64, _ptr = ctypes.c_int64, ctypes.c_void_p
_lib.rd_join.argtypes = [_i64, _ptr, _ptr, _ptr, _ptr, _i64]
_lib.rd_join.restype = _i64
_lib.rd_scatter_rows.argtypes = [_i64, _ptr, _ptr, _ptr, _ptr, _i64, _i64, _i64, _ptr]
_lib.rd_scatter_rows.restype = _i64
_COUNTER_STEPS: Final = {np.dtype(dtype): getattr(_lib, f"rd_counter_step_{name}")
                         for dtype, name in ((np.uint64, "u64"), (np.uint32, "u32"), (np.int64, "i64"),
                                             (np.float64, "f64"))}
for _step in _COUNTER_STEPS.values():
    _step.argtypes = [_i64, _ptr, _ptr, _ptr, _i64, _i64, _ptr]
    _step.restype = _i64
_COUNTER_RATES: Final = {
    (np.dtype(total), np.dtype(rate)): getattr(_lib, f"rd_counter_rate_{name}_{rate_name}")
    for total, name in ((np.uint64, "u64"), (np.uint32, "u32"), (np.int64, "i64"), (np.float64, "f64"))
    for rate, rate_name in ((np.float32, "f32"), (np.float64, "f64"))
}
for _step in _COUNTER_RATES.values():
    _step.argtypes = [_i64, _ptr, _ptr, _ptr, _i64, _i64, _ptr, _ptr, _ptr, _i64, _i64, ctypes.c_double, _ptr, _ptr,
                      _i64, _ptr, _ptr]
    _step.restype = _i64
_SLOW_LOSS_ARGS: Final = [_ptr] * 10 + [_i64, _i64]
_lib.rd_slow_loss_sample.argtypes = [_i64, *_SLOW_LOSS_ARGS, _ptr, _i64, _ptr]
_lib.rd_slow_loss_ratios.argtypes = [_i64, *_SLOW_LOSS_ARGS, _ptr]
_lib.rd_slow_loss_step.argtypes = [_i64, *_SLOW_LOSS_ARGS, _ptr, _ptr, _ptr]
for _step in (_lib.rd_slow_loss_sample, _lib.rd_slow_loss_ratios, _lib.rd_slow_loss_step):
    _step.restype = _i64
SLOW_LOSS_PARAMS: Final = ("margin_se", "ratio_margin_se", "settled_count", "uncertain_se", "min_per_s", "detect",
                           "findable", "judge_s", "exponent", "h_min", "ceiling", "clear")
"""The slow-loss kernels' figures, in their order (kernels.c's SL_*), then 1 + each ratio test's multiple."""
_NL_ARGS: Final = [_i64, _i64, _i64] + [_ptr] * 18
_lib.rd_nl_sample.argtypes = [*_NL_ARGS, _ptr, _i64, _ptr, _ptr]
_lib.rd_nl_evidence.argtypes = [*_NL_ARGS] + [_ptr] * 10
for _step in (_lib.rd_nl_sample, _lib.rd_nl_evidence):
    _step.restype = _i64
NL_FIGURES: Final = ("learn_s", "down_below", "drop_below", "drop_min_s", "retrain_replays", "all_lanes",
                     "latency_band", "bandwidth_band", "idle_below", "bw_scale", "lat_scale")
"""The NeuronLink kernel's figures, in their order (kernels.c's NL_*), then k, h, cap, per_sample and ceiling of
the band's, bandwidth's, latency's and errors' CUSUMs."""
_EFA_ARGS: Final = [_i64] + [_ptr] * 9
_lib.rd_efa_sample.argtypes = [*_EFA_ARGS, _ptr, _i64, _ptr, _ptr]
_lib.rd_efa_evidence.argtypes = [*_EFA_ARGS] + [_ptr] * 15
for _step in (_lib.rd_efa_sample, _lib.rd_efa_evidence):
    _step.restype = _i64
EFA_FIGURES: Final = ("learn_s", "down_below", "alpha", "lat_center", "far_latency", "bw_scale", "lat_scale")
"""The EFA kernel's figures, in their order (kernels.c's EFA_*), then k, h, cap, per_sample and ceiling of the
throughput's, band's and latency's CUSUMs."""
_f32 = ctypes.c_float
_lib.rd_cusum_step.argtypes = [_i64, _ptr, _ptr, _ptr, _ptr, _ptr, _f32, _f32, _f32, _f32, _f32, _ptr]
_lib.rd_cusum_step.restype = _i64
_BASELINE_STEPS: Final = {np.dtype(np.float32): _lib.rd_baseline_step_f32,
                          np.dtype(np.float64): _lib.rd_baseline_step_f64}
for _step in _BASELINE_STEPS.values():
    _step.argtypes = [_i64, _ptr, _ptr, _ptr, _ptr, _ptr, _f32, _f32, _f32, _f32]
    _step.restype = _i64


def address(values: npt.NDArray[Any]) -> int:
    """Return the address of an array's first byte (the caller keeps the array alive while it is in use)."""
    at: int = values.__array_interface__["data"][0]
    return at


def addresses(buffers: Sequence[bytes | npt.NDArray[Any]]) -> tuple[U64, list[npt.NDArray[Any]]]:
    """Return each buffer's address, and the arrays over them the caller must hold while the addresses are used."""
    held = [np.frombuffer(b, np.uint8) if isinstance(b, bytes) else b for b in buffers]
    return np.array([address(b) for b in held], dtype=np.uint64), held


def _i64s(values: Sequence[int] | I64) -> I64:
    return np.ascontiguousarray(values, dtype=np.int64)


def join(base: U64, start: I64, nbytes: I64, out: npt.NDArray[Any]) -> None:
    """Write each part's ``nbytes[p]`` bytes from ``base[p] + start[p]`` (zeros where ``start[p]`` is negative)
    end to end into ``out``, which they must fill."""
    start, nbytes = _i64s(start), _i64s(nbytes)
    n = base.size
    if base.dtype != np.uint64 or start.size != n or nbytes.size != n or not out.flags.c_contiguous:
        raise ValueError("join: one address, start and size a part, into a contiguous array")
    if _lib.rd_join(n, address(base), address(start), address(nbytes), address(out), out.nbytes):
        raise RuntimeError(f"join: the parts' {int(nbytes.sum())} bytes do not fill {out.nbytes}")


def scatter_rows(base: U64, start: I64, entries: I64, row: I64, out: npt.NDArray[Any]) -> None:
    """Write the window's ``e``-th entry (counting through the parts in order) to ``out[row[e]]``.

    Part ``p`` holds ``entries[p]`` consecutive rows from ``base[p] +
    start[p]`` (zeros where ``start[p]`` is negative), each of ``out``'s row
    size in bytes; ``out`` is 2-D and every entry's row within it.
    """
    start, entries, row = _i64s(start), _i64s(entries), _i64s(row)
    n = base.size
    if base.dtype != np.uint64 or start.size != n or entries.size != n or out.ndim != 2 \
            or not out.flags.c_contiguous:
        raise ValueError("scatter_rows: one address, start and entry count a part, into a contiguous 2-D array")
    row_bytes = out.shape[1] * out.itemsize
    if _lib.rd_scatter_rows(n, address(base), address(start), address(entries), address(row), row.size,
                            out.shape[0], row_bytes, address(out)):
        raise RuntimeError(f"scatter_rows: {row.size} entries do not fit {out.shape[0]} rows")


def counter_step(new: npt.NDArray[Any], total: npt.NDArray[Any], at: slice | I64, diff: F64 | None) -> None:
    """Store a counter's new totals: ``total[at] = new``, and, unless ``diff`` is None, ``diff = new - total[at]``
    as it was (float64), in one pass.

    ``new`` in another dtype than ``total``'s (the counter's wire dtype, as
    the window's columns are) is first cast to it, as numpy's assignment
    would, and the difference is the stored total's; ``at`` is a slice of
    ``total`` (step 1) or one index a sample, each within it.
    """
    step = _COUNTER_STEPS.get(total.dtype)
    if step is None or total.ndim != 1 or not total.flags.c_contiguous:
        raise TypeError(f"counter_step: into {total.dtype}: one contiguous counter column of a kind the kernels know")
    new = np.ascontiguousarray(new, dtype=total.dtype)
    if isinstance(at, slice):
        first, stop, stride = at.indices(total.size)
        if stride != 1 or stop - first != new.size:
            raise ValueError(f"counter_step: {new.size} samples into {at}")
        index: I64 | None = None
    else:
        index, first = _i64s(at), 0
        if index.size != new.size:
            raise ValueError(f"counter_step: {new.size} samples for {index.size} entities")
    if diff is not None and (diff.dtype != np.float64 or diff.size != new.size or not diff.flags.c_contiguous):
        raise ValueError("counter_step: one float64 difference a sample")
    if step(new.size, address(new), address(total), None if index is None else address(index), first, total.size,
            None if diff is None else address(diff)):
        raise RuntimeError(f"counter_step: an entity outside the {total.size} of the table")


def counter_rate(
    new: npt.NDArray[Any], total: npt.NDArray[Any], at: slice | I64, *, dt: F32, had: npt.NDArray[np.uint16] | None,
    present: npt.NDArray[np.uint16] | None, bit: int, limit: float, per_kind: F64 | None, kind_of: I64 | None,
    per_s: bool, rate: npt.NDArray[np.floating[Any]],
) -> tuple[int, int, int]:
    """Store a rated counter's new totals (``total[at] = new``) and its rates (``rate[at]``) in one pass; return
    the samples refused (over the bound, negative resets, resets over the bound).

    The rule is ``Table._store_counters``'s (rainierd/core/state.py): the
    rate is the new total less the stored one (float64) over ``dt`` (one
    float32 a sample), unknown where the entity's last sample (``had``, the
    table's ``known``, one an entity) or this one (``present``, one a sample)
    lacks ``bit``, or either is None for "all have it".  Without ``per_s``,
    ``limit`` bounds the difference; with it, the rate, by ``limit`` or, with
    ``per_kind``, by the entity's kind's (``kind_of``, one an entity).  ``new``
    in another dtype than ``total``'s is cast to it first, as numpy's
    assignment would.
    """
    step = _COUNTER_RATES.get((total.dtype, rate.dtype))
    n_total = total.size
    for column in (total, rate, *(() if had is None else (had,)), *(() if kind_of is None else (kind_of,))):
        if column.ndim != 1 or column.size != n_total or not column.flags.c_contiguous:
            raise TypeError("counter_rate: the table's columns are contiguous, one value an entity")
    wrong_types = (had is not None and had.dtype != np.uint16) or (kind_of is not None and kind_of.dtype != np.int64)
    if step is None or wrong_types:
        raise TypeError(f"counter_rate: {total.dtype} totals into {rate.dtype} rates: not a kind the kernels know")
    new = np.ascontiguousarray(new, dtype=total.dtype)
    if isinstance(at, slice):
        first, stop, stride = at.indices(n_total)
        if stride != 1 or stop - first != new.size:
            raise ValueError(f"counter_rate: {new.size} samples into {at}")
        index: I64 | None = None
    else:
        index, first = _i64s(at), 0
        if index.size != new.size:
            raise ValueError(f"counter_rate: {new.size} samples for {index.size} entities")
    seconds = np.ascontiguousarray(dt, dtype=np.float32)
    carried = None if present is None else np.ascontiguousarray(present, dtype=np.uint16)
    if seconds.size != new.size or (carried is not None and carried.size != new.size):
        raise ValueError("counter_rate: one interval and one known mask a sample")
    kinds = None if per_kind is None else np.ascontiguousarray(per_kind, dtype=np.float64)
    if (kinds is None) != (kind_of is None) or (kinds is not None and not per_s):
        raise ValueError("counter_rate: a limit per kind takes the entities' kinds, and bounds the rate")
    mode = 0 if not per_s else 1 if kinds is None else 2
    counts = np.zeros(3, np.int64)
    if step(new.size, address(new), address(total), None if index is None else address(index), first, n_total,
            address(seconds), None if had is None else address(had), None if carried is None else address(carried),
            bit, mode, limit, None if kinds is None else address(kinds),
            None if kind_of is None else address(kind_of), 0 if kinds is None else kinds.size, address(rate),
            address(counts)):
        raise RuntimeError(f"counter_rate: an entity outside the {n_total} of the table, or a kind without a limit")
    return int(counts[0]), int(counts[1]), int(counts[2])


def _per_entity(values: Floats | float | None, n: int) -> F32 | None:
    """Return ``values`` (one an entity, or one for all) as one float32 an entity, or None."""
    if values is None:
        return None
    array = np.asarray(values)
    if array.ndim == 0 or array.size == 1:
        return np.full(n, array.reshape(-1)[0] if array.size else np.nan, np.float32)
    if array.shape != (n,):
        raise ValueError(f"{array.shape} values for {n} entities")
    return np.ascontiguousarray(array, dtype=np.float32)


def cusum_step(
    s: F32, x: Floats, mask: B, *, seconds: Floats | float | None, drain_seconds: Floats | float | None, k: float,
    h: float, cap: float, per_sample: float, ceiling: float,
) -> B:
    """Take one step of the CUSUMs ``s`` (float32, in place) and return where they are in alarm (``s >= h``).

    The rule is ``ClippedCusum.update``'s (rainierd/core/detect/_stats.py),
    computed in float32 operation for operation as numpy did, so the sums are
    numpy's bit for bit; ``per_sample`` is ``h / samples``.  ``x`` (cast to
    float32, as numpy's step was) and ``mask`` have one value an entity;
    ``seconds`` and ``drain_seconds`` one an entity or one for all, or None.
    """
    n = s.size
    if s.dtype != np.float32 or s.ndim != 1 or not s.flags.c_contiguous:
        raise TypeError("cusum_step: the sums are one contiguous float32 array")
    values = np.ascontiguousarray(np.broadcast_to(x, s.shape), dtype=np.float32)
    judged = np.ascontiguousarray(np.broadcast_to(mask, s.shape), dtype=np.bool_)
    interval = _per_entity(seconds, n)
    drain = None if interval is None else _per_entity(drain_seconds, n)  # a drain only counts with intervals
    alarm = np.empty(n, dtype=np.bool_)
    if _lib.rd_cusum_step(n, address(s), address(values), address(judged),
                          None if interval is None else address(interval), None if drain is None else address(drain),
                          k, h, cap, per_sample, ceiling, address(alarm)):
        raise RuntimeError("cusum_step: refused")
    return alarm


def baseline_step(
    level: F32, history: F32, x: Floats, accept: B, seconds: Floats | float, *, window_cap: float, learn_s: float,
    clip: float, learn_shrink: float,
) -> None:
    """Fold ``x`` into the levels ``level`` and their ``history`` (float32, in place) where ``accept``.

    The rule is ``Baseline.update``'s (rainierd/core/detect/_baseline.py),
    computed in float32 operation for operation as numpy did, so both are
    numpy's bit for bit: ``window_cap`` is ``halflife_s / ln 2``,
    ``learn_shrink`` is ``learn_clip / clip``.  ``x`` and ``seconds`` (one a
    level, or one for all) are judged finite and positive in their own
    dtype, float32 or float64, as numpy judged them.
    """
    n = level.size
    for values in (level, history):
        if values.dtype != np.float32 or values.shape != (n,) or not values.flags.c_contiguous:
            raise TypeError("baseline_step: levels and histories are contiguous float32 arrays of one size")
    interval = np.asarray(seconds)
    dtype = np.result_type(np.asarray(x).dtype, interval.dtype, np.float32)
    step = _BASELINE_STEPS.get(dtype)
    if step is None:
        raise TypeError(f"baseline_step: samples and intervals of {dtype}")
    samples = np.ascontiguousarray(np.broadcast_to(x, level.shape), dtype=dtype)
    accepted = np.ascontiguousarray(np.broadcast_to(accept, level.shape), dtype=np.bool_)
    interval = np.ascontiguousarray(np.broadcast_to(interval, level.shape), dtype=dtype)
    if step(n, address(level), address(history), address(samples), address(accepted), address(interval),
            window_cap, learn_s, clip, learn_shrink):
        raise RuntimeError("baseline_step: refused")


class SlowLossPorts:
    """One tick's inputs of the EFA slow-loss test (``SlowLossTest.update``, rainierd/core/detect/slow_loss.py,
    documents the rule), for its three compiled passes: the sample's clipped counts, each test's ratio for its
    logarithm (taken by numpy, whose vectorised log no C library reproduces), and the steps into the CUSUMs.

    Each pass recomputes a port's figures from these inputs, in float32 operation for operation as numpy did,
    rather than keep a dozen fleet-sized temporaries from one to the next.
    """

    def __init__(self, *, counts: Floats, dt_s: Floats, fresh: B, own_rate: Floats, sent_packets_s: Floats,
                 exposure: F32, prior: F32, count: F32, history_s: F32, figures: Sequence[float],
                 ratios: Sequence[float], started: bool) -> None:
        n = exposure.size
        self.n, self.tests = n, 1 + len(ratios)
        if len(figures) != len(SLOW_LOSS_PARAMS) or not 2 <= self.tests <= 8:
            raise ValueError(f"slow loss: {len(SLOW_LOSS_PARAMS)} figures and one to seven ratio tests")
        floats = [np.ascontiguousarray(np.broadcast_to(a, (n,)), dtype=np.float32)
                  for a in (counts, dt_s, own_rate, sent_packets_s, exposure, prior, count, history_s)]
        self._held = [*floats, np.ascontiguousarray(np.broadcast_to(fresh, (n,)), dtype=np.bool_),
                      np.array([*figures, *(1.0 + r for r in ratios)], np.float32)]
        counts_, dt_, own, sent, exposure_, prior_, count_, history = (address(a) for a in floats)
        self._args = (counts_, dt_, address(self._held[8]), own, sent, exposure_, prior_, count_, history,
                      address(self._held[9]), int(started), self.tests)

    def sample(self, index: I64 | None) -> F32:
        """Return, for the ports ``index`` (None: all), four rows: the fraction test's count with bursts
        clipped, the interval it covers, the packets sent in it, and 1 where it counts (else 0)."""
        at = np.arange(self.n, dtype=np.int64) if index is None else _i64s(index)
        out = np.empty((4, at.size), np.float32)
        if _lib.rd_slow_loss_sample(self.n, *self._args, address(at), at.size, address(out)):
            raise RuntimeError(f"slow_loss_sample: a port outside the {self.n}")
        return out

    def ratios(self) -> F32:
        """Return each test's rise over its in-control rate, (tests, ports): what its logarithm is taken of."""
        out = np.empty((self.tests, self.n), np.float32)
        if _lib.rd_slow_loss_ratios(self.n, *self._args, address(out)):
            raise RuntimeError("slow_loss_ratios: refused")
        return out

    def step(self, log_ratio: F32, sums: F32, lossy: B) -> None:
        """Step each test's CUSUM (``sums``, (tests, ports) float32, in place) by its ``log_ratio``-tuned step
        where the port is judged; raise and clear ``lossy`` (in place) by them."""
        shape = (self.tests, self.n)
        for values, dtype in ((log_ratio, np.float32), (sums, np.float32)):
            if values.shape != shape or values.dtype != dtype or not values.flags.c_contiguous:
                raise TypeError(f"slow_loss_step: {shape} contiguous float32 arrays")
        if lossy.shape != (self.n,) or lossy.dtype != np.bool_ or not lossy.flags.c_contiguous:
            raise TypeError("slow_loss_step: one contiguous bool a port")
        if _lib.rd_slow_loss_step(self.n, *self._args, address(log_ratio), address(sums), address(lossy)):
            raise RuntimeError("slow_loss_step: refused")


class LinkEvidence:
    """One tick's inputs of the NeuronLink detector's evidence (``LinkDetector.update``,
    rainierd/core/detect/neuronlink.py, documents the rule), for its compiled passes: the peer sample's
    bandwidth and latency ratios (for the robust scales numpy takes), then every link's evidence in one pass.

    Links are ``per_node`` a node in one order (``kind_order``, each link's kind); ``pace`` is each node's
    median share of its links of each kind, (nodes, kinds); ``share_ref``, ``nominal`` and ``lat_center``
    are one a kind.  Every array is float32 (``fresh`` bool), one a link unless said.
    """

    def __init__(self, *, per_node: int, kind_order: npt.NDArray[np.integer[Any]], bw: F32, latency: F32, lanes: F32,
                 dt: F32, held: F32, crc: F32, replay: F32, fresh: B, pace: F32, share_ref: F32, nominal: F32,
                 lat_center: F32, bw_level: F32, bw_history: F32, lat_level: F32, lat_history: F32) -> None:
        n = bw.size
        n_kinds = share_ref.size
        links = [np.ascontiguousarray(a, dtype=np.float32)
                 for a in (bw, latency, lanes, dt, held, crc, replay, bw_level, bw_history, lat_level, lat_history)]
        if any(a.shape != (n,) for a in links) or fresh.shape != (n,) or pace.shape != (n // per_node, n_kinds) \
                or kind_order.shape != (per_node,) or nominal.shape != (n_kinds,) or lat_center.shape != (n_kinds,):
            raise ValueError("link evidence: one value a link, a pace a node and kind, one figure a kind")
        kinds = [np.ascontiguousarray(a, dtype=np.float32) for a in (pace, share_ref, nominal, lat_center)]
        order = np.ascontiguousarray(kind_order, dtype=np.int8)
        judged = np.ascontiguousarray(fresh, dtype=np.bool_)
        self.n = n
        self._held = [*links, *kinds, order, judged]
        bw_, latency_, lanes_, dt_, held_, crc_, replay_, bw_level_, bw_history_, lat_level_, lat_history_ = (
            address(a) for a in links)
        pace_, share_ref_, nominal_, lat_center_ = (address(a) for a in kinds)
        self._args = (n, per_node, n_kinds, address(order), bw_, latency_, lanes_, dt_, held_, crc_, replay_,
                      address(judged), pace_, share_ref_, nominal_, lat_center_, bw_level_, bw_history_,
                      lat_level_, lat_history_)

    def sample(self, index: I64 | None, figures: Sequence[float]) -> tuple[F32, B, F32, B]:
        """Return, for the links ``index`` (None: all), the bandwidth ratio and whether it is judged, and the
        latency over its reference and whether that is judged (``figures``: ``NL_FIGURES``' and the CUSUMs')."""
        at = np.arange(self.n, dtype=np.int64) if index is None else _i64s(index)
        values, judged = np.empty((2, at.size), np.float32), np.empty((2, at.size), np.bool_)
        held = np.ascontiguousarray(figures, dtype=np.float32)
        if _lib.rd_nl_sample(*self._args, address(held), address(at), at.size, address(values), address(judged)):
            raise RuntimeError(f"nl_sample: a link outside the {self.n}, or a kind outside the figures")
        return values[0], judged[0], values[1], judged[1]

    def evidence(self, figures: Sequence[float], bits: Sequence[int], *, now_ratio: F32, was_low: B, sums: F32,
                 ) -> tuple[F32, npt.NDArray[np.int8], npt.NDArray[np.int32], B, B, B]:
        """Judge every link; update ``now_ratio``, ``was_low`` and the CUSUMs' ``sums`` (four rows: band,
        bandwidth, latency, errors) in place; return (its share of its node's pace, its candidate state, its
        reasons but flapping, dropped, its bandwidth learnable, its latency judged).  ``bits`` are the reasons'
        bits: lanes, bandwidth, latency, errors, down."""
        n = self.n
        if now_ratio.shape != (n,) or now_ratio.dtype != np.float32 or was_low.shape != (n,) \
                or was_low.dtype != np.bool_ or sums.shape != (4, n) or sums.dtype != np.float32 \
                or not (now_ratio.flags.c_contiguous and was_low.flags.c_contiguous and sums.flags.c_contiguous):
            raise TypeError("nl_evidence: contiguous float32 ratios, bool lows, (4, links) float32 sums")
        held = np.ascontiguousarray(figures, dtype=np.float32)
        reason_bits = np.ascontiguousarray(bits, dtype=np.int32)
        if held.size != len(NL_FIGURES) + 20 or reason_bits.size != 5:
            raise ValueError("nl_evidence: the kernel's figures and five reason bits")
        share = np.empty(n, np.float32)
        candidate = np.empty(n, np.int8)
        reasons = np.empty(n, np.int32)
        flags = np.empty((3, n), np.bool_)
        if _lib.rd_nl_evidence(*self._args, address(held), address(reason_bits), address(now_ratio),
                               address(was_low), address(sums), address(share), address(candidate),
                               address(reasons), address(flags[0]), address(flags[1]), address(flags[2])):
            raise RuntimeError("nl_evidence: refused (a kind outside the figures, or links not whole nodes)")
        return share, candidate, reasons, flags[0], flags[1], flags[2]


class PortEvidence:
    """One tick's inputs of the EFA detector's evidence (``EfaDetector.update``, rainierd/core/detect/efa.py,
    documents the rule), for its compiled passes: the peer sample's throughput and latency ratios (for the
    robust scales numpy takes), then every port's evidence in one pass.  Every array is float32 (``fresh``
    bool), one a port: its traffic (``rate``, NaN where not fresh), its node's reference (the median of its
    other ports), its latency, and its two learned levels with their histories.
    """

    def __init__(self, *, rate: F32, ref: F32, latency: F32, fresh: B, share_level: F32, share_history: F32,
                 lat_level: F32, lat_history: F32) -> None:
        n = rate.size
        ports = [np.ascontiguousarray(a, dtype=np.float32)
                 for a in (rate, ref, latency, share_level, share_history, lat_level, lat_history)]
        if any(a.shape != (n,) for a in ports) or fresh.shape != (n,):
            raise ValueError("port evidence: one value a port")
        judged = np.ascontiguousarray(fresh, dtype=np.bool_)
        self.n = n
        self._held = [*ports, judged]
        rate_, ref_, latency_, share_level_, share_history_, lat_level_, lat_history_ = (address(a) for a in ports)
        self._args = (n, rate_, ref_, latency_, address(judged), share_level_, share_history_, lat_level_,
                      lat_history_)

    def sample(self, index: I64 | None, figures: Sequence[float]) -> tuple[F32, B, F32, B]:
        """Return, for the ports ``index`` (None: all), the throughput ratio and whether it is judged (active),
        and the latency over its reference and whether that is judged."""
        at = np.arange(self.n, dtype=np.int64) if index is None else _i64s(index)
        values, judged = np.empty((2, at.size), np.float32), np.empty((2, at.size), np.bool_)
        held = _figures(figures, len(EFA_FIGURES) + 15)
        if _lib.rd_efa_sample(*self._args, address(held), address(at), at.size, address(values), address(judged)):
            raise RuntimeError(f"efa_sample: a port outside the {self.n}")
        return values[0], judged[0], values[1], judged[1]

    def evidence(self, figures: Sequence[float], bits: Sequence[int], *, dt: F32, held: F32,
                 unresponsive_rate: F32, bursting: B, lossy: B, was_low: B, share_ewma: F32, lat_ewma: F32,
                 sums: F32) -> tuple[F32, npt.NDArray[np.int32], B, B, B]:
        """Judge every port; update ``was_low``, the EWMAs and the CUSUMs' ``sums`` (three rows: throughput,
        band, latency) in place; return (its share of its node's traffic, its reasons, down, active, its
        latency judged).  ``bits`` are the reasons' bits: bandwidth, latency, retransmits, loss rate, down,
        unresponsive."""
        n = self.n
        inputs = [np.ascontiguousarray(a, dtype=np.float32) for a in (dt, held, unresponsive_rate)]
        flags_in = [np.ascontiguousarray(a, dtype=np.bool_) for a in (bursting, lossy)]
        if any(a.shape != (n,) for a in (*inputs, *flags_in)):
            raise ValueError("efa_evidence: one value a port")
        for values, dtype in ((was_low, np.bool_), (share_ewma, np.float32), (lat_ewma, np.float32)):
            if values.shape != (n,) or values.dtype != dtype or not values.flags.c_contiguous:
                raise TypeError("efa_evidence: contiguous state, one value a port")
        if sums.shape != (3, n) or sums.dtype != np.float32 or not sums.flags.c_contiguous:
            raise TypeError("efa_evidence: (3, ports) float32 sums")
        held_figures = _figures(figures, len(EFA_FIGURES) + 15)
        reason_bits = np.ascontiguousarray(bits, dtype=np.int32)
        if reason_bits.size != 6:
            raise ValueError("efa_evidence: six reason bits")
        share = np.empty(n, np.float32)
        reasons = np.empty(n, np.int32)
        flags = np.empty((3, n), np.bool_)
        if _lib.rd_efa_evidence(*self._args, address(held_figures), *(address(a) for a in inputs),
                                *(address(a) for a in flags_in), address(reason_bits), address(was_low),
                                address(share_ewma), address(lat_ewma), address(sums), address(share),
                                address(reasons), address(flags[0]), address(flags[1]), address(flags[2])):
            raise RuntimeError("efa_evidence: refused")
        return share, reasons, flags[0], flags[1], flags[2]


def _figures(figures: Sequence[float], size: int) -> F32:
    """Return a kernel's figures as float32, refusing any other count than it reads."""
    held = np.ascontiguousarray(figures, dtype=np.float32)
    if held.shape != (size,):
        raise ValueError(f"{held.size} figures for a kernel that reads {size}")
    return held
