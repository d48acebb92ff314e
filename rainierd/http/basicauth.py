"""HTTP basic auth against bcrypt hashes, cheap enough to sit in front of
every scrape and a flood of wrong passwords cannot queue a scraper behind.

bcrypt is slow on purpose (some 60 ms at cost 10), too slow for the event
loop and for a scrape every few seconds.  So, as exporter-toolkit does, a
successful check is remembered in memory as (username, SHA-256 of the
password): a scraper pays for one bcrypt check per process, ever, and every
later request with it is answered at once, waiting on nothing.  Only
passwords bcrypt fully reads (72 bytes at most) are checked, so the memo
holds at most one entry per configured user.

A refusal is remembered too, in a bounded memo (least recently seen
forgotten first): the same wrong credentials again are refused at once.

Checks that do reach bcrypt run in their own worker threads (bcrypt
releases the GIL), never in the event loop's default executor where the
scrape renders: ``workers`` of them (two by default), of which one peer
address may hold ``workers - 1`` at a time, so a flood from one address
costs one core and leaves a worker free for everyone else.  Waiting checks
queue per peer: a free worker takes the first peer in the round that may
run another check, and from it that peer's newest check, then moves the
peer to the back; a peer that had nothing waiting joins at the front.
When more than ``max_waiting`` wait, the oldest check of the peer with the
most waiting is refused unchecked (``shed``).  What that guarantees a
correct credential that is not yet remembered, arriving during a flood of
wrong ones:

- from another address than the flood's: it starts at once, on the worker
  the flooder may not take; only when floods come from as many addresses
  as there are workers does it wait, and then for one running check (and
  for first checks of yet other addresses that arrive meanwhile); it is
  never shed while a flooder has more waiting;
- from the flooding address itself: it goes ahead of everything that
  address sent before it, so it waits for that address's running check
  and for newer checks only.

At cost 10 (~60 ms a check on a quiet core) the second case is a delay of
at most one check after a burst of any size, and the first none at all.
Concurrent requests with the same credentials
share one check.

An unknown username costs a bcrypt check too (against a configured user's
hash, the result ignored) and is remembered as refused like a wrong
password, and usernames are compared in constant time, so response times do
not tell which usernames exist.  Neither the password nor the Authorization
header is ever logged or kept in clear.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import hashlib
import hmac
from base64 import b64decode
from collections import OrderedDict, deque
from collections.abc import Sequence
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final

import bcrypt

from rainierd.http.status import AUTH_RESULTS

# bcrypt reads no further; a longer password would verify by its first 72 bytes.
_BCRYPT_MAX_PASSWORD_BYTES: Final = 72
_WORKERS: Final = 2  # one peer may hold workers - 1 of them: a flood from one address costs one core
_MAX_WAITING: Final = 64  # ~4 s of work at cost 10: the longest a shed-free wait can be
_MAX_REFUSED_MEMO: Final = 4_096  # ~0.5 MiB of digests

_Key = tuple[bytes, bytes]  # (username, SHA-256 of the password)


@dataclass(eq=False)
class _Check:
    key: _Key
    peer: str
    password: bytes
    hashed: bytes  # the hash to check against (a configured user's, for an unknown user)
    known: bool  # the username is configured
    verdict: asyncio.Future[bool]
    waiters: int = field(default=0)


class BasicAuth:
    """Checks ``Authorization: Basic ...`` header values against bcrypt hashes."""

    def __init__(
        self, users: Sequence[tuple[str, bytes]], *, workers: int = _WORKERS, max_waiting: int = _MAX_WAITING,
        max_refused_memo: int = _MAX_REFUSED_MEMO,
    ) -> None:
        """``users`` are (username, bcrypt hash) pairs; there must be at least one."""
        if not users:
            raise ValueError("BasicAuth needs at least one user")
        self._users = tuple((name.encode(), hashed) for name, hashed in users)
        self._verified: set[_Key] = set()
        self._refused: OrderedDict[_Key, None] = OrderedDict()
        self._max_refused, self._max_waiting, self._workers = max_refused_memo, max_waiting, workers
        self._pending: dict[_Key, _Check] = {}  # running or waiting, so concurrent equal requests share one
        self._waiting: OrderedDict[str, deque[_Check]] = OrderedDict()  # peer -> its checks, oldest first
        self._n_waiting = 0
        self._running = 0
        self._running_by_peer: dict[str, int] = {}
        self._per_peer = max(1, workers - 1)
        self._executor: ThreadPoolExecutor | None = None
        self.bcrypt_checks = 0
        self.results = dict.fromkeys(AUTH_RESULTS, 0)

    @property
    def waiting(self) -> int:
        """Checks waiting for a worker now."""
        return self._n_waiting

    async def allows(self, authorization: bytes | None, *, peer: str = "") -> bool:
        """Return whether an Authorization header value carries a configured user's password.

        ``peer`` (the client's address) is whose turn the check waits in.
        """
        credentials = _credentials(authorization)
        if credentials is None:
            self.results["malformed"] += 1
            return False
        user, password = credentials
        key = (user, hashlib.sha256(password).digest())
        if key in self._verified:
            self.results["cached"] += 1
            return True
        if key in self._refused:
            self._refused.move_to_end(key)
            self.results["refused_cached"] += 1
            return False
        check = self._pending.get(key)
        if check is None:
            hashed = self._hash_of(user)
            check = _Check(key, peer, password, hashed or self._users[0][1], hashed is not None,
                           asyncio.get_running_loop().create_future())
            self._pending[key] = check
            self._submit(check)
        check.waiters += 1
        try:
            # Shielded: a waiter cancelled (its connection evicted) leaves the verdict to the others.
            return await asyncio.shield(check.verdict)
        finally:
            check.waiters -= 1

    def close(self) -> None:
        """Stop the worker threads once the running checks finish (waiting ones are refused)."""
        for checks in self._waiting.values():
            for check in checks:
                self._decide(check, False, memo=False)
        self._waiting.clear()
        self._n_waiting = 0
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _submit(self, check: _Check) -> None:
        if self._running < self._workers and self._running_by_peer.get(check.peer, 0) < self._per_peer:
            self._start(check)
            return
        if check.peer not in self._waiting:
            # A peer with nothing waiting goes first: a lone scraper waits for the running check only.
            self._waiting[check.peer] = deque()
            self._waiting.move_to_end(check.peer, last=False)
        self._waiting[check.peer].append(check)
        self._n_waiting += 1
        if self._n_waiting > self._max_waiting:
            # The peer with the most waiting loses its oldest: a single scraper's check is the last to go.
            peer = max(self._waiting, key=lambda p: len(self._waiting[p]))
            shed = self._take(peer, newest=False)
            self.results["shed"] += 1
            self._decide(shed, False, memo=False)

    def _take(self, peer: str, *, newest: bool) -> _Check:
        checks = self._waiting[peer]
        check = checks.pop() if newest else checks.popleft()
        self._n_waiting -= 1
        if not checks:
            del self._waiting[peer]
        elif newest:
            self._waiting.move_to_end(peer)  # its next check waits for every other peer's turn
        return check

    def _next(self) -> None:
        while self._running < self._workers:
            # The first peer in the round that may run another check (the others wait for their own).
            peer = next((p for p in self._waiting if self._running_by_peer.get(p, 0) < self._per_peer), None)
            if peer is None:
                return
            check = self._take(peer, newest=True)
            if check.waiters == 0:  # every request that wanted it has gone: no verdict to give
                self._decide(check, False, memo=False)
                continue
            self._start(check)

    def _start(self, check: _Check) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="rainierd-bcrypt")
        self._running += 1
        self._running_by_peer[check.peer] = self._running_by_peer.get(check.peer, 0) + 1
        self.bcrypt_checks += 1
        loop = asyncio.get_running_loop()
        done = self._executor.submit(_checkpw, check.password, check.hashed)

        def finished(future: ThreadFuture[bool]) -> None:
            ok = not future.cancelled() and future.exception() is None and future.result()
            with contextlib.suppress(RuntimeError):  # the loop closed while the check ran: nobody waits for it
                loop.call_soon_threadsafe(self._finished, check, ok)

        done.add_done_callback(finished)

    def _finished(self, check: _Check, ok: bool) -> None:
        self._running -= 1
        left = self._running_by_peer.pop(check.peer) - 1
        if left:
            self._running_by_peer[check.peer] = left
        # An unknown user is checked against a configured hash and refused whatever the result.
        verdict = ok and check.known
        self.results["accepted" if verdict else "refused"] += 1
        self._decide(check, verdict, memo=True)
        self._next()

    def _decide(self, check: _Check, verdict: bool, *, memo: bool) -> None:
        self._pending.pop(check.key, None)
        if memo and verdict:
            self._verified.add(check.key)
        elif memo:
            self._refused[check.key] = None
            if len(self._refused) > self._max_refused:
                self._refused.popitem(last=False)
        if not check.verdict.done():
            check.verdict.set_result(verdict)

    def _hash_of(self, user: bytes) -> bytes | None:
        found = None
        for name, hashed in self._users:  # every name compared, whichever matches
            if hmac.compare_digest(name, user):
                found = hashed
        return found


def _checkpw(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # a hash bcrypt cannot read; webconfig admits none, but never a 500
        return False


def _credentials(authorization: bytes | None) -> tuple[bytes, bytes] | None:
    """Return (username, password) of a ``Basic`` header value, or None if it is not one."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        decoded = b64decode(token.strip(), validate=True)
    except binascii.Error:
        return None
    user, colon, password = decoded.partition(b":")
    if not colon or len(password) > _BCRYPT_MAX_PASSWORD_BYTES:
        return None
    return user, password
