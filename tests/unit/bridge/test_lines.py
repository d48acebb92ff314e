"""Specification of cutting neuron-monitor's output into lines
(rainierd/bridge/_lines.py): any split of the input gives the same lines,
and a line past the limit is reported once and skipped, the next read as usual."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from rainierd.bridge._lines import lines


def chunks(data: bytes, size: int) -> Callable[[int], Awaitable[bytes]]:
    """Return a reader handing out ``data`` ``size`` bytes at a time, then b""."""
    parts = [data[i:i + size] for i in range(0, len(data), size)]

    async def read(_n: int) -> bytes:
        return parts.pop(0) if parts else b""

    return read


async def collect(data: bytes, size: int, max_bytes: int = 100) -> list[bytes | None]:
    return [line async for line in lines(chunks(data, size), max_bytes=max_bytes)]


class TestLines:
    @pytest.mark.parametrize("size", [1, 3, 7, 1000])
    async def test_any_split_gives_the_same_lines(self, size: int) -> None:
        """Lines split across reads, several in one read, a last one without a newline: all whole, in order."""
        assert await collect(b'{"a":1}\n\n{"b":2}\nlast', size) == [b'{"a":1}', b"", b'{"b":2}', b"last"]

    @pytest.mark.parametrize("size", [1, 10, 64, 1000])
    async def test_a_line_past_the_limit_is_skipped_and_the_next_read(self, size: int) -> None:
        """A 300-byte line under a 100-byte limit: None once, then the following lines as usual."""
        data = b"ok1\n" + b"x" * 300 + b"\nok2\n" + b"y" * 101 + b"\nok3"
        assert await collect(data, size) == [b"ok1", None, b"ok2", None, b"ok3"]

    async def test_a_line_at_the_limit_is_kept(self) -> None:
        """Exactly max_bytes is a line; one more byte is not."""
        assert await collect(b"z" * 100 + b"\n" + b"z" * 101 + b"\n", 64) == [b"z" * 100, None]

    async def test_an_unterminated_oversize_tail_is_dropped(self) -> None:
        """Input ending inside an over-long line: it is reported once and nothing of it yielded."""
        assert await collect(b"ok\n" + b"w" * 500, 64) == [b"ok", None]
