"""HTTP basic auth against bcrypt hashes, cheap enough to sit in front of
every scrape.

bcrypt is slow on purpose (some 60 ms at cost 10), too slow for the event
loop and for a scrape every few seconds.  So, as exporter-toolkit does, a
successful check is remembered in memory as (username, SHA-256 of the
password): a scraper pays for one bcrypt check per process, ever.  Only
successes are remembered, and only passwords bcrypt fully reads (72 bytes at
most), so the memo holds at most one entry per configured user.  Checks that
do reach bcrypt run in a worker thread, one at a time, so a flood of wrong
passwords costs one core at most and never stalls the loop.

An unknown username costs a bcrypt check too (against a configured user's
hash, the result ignored), and usernames are compared in constant time, so
response times do not tell which usernames exist.  Neither the password nor
the Authorization header is ever logged or kept in clear.
"""

from __future__ import annotations

import asyncio
import binascii
import hashlib
import hmac
from base64 import b64decode
from collections.abc import Sequence
from typing import Final

import bcrypt

__all__ = ["BasicAuth"]

# bcrypt reads no further; a longer password would verify by its first 72 bytes.
_BCRYPT_MAX_PASSWORD_BYTES: Final = 72


class BasicAuth:
    """Checks ``Authorization: Basic ...`` header values against bcrypt hashes."""

    def __init__(self, users: Sequence[tuple[str, bytes]]) -> None:
        """``users`` are (username, bcrypt hash) pairs; there must be at least one."""
        if not users:
            raise ValueError("BasicAuth needs at least one user")
        self._users = tuple((name.encode(), hashed) for name, hashed in users)
        self._verified: set[tuple[bytes, bytes]] = set()
        self._bcrypt_lock = asyncio.Lock()
        self.bcrypt_checks = 0

    async def allows(self, authorization: bytes | None) -> bool:
        """Return whether an Authorization header value carries a configured user's password."""
        credentials = _credentials(authorization)
        if credentials is None:
            return False
        user, password = credentials
        key = (user, hashlib.sha256(password).digest())
        if key in self._verified:
            return True
        hashed = self._hash_of(user)
        async with self._bcrypt_lock:
            if key in self._verified:  # a concurrent request with the same credentials just checked them
                return True
            self.bcrypt_checks += 1
            # An unknown user is checked against a configured hash and refused whatever the result.
            ok = await asyncio.to_thread(_checkpw, password, hashed or self._users[0][1])
            if ok and hashed is not None:
                self._verified.add(key)
                return True
        return False

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
