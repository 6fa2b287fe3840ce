"""Bearer authentication (interface: Authentication; D12, D13; RFC 6750).

:class:`KeyVerifier` turns an ``Authorization`` header into the :class:`Caller` of a
valid API key (its id, scopes and rate limit) or raises ``errors.Unauthorized``.
Verified keys are cached in process for ``key_cache_seconds`` (at most 5 s, so a
revocation bites within 5 s everywhere); unknown keys are never cached, so a new key
works at once. The cache is keyed by the ``Authorization`` value as sent, so a key
seen in the last seconds costs one cache lookup: no parsing and no SHA-256. It holds
the 10,000 most recently used entries (an ``lru.LRU``, a dict in C), each with its
own stale time; like the requests that carry them, they are in the process's memory
only, never logged or stored.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

from lru import LRU

from petstore.server import errors
from petstore.server.clock import Monotonic
from petstore.server.rules import keys
from petstore.server.store import Store

_CACHE_MAX = 10_000


class Caller(NamedTuple):
    """Who sent a request: the API key's id (logged, never the key, D13), the scopes
    it holds (D21) and its own rate limit, None for the service's (D22)."""

    api_key_id: int
    scopes: frozenset[str]
    rate_limit: str | None


class KeyVerifier:
    """Checks bearer keys against the store, in constant time per candidate key."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], datetime],
        monotonic: Monotonic,
        cache_seconds: float,
    ) -> None:
        """``clock`` tells expiry (D13), ``monotonic`` the age of a cached key."""
        self._store = store
        self._clock = clock
        self._now = monotonic
        self._cache_seconds = cache_seconds
        # Authorization header -> (caller, expiry or None, monotonic time it goes stale)
        self._cache: LRU[str, tuple[Caller, datetime | None, float]] = LRU(_CACHE_MAX)

    async def verify(self, authorization: str | None) -> Caller:
        """The caller whose API key is in ``authorization`` (``Bearer <key>``, scheme
        any case).

        Raises Unauthorized when the header is missing, malformed, or names a key
        that is unknown, revoked or expired.
        """
        cached = self._cache.get(authorization) if authorization else None
        if cached is not None and cached[2] > self._now():
            caller, expires_at, _ = cached
        else:
            caller, expires_at = await self._lookup(authorization)
        if expires_at is not None and expires_at <= self._clock():
            raise errors.Unauthorized("the API key has expired", key_sent=True)
        return caller

    async def _lookup(self, authorization: str | None) -> tuple[Caller, datetime | None]:
        """Parse ``authorization``, find its key in the store and cache it when valid:
        (caller, expiry). Raises Unauthorized as :meth:`verify` does."""
        if not authorization:
            raise errors.Unauthorized(
                "an API key is required: Authorization: Bearer <key>", key_sent=False
            )
        scheme, _, token = authorization.partition(" ")
        token = token.strip(" ")
        if scheme.lower() != "bearer" or not token:
            raise errors.Unauthorized(
                "the Authorization header must be: Bearer <key>", key_sent=True
            )
        prefix = keys.visible_prefix(token)
        invalid = errors.Unauthorized("the API key is not valid", key_sent=True)
        if prefix is None:
            raise invalid
        key_hash = keys.hash_key(token)
        for record in await self._store.find_api_keys(prefix):
            if hmac.compare_digest(record.key_hash, key_hash):
                if record.revoked_at is not None:
                    break
                caller = Caller(record.id, frozenset(record.scopes), record.rate_limit)
                if self._cache_seconds > 0:
                    stale_at = self._now() + self._cache_seconds
                    self._cache[authorization] = (caller, record.expires_at, stale_at)
                return caller, record.expires_at
        raise invalid
