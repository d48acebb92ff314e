"""Where ``rainierd top`` reads the monitor: ``HttpSource`` asks its HTTP
server for one read-API document at a time (docs/api.md), over the same TLS
and basic auth as every other client (``rainierd.httpclient``).

Each request is bounded in time (``timeout_s``) and size (``MAX_BODY_BYTES``:
the heat map's page of every UltraServer is ~0.6 MB at ``rainier``), asks for
gzip (80 KB instead of 590 KB for that page) and inflates and parses the body
in a worker thread, so a large document never stalls the terminal's loop.
Every failure is one ``SourceError`` line naming what went wrong.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
import zlib
from typing import Any, Final, Protocol

from rainierd.httpclient import HttpError, Remote, request

__all__ = ["MAX_BODY_BYTES", "HttpSource", "Source", "SourceError"]

MAX_BODY_BYTES: Final = 64 << 20


class SourceError(Exception):
    """A document could not be had: one line saying why (unreachable, refused, an HTTP error, not JSON)."""


class Source(Protocol):
    """Gives read-API documents by request target (``/api/v1/fleet``)."""

    @property
    def where(self) -> str:
        """Where the documents come from, for the header."""
        ...

    async def get(self, target: str) -> Any:
        """Return the JSON document at ``target``; raise ``SourceError``."""
        ...


class HttpSource:
    """The read API of the monitor ``connection`` reaches."""

    def __init__(self, remote: Remote, *, timeout_s: float = 5.0) -> None:
        self.connection = remote
        self.timeout_s = timeout_s

    @property
    def where(self) -> str:
        """The monitor's origin (``https://monitor:9780``)."""
        return self.connection.url.origin

    async def get(self, target: str) -> Any:
        """Return the document at ``target``; raise ``SourceError`` saying why not."""
        url = self.connection.url.with_target(target)
        headers = self.connection.headers(Accept="application/json", Accept_Encoding="gzip",
                                          User_Agent="rainierd-top")
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await request(url, headers=headers, ssl_context=self.connection.ssl_context,
                                         max_body_bytes=MAX_BODY_BYTES)
        except TimeoutError:
            raise SourceError(f"no answer within {self.timeout_s:g} s") from None
        except ConnectionRefusedError:
            raise SourceError("connection refused") from None
        except ssl.SSLError as exc:
            raise SourceError(f"TLS failed: {exc.reason or exc}") from None
        except OSError as exc:
            raise SourceError(str(exc.strerror or exc)) from None
        except HttpError as exc:
            raise SourceError(str(exc)) from None
        if response.status == 401:
            raise SourceError("the monitor refused the credentials (401)")
        encoded = response.headers.get("content-encoding") == "gzip"
        try:
            document = await asyncio.to_thread(_decode, response.body, encoded)
        except (ValueError, UnicodeDecodeError, OSError, zlib.error, EOFError):
            raise SourceError(f"{target}: {response.status}, and the answer is not JSON") from None
        if response.status != 200:
            error = document.get("error") if isinstance(document, dict) else None
            raise SourceError(f"{response.status} {error or response.reason}")
        return document


def _decode(body: bytes, encoded: bool) -> Any:
    return json.loads(gzip.decompress(body) if encoded else body)
