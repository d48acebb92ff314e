"""Specification of the compiled passes (rainierd/native): each copies what it is told to, where it is told
to, and refuses any call that would read or write outside the sizes it is given; loading them compiles nothing."""

from __future__ import annotations

import importlib
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rainierd import native
from rainierd.core.bounds import EXACT

_EVENTS: list[tuple[str, tuple[object, ...]]] = []
_RECORDING: list[bool] = []  # non-empty: recording


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _RECORDING:
        _EVENTS.append((event, args))


sys.addaudithook(_audit)  # an audit hook cannot be removed: it records only inside ``recording``


@pytest.fixture
def recording() -> Iterator[list[tuple[str, tuple[object, ...]]]]:
    _EVENTS.clear()
    _RECORDING.append(True)
    try:
        yield _EVENTS
    finally:
        _RECORDING.clear()


def test_loading_the_kernels_opens_the_installed_library_and_starts_no_compiler(
        recording: list[tuple[str, tuple[object, ...]]]) -> None:
    importlib.reload(native)
    opened = [args[0] for event, args in recording if event == "ctypes.dlopen"]
    started = [event for event, _ in recording
               if event in {"subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.fork"}]
    assert started == []
    assert opened == [native.library_path()]
    library = Path(native.library_path())
    assert library.parent == Path(native.__file__).parent
    assert library.name.startswith("_kernels.")


def _parts(*payloads: bytes) -> tuple[np.ndarray, list[np.ndarray]]:
    return native.addresses(list(payloads))


class TestJoin:
    def test_each_parts_span_follows_the_last_and_a_missing_column_is_zeros(self) -> None:
        a = np.arange(10, dtype=np.float32).tobytes()
        b = np.arange(100, 106, dtype=np.float32).tobytes()
        base, _held = _parts(a, b, b"")
        out = np.full(7, -1, np.float32)
        native.join(base, np.array([8, 4, -1]), np.array([3, 2, 2]) * 4, out)
        assert out.tolist() == [2.0, 3.0, 4.0, 101.0, 102.0, 0.0, 0.0]

    @pytest.mark.parametrize("sizes", [[3, 2, 0], [3, 2, 3], [3, -1, 5]])
    def test_sizes_that_do_not_fill_the_output_exactly_are_refused_without_writing_past_it(self,
                                                                                        sizes: list[int]) -> None:
        base, _held = _parts(b"\x01" * 64, b"\x02" * 64, b"\x03" * 64)
        buffer = np.zeros(12, np.uint8)
        out = buffer[:6]
        with pytest.raises(RuntimeError):
            native.join(base, np.array([0, 0, 0]), np.array(sizes), out)
        assert not buffer[6:].any()

    def test_one_start_and_size_a_part_into_a_contiguous_array(self) -> None:
        base, _held = _parts(b"\x01" * 8)
        with pytest.raises(ValueError, match="one address, start and size a part"):
            native.join(base, np.array([0, 0]), np.array([4]), np.zeros(4, np.uint8))
        with pytest.raises(ValueError, match="into a contiguous array"):
            native.join(base, np.array([0]), np.array([4]), np.zeros(8, np.uint8)[::2])


class TestScatterRows:
    def test_each_entry_lands_in_its_row_from_whichever_part_holds_it(self) -> None:
        # Two parts: entries 0-1 in the first, 2-4 in the second, three int64 records an entry.
        first = np.arange(6, dtype=np.int64).reshape(2, 3)
        second = np.arange(100, 109, dtype=np.int64).reshape(3, 3)
        base, _held = native.addresses([first, second])
        row = np.array([4, 0, 2, 1, 3])
        out = np.full((5, 3), -1, np.int64)
        native.scatter_rows(base, np.array([0, 0]), np.array([2, 3]), row, out)
        expected = np.concatenate([first, second])[np.argsort(row)]
        assert np.array_equal(out, expected)

    def test_a_part_without_the_column_gives_its_rows_zeros(self) -> None:
        held = np.ones((2, 2), np.float32)
        base, _held = native.addresses([held, b""])
        out = np.full((3, 2), 7, np.float32)
        native.scatter_rows(base, np.array([0, -1]), np.array([2, 1]), np.array([2, 0, 1]), out)
        assert out.tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]  # the second part's entry went to row 1

    @pytest.mark.parametrize("row", [[0, 3], [-1, 0], [0, 2**62]])
    def test_a_row_outside_the_output_is_refused_and_nothing_lands_beyond_it(self, row: list[int]) -> None:
        values = np.ones((2, 4), np.uint8)
        base, _held = native.addresses([values])
        buffer = np.zeros((6, 4), np.uint8)
        out = buffer[:3]
        with pytest.raises(RuntimeError):
            native.scatter_rows(base, np.array([0]), np.array([2]), np.array(row), out)
        assert not buffer[3:].any()

    def test_more_entries_than_rows_given_is_refused(self) -> None:
        values = np.ones((3, 1), np.uint8)
        base, _held = native.addresses([values])
        with pytest.raises(RuntimeError):
            native.scatter_rows(base, np.array([0]), np.array([3]), np.array([0, 1]), np.zeros((3, 1), np.uint8))


class TestCounterStep:
    def test_a_run_of_entities_takes_the_new_totals_and_gives_their_increase(self) -> None:
        total = np.array([10, 20, 30, 40], np.uint64)
        diff = np.full(2, np.nan)
        native.counter_step(np.array([25, 29], np.uint64), total, slice(1, 3), diff)
        assert total.tolist() == [10, 25, 29, 40]
        assert diff.tolist() == [5.0, -1.0]  # a counter that went back: negative, for the reset's judgement

    def test_entities_by_index_and_no_difference_asked(self) -> None:
        total = np.array([1.5, 2.5, 3.5])
        native.counter_step(np.array([9.0, 7.0]), total, np.array([2, 0]), None)
        assert total.tolist() == [7.0, 2.5, 9.0]

    def test_the_difference_is_numpys_float64_one(self) -> None:
        rng = np.random.default_rng(1)
        before = rng.integers(0, 2**63, 1_000, dtype=np.uint64)
        new = rng.integers(0, 2**63, 1_000, dtype=np.uint64)
        total, diff = before.copy(), np.empty(1_000)
        native.counter_step(new, total, slice(0, 1_000), diff)
        assert np.array_equal(diff, np.subtract(new, before, dtype=np.float64))
        assert np.array_equal(total, new)

    def test_other_dtypes_are_cast_to_the_counters_as_an_assignment_would(self) -> None:
        total = np.zeros(2, np.uint64)
        native.counter_step(np.array([3.0, 4.0]), total, slice(0, 2), None)
        assert total.dtype == np.uint64
        assert total.tolist() == [3, 4]

    @pytest.mark.parametrize("at", [np.array([0, 4]), np.array([-1, 0])])
    def test_an_entity_outside_the_table_refuses_the_call_before_anything_is_written(self, at: np.ndarray) -> None:
        total = np.zeros(4, np.uint64)
        with pytest.raises(RuntimeError):
            native.counter_step(np.array([7, 7], np.uint64), total, at, None)
        assert not total.any()

    def test_a_slice_must_hold_exactly_the_samples(self) -> None:
        with pytest.raises(ValueError, match="samples into"):
            native.counter_step(np.array([1, 2], np.uint64), np.zeros(4, np.uint64), slice(3, 5), None)


def _numpy_counter_rate(new: np.ndarray, total: np.ndarray, at: slice | np.ndarray, *, dt: np.ndarray,
                        had: np.ndarray, present: np.ndarray | None, bit: int, per_s: float | np.ndarray | None,
                        rate: np.ndarray) -> Counter[str]:
    """Table._store_counters' rate as numpy computed it before the kernel (bd1c9ba), the kernel's oracle: the
    difference, its masks, its bound (``per_s``: None for EXACT on the difference, else one per sample), its
    resets judged, its store."""
    refused: Counter[str] = Counter()
    diff = np.subtract(new, total[at], dtype=np.float64)
    total[at] = new
    diff[(had[at] & bit) == 0] = np.nan
    if present is not None:
        diff[(present & bit) == 0] = np.nan
    if per_s is None:
        over, fell = diff > EXACT, diff < 0
        np.divide(diff, dt, out=diff)
        limit: float | np.ndarray = EXACT
    else:
        np.divide(diff, dt, out=diff)
        over, fell = diff > per_s, diff < 0
        limit = per_s * dt.astype(np.float64)
    refused["over_bound"] += int(np.count_nonzero(over))
    diff[over] = np.nan
    value = new[fell].astype(np.float64)
    bound = limit if isinstance(limit, float) else limit[fell]
    negative = value < 0
    refused["negative"] += int(negative.sum())
    refused["reset_over_bound"] += int((~negative & ~(value <= bound)).sum())
    diff[fell] = np.nan
    rate[at] = diff
    return refused


class TestCounterRate:
    """A rated counter's totals and rates are the numpy store's, bit for bit, with its refusals counted alike."""

    @pytest.mark.parametrize("bounded", ["difference", "per-second", "per-kind"])
    @pytest.mark.parametrize("dtypes", [(np.uint64, np.float32), (np.uint64, np.float64), (np.uint32, np.float32),
                                        (np.int64, np.float32), (np.float64, np.float64)])
    @pytest.mark.parametrize("by_index", [False, True])
    def test_totals_rates_and_refusals_are_numpys_over_many_steps(self, bounded: str, dtypes: tuple[type, type],
                                                                  by_index: bool) -> None:
        total_type, rate_type = dtypes
        rng = np.random.default_rng(7)
        n, bit = 3_000, 1 << 2
        kinds = rng.integers(0, 3, n).astype(np.int64)
        per_kind = np.array([50.0, 400.0, 3_000.0])
        ours = (np.zeros(n, total_type), np.full(n, np.nan, rate_type))
        numpys = (np.zeros(n, total_type), np.full(n, np.nan, rate_type))
        known = rng.integers(0, 8, n).astype(np.uint16)
        totals = rng.integers(0, 1_000, n).astype(np.float64)
        for step in range(12):
            at: slice | np.ndarray = rng.permutation(n)[: n // 2] if by_index else slice(100, n - 100)
            size = n // 2 if by_index else n - 200
            totals += rng.choice([0.0, 3.0, 40.0, 800.0, 5_000.0], n)
            new = totals.copy()
            reset = rng.random(n) < 0.05
            new[reset] = rng.choice([0.0, 2.0, 900.0, 9e5] + ([-5.0] if np.issubdtype(total_type, np.signedinteger)
                                                                or total_type is np.float64 else []), reset.sum())
            totals[reset] = new[reset]
            sample = new[at].astype(total_type)
            dt = rng.choice(np.array([1.0, 0.5, 2.0, np.nan], np.float32), size)
            present = rng.integers(0, 8, size).astype(np.uint16) if step % 3 else None
            kind = kinds[at]
            per_s = {"difference": None, "per-second": 500.0, "per-kind": per_kind[kind]}[bounded]
            expected = _numpy_counter_rate(sample, numpys[0], at, dt=dt, had=known, present=present, bit=bit,
                                           per_s=per_s, rate=numpys[1])
            counts = native.counter_rate(
                sample, ours[0], at, dt=dt, had=known, present=present, bit=bit,
                limit=EXACT if bounded == "difference" else 500.0 if bounded == "per-second" else 0.0,
                per_kind=per_kind if bounded == "per-kind" else None,
                kind_of=kinds if bounded == "per-kind" else None, per_s=bounded != "difference", rate=ours[1])
            assert counts == (expected["over_bound"], expected["negative"], expected["reset_over_bound"])
            assert np.array_equal(ours[0], numpys[0])
            assert np.array_equal(ours[1], numpys[1], equal_nan=True)
            if present is None:
                known[at] = 0b111
            else:
                known[at] = present
        assert sum(counts) or bounded == "difference"  # the bounds were exercised

    def test_an_entity_outside_the_table_refuses_the_call_before_anything_is_written(self) -> None:
        total, rate = np.zeros(4, np.uint64), np.full(4, np.nan, np.float32)
        with pytest.raises(RuntimeError):
            native.counter_rate(np.array([7, 7], np.uint64), total, np.array([0, 4]), dt=np.ones(2, np.float32),
                                had=None, present=None, bit=1, limit=EXACT, per_kind=None, kind_of=None, per_s=False,
                                rate=rate)
        assert not total.any()
        assert np.isnan(rate).all()

    def test_a_kind_without_a_limit_is_refused(self) -> None:
        with pytest.raises(RuntimeError, match="kind without a limit"):
            native.counter_rate(np.array([7], np.uint64), np.zeros(1, np.uint64), slice(0, 1),
                                dt=np.ones(1, np.float32), had=None, present=None, bit=1, limit=0.0,
                                per_kind=np.array([1.0]), kind_of=np.array([3], np.int64), per_s=True,
                                rate=np.zeros(1, np.float32))


def _numpy_cusum(s: np.ndarray, x: np.ndarray, mask: np.ndarray, *, k: float, h: float, cap: float, ceiling: float,
                 samples: float, seconds: np.ndarray | float | None, drain_seconds: np.ndarray | float | None,
                 ) -> np.ndarray:
    """ClippedCusum.update as numpy computed it before the kernel (9f11986), the kernel's oracle."""
    unknown = np.isnan(x)
    alarmed = np.flatnonzero(s >= np.float32(h))
    step = np.minimum(x, np.float32(cap), dtype=np.float32)
    np.copyto(step, np.float32(0.0), where=unknown)
    known = np.logical_not(unknown, out=unknown)
    known &= mask
    step -= np.float32(k)
    if seconds is not None:
        interval = np.fmax(seconds, np.float32(0.0)).astype(np.float32, copy=False)
        step *= interval
        np.minimum(step, np.float32(h / samples), out=step)
    if alarmed.size:
        span: np.ndarray | np.float32 = np.float32(1.0)
        if seconds is not None:
            span = np.broadcast_to(interval, step.shape)[alarmed]
            if drain_seconds is not None:
                span = np.fmax(span, np.broadcast_to(np.asarray(drain_seconds, np.float32), step.shape)[alarmed])
        full = np.float32(-k) * span
        moved = step[alarmed]
        step[alarmed] = np.where(moved < 0, np.minimum(moved, full), moved)
    step += s
    np.clip(step, 0.0, ceiling, out=step)
    np.copyto(s, step, where=known)
    return s >= h


class TestCusumStep:
    """The CUSUM's step is numpy's, bit for bit, over evidence with NaNs, alarms, capped and draining sums."""

    @pytest.mark.parametrize("timing", ["none", "per-entity", "one-for-all", "drained", "drained-one-for-all"])
    @pytest.mark.parametrize("seed", [0, 1, 2])
    def test_sums_and_alarms_are_numpys_over_many_steps(self, timing: str, seed: int) -> None:
        rng = np.random.default_rng(seed)
        n, k, h, cap, ceiling, samples = 4_000, 0.5, 6.0, 4.0, 12.0, 2.0
        ours, theirs = np.zeros(n, np.float32), np.zeros(n, np.float32)
        for _ in range(40):
            x = rng.normal(0.4, 2.0, n).astype(np.float32)
            x[rng.random(n) < 0.05] = np.nan
            x[rng.random(n) < 0.01] = np.inf
            mask = rng.random(n) < 0.9
            seconds: np.ndarray | float | None = None
            drain: np.ndarray | float | None = None
            if timing != "none":
                seconds = rng.choice(np.array([0.5, 1.0, 2.0, 5.0, -1.0, np.nan], np.float32), n)
                if timing.endswith("one-for-all"):
                    seconds = 2.0
                if timing.startswith("drained"):
                    drain = rng.choice(np.array([1.0, 3.0, 10.0, np.nan], np.float32), n)
            expected = _numpy_cusum(theirs, x.copy(), mask, k=k, h=h, cap=cap, ceiling=ceiling, samples=samples,
                                    seconds=seconds, drain_seconds=drain)
            alarm = native.cusum_step(ours, x, mask, seconds=seconds, drain_seconds=drain, k=k, h=h, cap=cap,
                                      per_sample=h / samples, ceiling=ceiling)
            assert np.array_equal(alarm, expected)
            assert ours.tobytes() == theirs.tobytes()
        assert 0 < np.count_nonzero(ours >= h) < n  # some in alarm, some not: both paths were taken

    def test_float64_evidence_is_cast_as_numpys_step_was(self) -> None:
        s = np.zeros(3, np.float32)
        alarm = native.cusum_step(s, np.array([1e30, np.nan, 0.75]), np.ones(3, bool), seconds=None,
                                  drain_seconds=None, k=0.5, h=1.0, cap=3.0, per_sample=0.5, ceiling=2.0)
        assert s.tolist() == [2.0, 0.0, 0.25]  # capped at 3, less k, clipped at the ceiling; NaN adds nothing
        assert alarm.tolist() == [True, False, False]

    def test_the_sums_must_be_one_float32_array(self) -> None:
        with pytest.raises(TypeError, match="one contiguous float32 array"):
            native.cusum_step(np.zeros(3).astype(np.float32)[::-1], np.zeros(3), np.ones(3, bool), seconds=None,
                              drain_seconds=None, k=1.0, h=1.0, cap=1.0, per_sample=1.0, ceiling=2.0)


def _numpy_baseline(level: np.ndarray, history: np.ndarray, x: np.ndarray, accept: np.ndarray,
                    seconds: np.ndarray | float, *, halflife_s: float, learn_s: float, clip: float,
                    learn_clip: float) -> None:
    """Baseline.update as numpy computed it before the kernel (d9ff7a0), the kernel's oracle."""
    ok = accept & (seconds > 0) & np.isfinite(x)
    if not ok.any():
        return
    first = np.flatnonzero(ok & np.isnan(level))
    level[first] = np.broadcast_to(x, level.shape)[first]
    dt = np.where(ok, seconds, np.float32(0.0)).astype(np.float32, copy=False)
    window = history + dt
    np.minimum(window, np.float32(halflife_s / np.log(2.0)), out=window)
    step = np.subtract(x, level, dtype=np.float32)
    bound = np.abs(level)
    bound *= np.float32(clip)
    learning = history < learn_s
    np.multiply(bound, np.float32(learn_clip / clip), out=bound, where=learning)
    np.minimum(step, bound, out=step)
    np.maximum(step, np.negative(bound, out=bound), out=step)
    step *= dt
    with np.errstate(invalid="ignore", divide="ignore"):
        step /= window
    ok[first] = False
    np.add(level, step, out=level, where=ok)
    history += dt


class TestBaselineStep:
    """A learned level's step is numpy's, bit for bit: first samples, learning, learned, refused samples."""

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    @pytest.mark.parametrize("timing", ["per-entity", "one-for-all"])
    @pytest.mark.parametrize("seed", [0, 1])
    def test_levels_and_histories_are_numpys_over_many_steps(self, dtype: type, timing: str, seed: int) -> None:
        rng = np.random.default_rng(seed)
        n = 3_000
        learn_s, clip, learn_clip = 45.1, 0.05, 0.3
        ours = (np.full(n, np.nan, np.float32), np.zeros(n, np.float32))
        theirs = (ours[0].copy(), ours[1].copy())
        for _ in range(60):
            x = (rng.lognormal(3.0, 0.4, n) * rng.choice([1.0, -1.0, 5.0], n, p=[0.9, 0.05, 0.05])).astype(dtype)
            x[rng.random(n) < 0.03] = np.nan
            x[rng.random(n) < 0.01] = np.inf
            accept = rng.random(n) < 0.85
            seconds: np.ndarray | float = rng.choice(np.array([0.5, 1.0, 3.0, 0.0, -2.0, np.nan]), n).astype(dtype)
            if timing == "one-for-all":
                seconds = 1.0
            _numpy_baseline(*theirs, x, accept.copy(), seconds, halflife_s=600.0, learn_s=learn_s, clip=clip,
                            learn_clip=learn_clip)
            native.baseline_step(*ours, x, accept, seconds, window_cap=600.0 / np.log(2.0), learn_s=learn_s, clip=clip,
                                 learn_shrink=learn_clip / clip)
            assert ours[0].tobytes() == theirs[0].tobytes()
            assert ours[1].tobytes() == theirs[1].tobytes()
        learned = ours[1] >= learn_s
        assert 0 < np.count_nonzero(learned) < n  # some learned, some learning: both bounds were taken

    def test_levels_must_be_float32(self) -> None:
        with pytest.raises(TypeError, match="contiguous float32 arrays"):
            native.baseline_step(np.zeros(4, np.float32)[::2], np.zeros(2, np.float32), np.zeros(2), np.ones(2, bool),
                                 1.0, window_cap=1.0, learn_s=1.0, clip=0.1, learn_shrink=2.0)
