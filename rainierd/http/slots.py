"""Which connections the exporter keeps when it is full: a fixed number of
slots, and an order of who gives theirs up.

Every accepted connection takes a slot from accept to close, so the
connection cap is a descriptor cap.  A connection starts *silent*: until
its client sends a first byte the server holds only the socket (no TLS
state: a TLS connection holds ~280 KiB once its handshake starts).  When a
new connection arrives and every slot is taken, a slot is freed from:

1. the connections that have not been served an authenticated request
   (silent ones, TLS handshakes under way, ones whose request has not come
   or was refused): of the client address that holds the most of them, a
   silent one if it has one, else the one that has stood so longest;
2. else the connection idle longest between authenticated requests —
   never one in the middle of a request;
3. else none: the new connection is refused (closed at once).

TLS handshakes under way have their own, smaller cap: a connection that
starts one beyond it evicts a handshake under way, chosen the same way.  So
a scraper that keeps its connection alive is never evicted while any
connection has not authenticated; an attacker from one address, however
many connections it opens, evicts only its own while any other address
holds fewer; and among addresses holding as many (a scraper's one new
connection against as many attackers, each from its own address), silent
connections go first, then the longest standing.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from enum import Enum
from typing import Final

from rainierd.http.status import ServerCounters


class Standing(Enum):
    """Where a connection stands, for who is evicted first."""

    SILENT = "silent"  # accepted, its client has sent nothing yet
    HANDSHAKE = "handshake"  # its TLS handshake is under way
    UNAUTHENTICATED = "unauthenticated"  # spoke, but no authenticated request served (none yet, or refused)
    IDLE = "idle"  # served an authenticated request, waiting for the next
    BUSY = "busy"  # reading, checking or answering an authenticated request


_STATE_OF: Final = {Standing.SILENT: "silent", Standing.HANDSHAKE: "handshake",
                    Standing.UNAUTHENTICATED: "unauthenticated", Standing.IDLE: "authenticated",
                    Standing.BUSY: "authenticated"}


# Who gives up a slot first, group by group.
_EVICTION_ORDER: Final = ((Standing.SILENT, Standing.HANDSHAKE, Standing.UNAUTHENTICATED), (Standing.IDLE,))


class Slots:
    """The open connections (each a handler task), by standing, at most ``limit`` of them."""

    def __init__(self, *, limit: int, handshake_limit: int, counters: ServerCounters) -> None:
        self.limit, self.handshake_limit = limit, handshake_limit
        self._counters = counters
        counters.max_connections = limit
        # Oldest first in each, by when each connection took its standing.
        self._by: dict[Standing, OrderedDict[int, asyncio.Task[None]]] = {s: OrderedDict() for s in Standing}
        self._standing: dict[int, Standing] = {}
        self._since: dict[int, int] = {}  # when (in moves) each connection took its standing
        self._moves = 0
        self._peer: dict[int, str] = {}  # each connection's client address

    def __len__(self) -> int:
        return len(self._standing)

    def admit(self, conn: int, task: asyncio.Task[None], peer: str) -> bool:
        """Give the new connection ``conn`` from address ``peer`` (its handler ``task``) a slot as silent,
        evicting another if need be; False if it was refused (the caller closes it)."""
        if len(self) >= self.limit:
            victim = self._victim()
            if victim is None:
                self._counters.dropped["refused"] += 1
                return False
            self._evict(victim, "evicted")
        self._peer[conn] = peer
        self._place(conn, task, Standing.SILENT)
        return True

    def move(self, conn: int, standing: Standing) -> asyncio.Task[None] | None:
        """Record that ``conn`` now stands at ``standing`` (to the back of its queue); starting a handshake
        beyond the handshake cap evicts the oldest one under way, whose handler this returns (else None)."""
        old = self._standing.get(conn)
        if old is None:  # evicted meanwhile: its handler is being cancelled
            return None
        evicted = None
        handshakes = self._by[Standing.HANDSHAKE]
        if standing is Standing.HANDSHAKE and old is not standing and len(handshakes) >= self.handshake_limit:
            evicted = self._evict(self._choose(list(handshakes)), "handshake_evicted")
        task = self._by[old].pop(conn)
        self._counters.connections[_STATE_OF[old]] -= 1
        self._place(conn, task, standing)
        return evicted

    def release(self, conn: int) -> None:
        """Free ``conn``'s slot (its handler is ending); a no-op if it was evicted."""
        standing = self._standing.pop(conn, None)
        if standing is not None:
            del self._by[standing][conn]
            self._forget(conn, standing)

    def tasks(self) -> list[asyncio.Task[None]]:
        """Return every open connection's handler."""
        return [task for by in self._by.values() for task in by.values()]

    def _place(self, conn: int, task: asyncio.Task[None], standing: Standing) -> None:
        self._by[standing][conn] = task
        self._standing[conn] = standing
        self._since[conn] = self._moves
        self._moves += 1
        self._counters.connections[_STATE_OF[standing]] += 1

    def _victim(self) -> int | None:
        for group in _EVICTION_ORDER:
            candidates = [conn for standing in group for conn in self._by[standing]]
            if candidates:
                return self._choose(candidates)
        return None

    def _choose(self, candidates: list[int]) -> int:
        """Return, of ``candidates``, one of the address that holds the most of them: a silent one if it has
        one, else its longest standing."""
        held = Counter(self._peer[conn] for conn in candidates)

        def rank(conn: int) -> tuple[int, bool, int]:
            return -held[self._peer[conn]], self._standing[conn] is not Standing.SILENT, self._since[conn]

        return min(candidates, key=rank)

    def _forget(self, conn: int, standing: Standing) -> None:
        del self._since[conn]
        del self._peer[conn]
        self._counters.connections[_STATE_OF[standing]] -= 1

    def _evict(self, conn: int, reason: str) -> asyncio.Task[None]:
        standing = self._standing.pop(conn)
        task = self._by[standing].pop(conn)
        self._forget(conn, standing)
        self._counters.dropped[reason] += 1
        task.cancel()  # its handler closes the socket as it unwinds
        return task
