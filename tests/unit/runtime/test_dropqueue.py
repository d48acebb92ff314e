"""Specification of the drop-oldest queue every outbox uses: it never blocks
its producer, and it counts what it gave up."""

from __future__ import annotations

import pytest

from rainierd.runtime.dropqueue import DropOldestQueue


class TestDropOldestQueue:
    def test_a_full_queue_drops_its_oldest_and_counts_it(self) -> None:
        """Offered a fourth item, a queue of three gives up its first and keeps the newest three in order."""
        queue: DropOldestQueue[int] = DropOldestQueue(3)
        assert [queue.offer(i) for i in range(4)] == [None, None, None, 0]
        assert ([queue.get_nowait() for _ in range(3)], queue.dropped) == ([1, 2, 3], 1)

    async def test_a_drop_keeps_join_balanced(self) -> None:
        """A dropped item counts as done, so ``join`` returns once the kept ones are."""
        queue: DropOldestQueue[int] = DropOldestQueue(1)
        queue.offer(1)
        queue.offer(2)
        assert queue.get_nowait() == 2
        queue.task_done()
        await queue.join()

    def test_an_unbounded_queue_is_refused(self) -> None:
        """A bound of 0 (unbounded in asyncio) would never drop, so it is refused."""
        with pytest.raises(ValueError, match="needs a bound"):
            DropOldestQueue(0)
