"""A small asyncio HTTP/1.1 client: one request a connection, a bounded
response, over TCP or TLS.

Why not a library: the package has no HTTP client among its dependencies,
and its three users (the webhook's POST, ``node-check``'s GET, ``rainierd
top``'s few GETs a tick) send one small request and read one bounded response; ``http.client`` blocks,
so under the event loop it would need a thread per request, and its timeout
bounds each socket operation, not the whole exchange.  Here the caller
bounds the whole exchange with ``asyncio.timeout``.  What it does not do:
redirects, cookies, proxies, keep-alive, compression (``top`` asks for gzip
and inflates the body itself).

``add_connection_arguments`` and ``connection`` are the command-line options
that say how to reach a monitor (URL, CA, basic auth), shared by
``node-check`` and ``top``.

A failure is an ``OSError`` (refused, reset, TLS: ``ssl.SSLError`` is one)
or ``HttpError`` (a response that is not HTTP/1.x or too large).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "HttpError",
    "Remote",
    "Response",
    "Url",
    "add_connection_arguments",
    "parse_url",
    "remote",
    "request",
]

_MAX_HEAD_BYTES: Final = 16_384
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


class HttpError(Exception):
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
    """Return the ``Url`` of ``http(s)://host[:port][/path][?query]``.

    Raises ValueError saying what is wrong (a URL with credentials is refused: they would end up in logs).
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
    if parts.fragment:
        raise ValueError(f"{text!r} has a fragment")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Url(parts.scheme, parts.hostname, port or _DEFAULT_PORTS[parts.scheme], target)


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
        lines = [f"{method} {url.target} HTTP/1.1", f"Host: {url.authority}", "Remote: close",
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
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise HttpError("response head too large") from None
    except asyncio.IncompleteReadError as exc:
        raise HttpError("connection closed before a response" if not exc.partial else "truncated response") from None
    status_line, *fields = head[:-4].decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not (len(code) == 3 and code.isdigit()):
        raise HttpError(f"not an HTTP/1.x response: {status_line[:60]!r}")
    headers: dict[str, str] = {}
    for line in fields:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    status = int(code)
    if head_only or status in (204, 304) or 100 <= status < 200:
        return Response(status, reason, headers, b"")
    return Response(status, reason, headers, await _body(reader, headers, max_body_bytes))


async def _body(reader: asyncio.StreamReader, headers: Mapping[str, str], max_body_bytes: int) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _chunked(reader, max_body_bytes)
    elif (length := headers.get("content-length")) is not None:
        if not length.isdigit() or int(length) > max_body_bytes:
            raise HttpError(f"response body of {length[:20]} bytes (at most {max_body_bytes})")
        try:
            body = await reader.readexactly(int(length))
        except asyncio.IncompleteReadError:
            raise HttpError("truncated response body") from None
    else:
        body = await reader.read(max_body_bytes + 1)
        while len(body) <= max_body_bytes and (more := await reader.read(max_body_bytes + 1 - len(body))):
            body += more
        if len(body) > max_body_bytes:
            raise HttpError(f"response body over {max_body_bytes} bytes")
    return body


async def _chunked(reader: asyncio.StreamReader, max_body_bytes: int) -> bytes:
    body = bytearray()
    try:
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size_text = size_line.split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HttpError("bad chunk size") from None
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                    pass
                return bytes(body)
            if len(body) + size > max_body_bytes:
                raise HttpError(f"response body over {max_body_bytes} bytes")
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        raise HttpError("truncated chunked body") from None


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
        try:
            password = args.basic_auth_password_file.read_text(encoding="utf-8").strip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read the password file: {getattr(exc, 'strerror', None) or exc}") from None
        token = base64.b64encode(f"{args.basic_auth_user}:{password}".encode()).decode()
        authorization = f"Basic {token}"
    return Remote(url, context, authorization)
