"""Specification of when the monitor hands freed memory back beyond a burst's
end (rainierd/monitor/footprint.py): once grown past the lowest it settled at,
never twice for memory the monitor genuinely needs while its input is clean,
and again at each check while hostile input goes on.  Driven by a clock and a
resident size of the test's own: no timing, no real memory."""

from __future__ import annotations

from rainierd.monitor.footprint import Footprint

MIB = 2**20


class Readings:
    """A clock that advances a check interval a call of ``step`` and a resident size the test sets."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.rss = 100 * MIB

    def clock(self) -> float:
        return self.now_s

    def size(self) -> int:
        return self.rss


def watch(readings: Readings) -> Footprint:
    return Footprint(check_every_s=30.0, grown_ratio=1.05, rss=readings.size, clock=readings.clock)


def checks(footprint: Footprint, readings: Readings, sizes_mib: list[float], *, refused: list[int] | None = None,
           ) -> list[bool]:
    """Return ``due`` at one check a size (each a check interval after the last), with the refusals so far."""
    out = []
    for i, size in enumerate(sizes_mib):
        readings.rss = int(size * MIB)
        out.append(footprint.due(refused=0 if refused is None else refused[i]))
        readings.now_s += footprint.check_every_s
    return out


class TestFootprint:
    def test_growth_past_the_floor_is_released_once(self) -> None:
        """Settled at 100 MiB, grown to 130 by hostile input: released, and at 101 afterwards nothing more."""
        readings = Readings()
        footprint = watch(readings)
        assert checks(footprint, readings, [100, 100, 130, 101, 101]) == [False, False, True, False, False]
        assert footprint.floor_bytes == 100 * MIB

    def test_growth_within_the_ratio_is_left(self) -> None:
        """4 % over the floor is the monitor's ordinary variation: nothing is released."""
        readings = Readings()
        assert checks(watch(readings), readings, [100, 104, 104.9, 100]) == [False, False, False, False]

    def test_memory_in_use_is_released_once_then_taken_as_the_floor(self) -> None:
        """Grown to 130 MiB for good (the fleet grew, jobs arrived) with clean input: one release brings nothing
        back, the next check takes 130 as the floor, and nothing more is released at that size."""
        readings = Readings()
        footprint = watch(readings)
        assert checks(footprint, readings, [100, 130, 130, 130, 130]) == [False, True, False, False, False]
        assert footprint.floor_bytes == 130 * MIB

    def test_while_hostile_input_goes_on_the_floor_is_never_raised(self) -> None:
        """Grown while messages keep being rejected: released at every check, the floor kept at what the fleet
        alone needs, so the memory goes back once the attack ends."""
        readings = Readings()
        footprint = watch(readings)
        sizes = [100, 130, 130, 130, 101]
        assert checks(footprint, readings, sizes, refused=[0, 500, 1_000, 1_500, 1_500]) == [
            False, True, True, True, False]
        assert footprint.floor_bytes == 100 * MIB

    def test_between_checks_nothing_is_read(self) -> None:
        """``due`` reads the resident size once a check interval, not once an analysis."""
        readings = Readings()
        reads = []
        footprint = Footprint(check_every_s=30.0, rss=lambda: reads.append(1) or 100 * MIB, clock=readings.clock)
        for _ in range(10):
            footprint.due(refused=0)
            readings.now_s += 1.0
        assert len(reads) == 1

    def test_without_proc_nothing_is_released(self) -> None:
        """Where the resident size is unknown, nothing is judged."""
        readings = Readings()
        footprint = Footprint(rss=lambda: None, clock=readings.clock)
        assert footprint.due(refused=0) is False
        assert footprint.floor_bytes is None
