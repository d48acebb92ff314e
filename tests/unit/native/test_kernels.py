"""Specification of the compiled passes (rainierd/native): each copies what it is told to, where it is told
to, and refuses any call that would read or write outside the sizes it is given; loading them compiles nothing."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rainierd import native

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
