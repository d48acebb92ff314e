"""Where ``rainierd top`` reads the monitor: ``HttpSource`` asks its HTTP
server for one read-API document at a time (docs/api.md), over the same TLS
and basic auth as every other client (``rainierd.http.client``).

Each request is bounded in time (``timeout_s``) and size (``MAX_BODY_BYTES``
on the wire and again inflated: the heat map's page of every UltraServer, the
largest answer top asks for, is 1.3 MB at ``rainier``), asks for gzip (about
a seventh of that) and inflates and parses the body in a worker thread, so a large
document never stalls the terminal's loop.  What the monitor says is
untrusted: a gzip bomb stops at the bound, nesting deeper than the parser
takes is refused, an error's text is cut to one safe line.  Every failure
is one line naming what went wrong: ``SourceError`` when no document came
(no answer, an HTTP error), ``answers.BadAnswerError`` when what came is no
JSON value or not what the schema says (``answers.check``, in the same
worker thread): a ``Source`` gives only checked documents, so the screens
can trust every type they read.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import zlib
from typing import Any, Final, Protocol

from rainierd.errors import RainierdError
from rainierd.http.client import HttpError, Remote, request
from rainierd.top.answers import BadAnswerError, check, one_line, path_of
from rainierd.top.model import Document

# 6x the largest answer top asks for (the heat map's page at rainier, 1.3 MB); a body this large of the smallest
# objects parses into ~130 MB of Python objects, as much as top will spend on one answer.
MAX_BODY_BYTES: Final = 8 << 20


class SourceError(RainierdError):
    """A document could not be had: one line saying why (unreachable, refused, an HTTP error, not JSON).

    ``status`` is the HTTP status the monitor answered with (None: no HTTP answer at all: a timeout, a refused
    connection, TLS, a malformed response).
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Source(Protocol):
    """Gives read-API documents by request target (``/api/v1/fleet``)."""

    @property
    def where(self) -> str:
        """Where the documents come from, for the header."""
        ...

    async def get(self, target: str) -> Document:
        """Return the document at ``target`` as ``answers.check`` returns it (the screens trust its types); raise
        ``SourceError`` (no document) or ``BadAnswerError`` (an answer refused)."""
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

    async def get(self, target: str) -> Document:
        """Return the document at ``target``, checked; raise ``SourceError`` (nothing, or an HTTP error,
        answered) or ``BadAnswerError`` (a 200 whose body is no JSON value, or one ``answers.check`` refuses)
        saying why not."""
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
            raise SourceError(one_line(str(exc))) from None
        status = response.status
        if status == 401:
            raise SourceError("the monitor refused the credentials (401)", status)
        encoded = response.headers.get("content-encoding") == "gzip"
        document: Any = None
        problem: str | None = None
        try:  # one worker thread for the lot: the heat map's page is ~40 ms of CPU to inflate, parse and check
            document = await asyncio.to_thread(_read, target, response.body, encoded=encoded, checked=status == 200)
        except _TooLargeError:
            problem = f"inflates past {MAX_BODY_BYTES:,} bytes"
        except RecursionError:
            problem = "nested deeper than the parser goes"
        except (ValueError, zlib.error):  # json's and gzip's errors, UnicodeDecodeError among them
            problem = "not JSON"
        if status != 200:
            error = document.get("error") if isinstance(document, dict) else None
            text = error if isinstance(error, str) and error else response.reason
            raise SourceError(f"{status} {one_line(text, 120)}", status)
        if problem is not None:
            raise BadAnswerError(path_of(target), problem)
        checked: Document = document
        return checked


class _TooLargeError(Exception):
    """The body inflates past ``MAX_BODY_BYTES``."""


def _read(target: str, body: bytes, *, encoded: bool, checked: bool) -> Any:
    """Return the JSON value of ``body``, held against the schema of ``target``'s answer when ``checked``
    (``answers.check``: it raises BadAnswerError); else as ``_decode`` returns it, or raises."""
    document = _decode(body, encoded)
    return check(target, document) if checked else document


def _decode(body: bytes, encoded: bool) -> Any:
    """Return the JSON value of ``body`` (gzip: inflated first, at most MAX_BODY_BYTES of it, one member).

    Raises _TooLargeError, zlib.error (not gzip), ValueError (not JSON: UnicodeDecodeError is one) or RecursionError
    (nested deeper than the C parser goes: about the interpreter's recursion limit, 1,000).
    """
    if encoded:
        inflater = zlib.decompressobj(wbits=31)  # gzip's header and trailer
        text = inflater.decompress(body, MAX_BODY_BYTES)
        if inflater.unconsumed_tail:
            raise _TooLargeError
        if not inflater.eof or inflater.unused_data:
            raise zlib.error("a truncated gzip body, or more than one member")
        body = text
    return json.loads(body)
