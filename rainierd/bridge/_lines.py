"""neuron-monitor's output cut into lines, whatever their length, without
ever holding more than one line's limit in memory.

Why not ``StreamReader.readline``: given a line longer than the reader's
limit it raises ``ValueError`` and leaves the stream in a state a caller
cannot step past cleanly, so one runaway line ended the old bridge.  Here
the stream is read in chunks; a line that grows past ``max_bytes`` is
dropped as it streams in (the reader skips to its newline) and reported as
None, and the next line is read as usual.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

CHUNK_BYTES: Final = 1 << 16


async def lines(read: Callable[[int], Awaitable[bytes]], *, max_bytes: int) -> AsyncIterator[bytes | None]:
    """Yield each line ``read(n)`` delivers (without its newline), None for one longer than ``max_bytes``.

    ``read`` returns up to ``n`` bytes, ``b""`` at the end of the input; a
    last line without a newline is yielded too.
    """
    buffer = bytearray()
    skipping = False  # inside a line already found too long
    while chunk := await read(CHUNK_BYTES):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if skipping:
                skipping = False
            elif len(buffer) + end - start > max_bytes:
                buffer.clear()
                yield None
            else:
                buffer += chunk[start:end]
                yield bytes(buffer)
                buffer.clear()
            start = end + 1
        if skipping:
            continue
        buffer += chunk[start:]
        if len(buffer) > max_bytes:
            buffer.clear()
            skipping = True
            yield None
    if buffer and not skipping:
        yield bytes(buffer)
