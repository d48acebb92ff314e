"""Whether a role's HTTP address is free, asked before the role starts
anything (the embedded broker, the simulator's first tick), so a second
``rainierd run`` on the same machine fails at once with one line naming the
address and the flag that moves it, not with ``[Errno 98]`` after its broker
has come up.

The bind itself (``http/server.py``) still decides: an address taken between
this check and it fails the start there, and the command line words that
failure the same way (``in_use_message``).
"""

from __future__ import annotations

import errno
import socket

from rainierd.http.config import HttpConfig
from rainierd.settings import Settings, flag_name, parse_host_port


def listen_setting(command: str, settings: Settings) -> str | None:
    """Return the name of the setting holding ``command``'s HTTP address, None when it serves none."""
    if command in ("run", "monitor", "aggregate"):
        return "metrics_addr"
    if command == "simulate" and "metrics_addr" in settings.model_fields_set:
        return "metrics_addr"  # it serves its probes only when asked to
    if command == "bridge":
        return "bridge_listen"
    return None


def taken(address: str) -> OSError | None:
    """Return why ``address`` (host:port) cannot be listened on (in use, not permitted), None if it can.

    A host that does not resolve is left for the server to report.
    """
    host, port = parse_host_port(address)
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return None
    for family, kind, proto, _name, sockaddr in dict.fromkeys(infos):
        # As the server binds (SO_REUSEADDR, v6 only on v6), so a socket in TIME_WAIT does not count as taken.
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(sockaddr)
            except OSError as exc:
                return exc
    return None


def in_use_message(name: str, address: str, exc: OSError) -> str:
    """Return the one line saying ``address`` (the setting ``name``) cannot be listened on, and what to do."""
    flag, variable = flag_name(name), f"RAINIERD_{name.upper()}"
    if exc.errno == errno.EADDRINUSE:
        return (f"{address} is already in use (another rainierd?): give this one another address with "
                f"{flag} HOST:PORT (or {variable})")
    return f"cannot listen on {address} ({flag}): {exc.strerror or exc}"


def local_url(config: HttpConfig, port: int) -> str:
    """Return the URL a client on this machine reaches a server listening as ``config`` (on ``port``) at: a
    wildcard address is asked on loopback, https when the web config serves TLS."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(config.host, config.host)
    scheme = "https" if config.web is not None and config.web.tls is not None else "http"
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"
