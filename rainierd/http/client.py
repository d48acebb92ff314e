"""A small asyncio HTTP/1.1 client: one request a connection, a bounded
response, over TCP or TLS.

Why not a library: the package has no HTTP client among its dependencies,
and its three users (the webhook's POST, ``node-check``'s GET, ``rainierd
top``'s few GETs a tick) send one small request and read one bounded response; ``http.client`` blocks,
so under the event loop it would need a thread per request, and its timeout
bounds each socket operation, not the whole exchange.  Here the caller
bounds the whole exchange with ``asyncio.timeout``.  httpx (and httpcore,
h11, anyio) would add ~44 ms of imports and ~3 MiB to the monitor's
process, aiohttp (and seven more packages) ~86 ms and ~7 MiB; this parser is
instead proven by a property test over arbitrary bytes
(tests/unit/http/test_client.py).  What it does not do: redirects, cookies,
proxies, keep-alive, compression (``top`` asks for gzip and inflates the
body itself), transfer codings other than chunked.

The response is parsed strictly (RFC 9112), since the server may be anyone
a setting names: a status line of ``HTTP/1.x``, a three-digit ASCII status
code in 100-599 and at most ``_MAX_STATUS_LINE_BYTES``; interim 1xx
responses read past; header fields that are a token, a colon and a value
without control characters (an obs-fold is unfolded, a value's bytes above
0x7F kept as Latin-1), a repeated field's values joined with ", "; a
``Content-Length`` of ASCII digits only, repeated only with the same value;
``Transfer-Encoding`` only ``chunked`` and never beside a
``Content-Length``; chunk sizes of at most 16 ASCII hex digits (extensions
ignored, each chunk's data followed by CRLF).  All heads together are at
most ``_MAX_HEAD_BYTES``, the body at most the caller's ``max_body_bytes``
and a chunked body's framing at most as much again (16 KiB at least).

``add_connection_arguments`` and ``remote`` are the command-line options
that say how to reach a monitor (URL, CA, basic auth), shared by
``node-check`` and ``top``; ``basic_authorization`` reads a password file
for them and for ``healthcheck``.

A failure is an ``OSError`` (refused, reset, TLS: ``ssl.SSLError`` is one)
or ``HttpError`` (any response that is not HTTP/1.x as above, or too
large): reading a response raises nothing else, whatever the bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import re
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from rainierd.errors import RainierdError

_MAX_HEAD_BYTES: Final = 16_384  # every response head (interim 1xx ones and the final one) together
_MAX_STATUS_LINE_BYTES: Final = 1_024  # "HTTP/1.1 200 OK" with room for a long reason; 10 KB of it is no answer
_MAX_LENGTH_DIGITS: Final = 18  # a Content-Length past any body bound: refused before int() reads 4,300 digits
# RFC 9112 §4: HTTP-version SP status-code SP [reason-phrase]; the last SP is often left out with the reason.
_STATUS_LINE: Final = re.compile(rb"HTTP/1\.[0-9] ([0-9]{3})(?: ([\t\x20-\x7e\x80-\xff]*))?")
# RFC 9110 §5.6.2: a field name is a token, one or more tchar.
_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A field value holds HTAB, SP, visible ASCII and obs-text, nothing else (RFC 9110 §5.5).
_BAD_VALUE_BYTE: Final = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_DIGITS: Final = re.compile(r"[0-9]+")
_CHUNK_SIZE: Final = re.compile(rb"[0-9A-Fa-f]{1,16}")  # 64 bits at most: more is beyond any body bound
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


class HttpError(RainierdError):
    """The server's answer was not an HTTP/1.x response this client reads (or was too large)."""


@dataclass(frozen=True, slots=True)
class Url:
    """Where a request goes: scheme, host, port and the request target (path and query)."""

    scheme: str  # http or https
    host: str
    port: int
    target: str

    @property
    def authority(self) -> str:
        """Return the Host header's value."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        """Return scheme and authority: the server, without the request target."""
        return f"{self.scheme}://{self.authority}"

    def with_target(self, target: str) -> Url:
        """Return this URL's server with another request target (path and query)."""
        return Url(self.scheme, self.host, self.port, target)

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}{self.target}"


def parse_url(text: str) -> Url:
    """Return the ``Url`` of ``http(s)://host[:port][/path][?query]`` (the host in its ASCII, IDNA, form).

    Raises ValueError saying what is wrong (a URL with credentials is refused: they would end up in logs; so is
    one no request could carry: a host name with no IDNA form, a path or query that is not ASCII).
    """
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in _DEFAULT_PORTS:
        raise ValueError(f"{text!r} must start http:// or https://")
    if parts.username is not None or parts.password is not None:
        raise ValueError("a URL must not hold credentials (use a token or password file)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{text!r} has an invalid port") from None
    if not parts.hostname:
        raise ValueError(f"{text!r} has no host")
    try:  # the ASCII form the resolver, the Host header and SNI take (a label over 63 characters has none)
        host = parts.hostname.encode("idna").decode("ascii")
    except UnicodeError:
        raise ValueError(f"{text!r} has an invalid host name") from None
    if parts.fragment:
        raise ValueError(f"{text!r} has a fragment")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if not target.isascii() or any(c <= " " or c == "\x7f" for c in target):  # the request line could not hold it
        raise ValueError(f"{text!r}: its path and query must be ASCII without spaces (percent-encode the rest)")
    return Url(parts.scheme, host, port or _DEFAULT_PORTS[parts.scheme], target)


@dataclass(frozen=True, slots=True)
class Response:
    """A response: status code, reason phrase, headers (lower-case names) and body."""

    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes


async def request(
    url: Url, *, method: str = "GET", headers: Mapping[str, str] | None = None, body: bytes = b"",
    ssl_context: ssl.SSLContext | None = None, max_body_bytes: int = 1 << 20,
) -> Response:
    """Send one request to ``url`` and return its response (at most ``max_body_bytes`` of body).

    ``ssl_context`` is used for https (the system's default context if None).  Bound the call with
    ``asyncio.timeout``: nothing here waits for ever only because the caller does.
    Raises OSError (connection, TLS) or HttpError (a malformed or oversize response).
    """
    context = None
    if url.scheme == "https":
        context = ssl_context if ssl_context is not None else ssl.create_default_context()
    reader, writer = await asyncio.open_connection(url.host, url.port, ssl=context, limit=_MAX_HEAD_BYTES,
                                                   server_hostname=url.host if context is not None else None)
    try:
        lines = [f"{method} {url.target} HTTP/1.1", f"Host: {url.authority}", "Connection: close",
                 f"Content-Length: {len(body)}" if body or method in ("POST", "PUT") else ""]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        writer.write(("\r\n".join(line for line in lines if line) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        return await _response(reader, max_body_bytes=max_body_bytes, head_only=method == "HEAD")
    finally:
        # The response is read whole (or given up on): nothing is left to say, and a TLS close waiting for the
        # peer's close_notify would outlast the caller's bound.
        writer.transport.abort()


async def _response(reader: asyncio.StreamReader, *, max_body_bytes: int, head_only: bool) -> Response:
    """Read one response from ``reader``: past any interim (1xx) ones, its head, then its body as framed.

    Reads at most ``_MAX_HEAD_BYTES`` of heads (interim ones and the final one together; the last read may
    overrun that by one StreamReader limit before it is refused), ``max_body_bytes`` of body (one more when
    the body ends at the close, to tell it is too large) and as much chunk framing as ``_framing_budget``.
    Raises HttpError for what is no such response (malformed, truncated or too large), whatever the bytes;
    OSError only from the transport under ``reader``.
    """
    budget = _MAX_HEAD_BYTES
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise HttpError("response head too large") from None
        except asyncio.IncompleteReadError as exc:
            raise HttpError("truncated response head" if exc.partial else "connection closed before a response") \
                from None
        budget -= len(head)
        if budget < 0:
            raise HttpError("response head too large")
        status, reason, headers = _head(head[:-4])
        if status >= 200:
            break
        if status == 101:  # never asked for (no Upgrade is sent): what follows is not HTTP
            raise HttpError("unexpected 101 Switching Protocols")
        # An interim response (100 Continue, 103 Early Hints): a client reads past it (RFC 9110 §15.2).
    if head_only or status in (204, 304):
        return Response(status, reason, headers, b"")
    return Response(status, reason, headers, await _body(reader, headers, max_body_bytes))


def _head(head: bytes) -> tuple[int, str, dict[str, str]]:
    """Return the status, reason and fields (lower-case names; a repeated field's values joined with ", ")."""
    status_line, *lines = head.split(b"\r\n")
    if len(status_line) > _MAX_STATUS_LINE_BYTES:
        raise HttpError(f"status line of {len(status_line)} bytes (at most {_MAX_STATUS_LINE_BYTES})")
    if (match := _STATUS_LINE.fullmatch(status_line)) is None:
        raise HttpError(f"not an HTTP/1.x status line: {status_line[:60]!r}")
    code, reason = match.group(1), match.group(2) or b""
    if code[0] not in b"12345":  # RFC 9110 §15: 100-599; outside it is no status (a library's error, a lie)
        raise HttpError(f"invalid status code {code.decode()}")
    fields: list[list[bytes]] = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            # obs-fold (RFC 9112 §5.2): a user agent replaces it with a space; before any field it is invalid.
            if not fields:
                raise HttpError("whitespace before the first header field")
            fields[-1][1] += b" " + line.strip(b" \t")
        else:
            name, colon, value = line.partition(b":")
            if not colon or _TOKEN.fullmatch(name) is None:  # a space before the colon is not a token either
                raise HttpError(f"malformed header field: {line[:60]!r}")
            fields.append([name.lower(), value.strip(b" \t")])
    headers: dict[str, str] = {}
    for name, value in fields:
        if _BAD_VALUE_BYTE.search(value):
            raise HttpError(f"control character in header field {name[:60]!r}")
        key = name.decode("ascii")
        text = value.decode("latin-1")  # obs-text (RFC 9110 §5.5): bytes above 0x7F are opaque, never an error
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return int(code), reason.decode("latin-1"), headers


async def _body(reader: asyncio.StreamReader, headers: Mapping[str, str], max_body_bytes: int) -> bytes:
    """Read the body as RFC 9112 §6.3 frames it: chunked, a Content-Length, or up to the close."""
    coding, length = headers.get("transfer-encoding"), headers.get("content-length")
    if coding is not None:
        if length is not None:  # framing two parsers could read two ways: refused, not guessed (§6.3, §11.2)
            raise HttpError("both Transfer-Encoding and Content-Length")
        if [c.strip(" \t").lower() for c in coding.split(",")] != ["chunked"]:
            raise HttpError(f"unsupported transfer coding {coding[:40]!r}")
        return await _chunked(reader, max_body_bytes)
    if length is not None:
        size = _content_length(length, max_body_bytes)
        try:
            return await reader.readexactly(size)
        except asyncio.IncompleteReadError:
            raise HttpError("truncated response body") from None
    body = await reader.read(max_body_bytes + 1)
    while len(body) <= max_body_bytes and (more := await reader.read(max_body_bytes + 1 - len(body))):
        body += more
    if len(body) > max_body_bytes:
        raise HttpError(f"response body over {max_body_bytes} bytes")
    return body


def _content_length(value: str, max_body_bytes: int) -> int:
    """Return the body's length a Content-Length value (repeated fields joined) says, if it is one number."""
    texts = {text.strip(" \t") for text in value.split(",")}
    if len(texts) != 1:  # RFC 9112 §6.3: differing values are an unrecoverable error; equal ones are one
        raise HttpError(f"conflicting Content-Length {value[:40]!r}")
    (text,) = texts
    if _DIGITS.fullmatch(text) is None:  # 1*DIGIT: ASCII only, no sign (int() takes "+5", "1_0", Arabic-Indic digits)
        raise HttpError(f"invalid Content-Length {text[:20]!r}")
    if len(text) > _MAX_LENGTH_DIGITS or int(text) > max_body_bytes:
        raise HttpError(f"response body of {text[:20]} bytes (at most {max_body_bytes})")
    return int(text)


def _framing_budget(max_body_bytes: int) -> int:
    """Return the bytes a chunked body's framing (size lines, extensions, CRLFs, trailers) may take."""
    return max(_MAX_HEAD_BYTES, max_body_bytes)


async def _chunked(reader: asyncio.StreamReader, max_body_bytes: int) -> bytes:
    body = bytearray()
    framing = _framing_budget(max_body_bytes)
    try:
        while True:
            line = await reader.readuntil(b"\r\n")
            framing -= len(line)
            if framing < 0:
                raise HttpError("chunked framing too large")
            size_text = line[:-2].partition(b";")[0].rstrip(b" \t")  # extensions are ignored (§7.1.1)
            if _CHUNK_SIZE.fullmatch(size_text) is None:  # 1*HEXDIG: no sign, prefix or "_" (int(_, 16) takes them)
                raise HttpError(f"invalid chunk size {size_text[:20]!r}")
            size = int(size_text, 16)
            if size == 0:
                break
            if len(body) + size > max_body_bytes:
                raise HttpError(f"response body over {max_body_bytes} bytes")
            body += await reader.readexactly(size)
            if await reader.readexactly(2) != b"\r\n":
                raise HttpError("chunk data longer than its size")
            framing -= 2
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":  # trailer fields: read and dropped
            framing -= len(line)
            if framing < 0:
                raise HttpError("chunked framing too large")
    except asyncio.IncompleteReadError:
        raise HttpError("truncated chunked body") from None
    except asyncio.LimitOverrunError:
        raise HttpError("chunk size line too long") from None
    return bytes(body)


@dataclass(frozen=True, slots=True)
class Remote:
    """How to reach a monitor: its origin, the TLS context for https, the Authorization header's value."""

    url: Url
    ssl_context: ssl.SSLContext | None
    authorization: str | None

    def headers(self, **extra: str) -> dict[str, str]:
        """Return request headers: ``extra`` (``Accept="..."``; underscores become dashes) and the credentials."""
        headers = {name.replace("_", "-"): value for name, value in extra.items()}
        if self.authorization is not None:
            headers["Authorization"] = self.authorization
        return headers


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the options that say how to reach the monitor's HTTP server (``connection`` reads them)."""
    parser.add_argument("--url", required=True, help="the monitor's HTTP address, e.g. https://monitor:9780")
    parser.add_argument("--ca-file", type=Path, default=None,
                        help="CA bundle that signs the monitor's certificate (default: the system's)")
    parser.add_argument("--basic-auth-user", default=None, help="user name, if the monitor asks for basic auth")
    parser.add_argument("--basic-auth-password-file", type=Path, default=None,
                        help="file holding that user's password (never a flag: a command line is visible to ps)")


def remote(args: argparse.Namespace) -> Remote:
    """Return the ``Remote`` the options of ``add_connection_arguments`` describe.

    Raises ValueError with one line naming the option at fault (the password itself is never in it).
    """
    try:
        url = parse_url(args.url)
    except ValueError as exc:
        raise ValueError(f"--url: {exc}") from None
    context = None
    if url.scheme == "https":
        try:
            context = ssl.create_default_context(cafile=args.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"--ca-file: {exc}") from None
    authorization = None
    if args.basic_auth_user is not None:
        if args.basic_auth_password_file is None:
            raise ValueError("--basic-auth-user wants --basic-auth-password-file")
        authorization = basic_authorization(args.basic_auth_user, args.basic_auth_password_file)
    return Remote(url, context, authorization)


def basic_authorization(user: str, password_file: Path) -> str:
    """Return the ``Authorization`` value of basic auth as ``user`` with the password in ``password_file`` (its
    text, a trailing line end dropped): the one way every rainierd client (``top``, ``node-check``,
    ``healthcheck``) takes a password, for a command line is visible to ``ps`` and an environment to
    ``docker inspect``.

    Raises ValueError naming the file, never its content.
    """
    try:
        password = password_file.read_text(encoding="utf-8").strip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the password file {password_file}: "
                         f"{getattr(exc, 'strerror', None) or exc}") from None
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
