"""The tick schedule the simulator and the aggregator keep: tick k is due at start + k * tick_s, never yielded
early; a slow tick makes the ticks that fell due meanwhile come at once (counted late) instead of shifting every
later tick."""

from __future__ import annotations

import asyncio
import time

from rainierd.runtime.schedule import Schedule


async def test_it_yields_the_ticks_asked_for_from_the_first() -> None:
    """``count`` ticks from ``first``, in order."""
    schedule = Schedule(0.001, "test")
    assert [k async for k in schedule.ticks(count=3)] == [0, 1, 2]
    assert [k async for k in schedule.ticks(first=1, count=3)] == [1, 2, 3]


async def test_a_slow_tick_is_caught_up_at_once_and_counted_late() -> None:
    """Tick 2's work blocks the loop for five ticks: no tick is yielded before it is due, the ticks that fell
    due meanwhile come at once (not a tick apart, which would shift every later tick), and the late are
    counted."""
    tick_s = 0.05
    schedule = Schedule(tick_s, "test")
    loop = asyncio.get_running_loop()
    started = loop.time()
    yielded: dict[int, float] = {}
    block_end = 0.0
    async for k in schedule.ticks(count=10):
        yielded[k] = loop.time() - started
        if k == 2:
            time.sleep(5 * tick_s)  # noqa: ASYNC251 (the point: a tick whose work overruns, blocking the loop)
            block_end = loop.time() - started
    assert list(yielded) == list(range(10))
    assert all(at >= k * tick_s for k, at in yielded.items())
    fell_due = [k for k in yielded if k > 2 and k * tick_s < block_end]
    assert len(fell_due) >= 4
    assert all(yielded[k] < block_end + tick_s for k in fell_due)
    assert schedule.late >= 1
