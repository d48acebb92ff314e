"""The scrape targets of ``python -m benchmarks tsdb``: a process of its own that
serves pre-rendered rainierd expositions on many loopback ports, so that what
the benchmark measures is the time-series database, not the targets.

Every body is rendered (and gzipped) before the run; a request only picks the
port's next variant, so the values a TSDB receives change on every scrape at
the cost of a ``write``.  ``GET /count`` on any port answers how many
``/metrics`` requests that port has served, which is how the benchmark knows a
new target has been scraped.

Run as ``python -m benchmarks._targets DIR COUNT``: ``DIR`` holds
``body-<i>`` and ``body-<i>.gz``; it listens on ``COUNT`` free ports and
prints them as one JSON line on stdout, then serves until terminated.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Variants", "load_variants", "serve"]

_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
         b"Content-Length: %d\r\n%s\r\n")
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Variants:
    """The same exposition at successive ticks, plain and gzipped."""

    plain: tuple[bytes, ...]
    gzipped: tuple[bytes, ...]


def load_variants(directory: Path) -> Variants:
    """Return the bodies ``body-0``, ``body-1``, ... of ``directory`` (and their ``.gz``)."""
    names = sorted((p for p in directory.glob("body-*") if p.suffix != ".gz"), key=lambda p: int(p.name[5:]))
    return Variants(tuple(p.read_bytes() for p in names),
                    tuple(p.with_name(p.name + ".gz").read_bytes() for p in names))


@dataclass
class _Port:
    variants: Variants
    served: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.split(b"\r\n")
                path = lines[0].split(b" ")[1] if b" " in lines[0] else b""
                if path.startswith(b"/metrics"):
                    gzip = any(line.lower().startswith(b"accept-encoding:") and b"gzip" in line.lower()
                               for line in lines[1:])
                    which = self.served % len(self.variants.plain)
                    body = (self.variants.gzipped if gzip else self.variants.plain)[which]
                    writer.write(_HEAD % (len(body), b"Content-Encoding: gzip\r\n" if gzip else b""))
                    writer.write(body)
                    self.served += 1
                elif path.startswith(b"/count"):
                    count = str(self.served).encode()
                    writer.write(_HEAD % (len(count), b"") + count)
                else:
                    writer.write(_NOT_FOUND)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the scraper closed its connection (Prometheus does between reloads)
        finally:
            writer.close()


async def serve(variants: Variants, count: int) -> None:
    """Listen on ``count`` free loopback ports, print them as a JSON list, and serve until cancelled."""
    servers = []
    for _ in range(count):
        port = _Port(variants)
        servers.append(await asyncio.start_server(port.handle, "127.0.0.1", 0))
    print(json.dumps([s.sockets[0].getsockname()[1] for s in servers]), flush=True)
    async with asyncio.TaskGroup() as tg:
        for i, server in enumerate(servers):
            tg.create_task(server.serve_forever(), name=f"target-{i}")


if __name__ == "__main__":
    asyncio.run(serve(load_variants(Path(sys.argv[1])), int(sys.argv[2])))
