"""One HTTP/1.1 request head, parsed strictly enough that what the exporter
reads as one request no other parser on the path reads as two (RFC 9112).

The exporter reads no request bodies.  A request that announces one
(``Content-Length`` above 0, or any ``Transfer-Encoding``) is answered and
its connection closed, so a body is never read as the next request.  A head
whose framing could be read two ways is refused with 400 and its connection
closed, never guessed at (RFC 9112 §6.3, §11.2): ``Content-Length`` given
twice or not a decimal number, ``Content-Length`` beside
``Transfer-Encoding``, whitespace between a field name and its colon, a
folded line, a bare CR or LF, a control character in a value.  A refusal is
a ``Rejection`` with the reason the exporter counts it under; the parser
never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

MAX_HEAD_BYTES: Final = 8_192

# The reasons a head is refused, each a series of rainier_exporter_bad_requests_total from the start.
REJECTION_REASONS: Final = ("too_large", "request_line", "header", "duplicate_header", "content_length")

# RFC 9110 §5.6.2: a token (method, field name) is one or more tchar.
_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A request target: visible ASCII, no whitespace (origin-form, absolute-form, asterisk-form alike).
_TARGET: Final = re.compile(rb"[\x21-\x7e]+")
# A field value may hold HTAB, SP, visible ASCII and obs-text, nothing else (RFC 9110 §5.5).
_BAD_VALUE_BYTE: Final = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_VERSIONS: Final = frozenset({b"HTTP/1.0", b"HTTP/1.1"})
# Fields whose second copy a proxy and rainierd might pick differently: refused rather than chosen.
_SINGLETONS: Final = frozenset({b"authorization", b"host"})


@dataclass(frozen=True, slots=True)
class Request:
    """A head that parsed: what the exporter routes on."""

    method: str
    target: str
    version: str  # HTTP/1.0 or HTTP/1.1
    headers: dict[bytes, bytes]  # lower-case name -> value; a repeated list field joined with ", "
    has_body: bool  # it announced a body, which is not read: the connection closes after the response

    @property
    def keep_alive(self) -> bool:
        """Whether the connection may carry another request: HTTP/1.1 unless it says close, HTTP/1.0 only
        if it asks for keep-alive, and never after a body (which is not read)."""
        if self.has_body:
            return False
        tokens = {t.strip().lower() for t in self.headers.get(b"connection", b"").split(b",")}
        if self.version == "HTTP/1.1":
            return b"close" not in tokens
        return b"keep-alive" in tokens


@dataclass(frozen=True, slots=True)
class Rejection:
    """A head refused: the status to answer with (the connection then closes) and the counted reason."""

    status: str
    reason: str  # one of REJECTION_REASONS
    message: bytes


def parse_head(head: bytes) -> Request | Rejection:
    """Return the request that ``head`` (the bytes up to and including the blank line) is, or why not."""
    if len(head) > MAX_HEAD_BYTES:
        return Rejection("431 Request Header Fields Too Large", "too_large", b"request too large\n")
    lines = head.removesuffix(b"\r\n\r\n").split(b"\r\n")
    if any(b"\r" in line or b"\n" in line for line in lines):
        return _bad("header", b"bare CR or LF\n")
    parts = lines[0].split(b" ")
    if (len(parts) != 3 or _TOKEN.fullmatch(parts[0]) is None or _TARGET.fullmatch(parts[1]) is None
            or parts[2] not in _VERSIONS):
        return _bad("request_line", b"bad request line\n")
    headers: dict[bytes, bytes] = {}
    lengths: list[bytes] = []
    for line in lines[1:]:
        name, colon, raw = line.partition(b":")
        # No colon, an empty name, whitespace before the colon or a folded line: all fail the token.
        if not colon or _TOKEN.fullmatch(name) is None or _BAD_VALUE_BYTE.search(raw) is not None:
            return _bad("header", b"bad header line\n")
        key, value = name.lower(), raw.strip(b" \t")
        if key == b"content-length":
            lengths.append(value)
        elif key in headers:
            if key in _SINGLETONS:
                return _bad("duplicate_header", b"header given twice\n")
            headers[key] += b", " + value
        else:
            headers[key] = value
    if len(lengths) > 1 or (lengths and not lengths[0].isdigit()) or (lengths and b"transfer-encoding" in headers):
        return _bad("content_length", b"ambiguous message length\n")
    if lengths:
        headers[b"content-length"] = lengths[0]
    # Not int(): a length of thousands of digits would exceed Python's integer-string limit.
    has_body = b"transfer-encoding" in headers or (bool(lengths) and lengths[0].strip(b"0") != b"")
    return Request(parts[0].decode("ascii"), parts[1].decode("ascii"), parts[2].decode("ascii"), headers, has_body)


def _bad(reason: str, message: bytes) -> Rejection:
    return Rejection("400 Bad Request", reason, message)


def accepts_gzip(accept_encoding: bytes | None) -> bool:
    """Return whether an ``Accept-Encoding`` value admits gzip (``gzip`` or ``*`` without ``q=0``)."""
    if not accept_encoding:
        return False
    verdicts: dict[bytes, bool] = {}
    for item in accept_encoding.lower().split(b","):
        coding, *params = (part.strip() for part in item.split(b";"))
        refused = False
        for param in params:
            key, _, value = param.partition(b"=")
            if key.strip() == b"q":
                try:
                    refused = float(value) == 0
                except ValueError:
                    refused = True
        verdicts[coding] = not refused
    return verdicts.get(b"gzip", verdicts.get(b"x-gzip", verdicts.get(b"*", False)))
