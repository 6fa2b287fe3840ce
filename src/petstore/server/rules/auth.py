"""Bearer authentication (interface: Authentication; D12, D13; RFC 6750).

:func:`bearer_token` reads the key out of an ``Authorization`` header, or raises
``errors.Unauthorized`` for a header that is missing or cannot hold a key, with no
other work: a header longer than :data:`MAX_AUTHORIZATION_CHARS` is refused before it
is even split. :class:`KeyVerifier` turns a key into the :class:`Caller` of a valid
API key (its id, scopes and rate limit): from its cache (:meth:`KeyVerifier.cached`),
or, for a key of a key's shape (:func:`well_formed`), from the store
(:meth:`KeyVerifier.lookup`); or raises ``errors.Unauthorized``.

Verified keys are cached in process for ``key_cache_seconds`` (at most 5 s, so a
revocation bites within 5 s everywhere); unknown keys are never cached, so a new key
works at once. The cache is keyed by the token, never the header as sent, so every
spelling of one key (``bearer``, padding) shares one entry: it holds at most
:data:`CACHE_MAX` entries of a key each (about 400 bytes), whatever is sent. Like the
requests that carry them, the entries are in the process's memory only, never logged
or stored.
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
from petstore.server.store.api_keys import ApiKeyRepository

#: Verified keys cached at most (an ``lru.LRU``: the least recently used goes first).
CACHE_MAX = 10_000
#: The longest ``Authorization`` value read: ``Bearer`` and a key (59 characters) with
#: room for stray spaces. Anything longer cannot hold a key and is refused unread.
MAX_AUTHORIZATION_CHARS = 200


class Caller(NamedTuple):
    """Who sent a request: the API key's id (logged, never the key, D13), the scopes
    it holds (D21) and its own rate limit, None for the service's (D22)."""

    api_key_id: int
    scopes: frozenset[str]
    rate_limit: str | None


def bearer_token(authorization: bytes | None) -> bytes:
    """The key of the ``Authorization`` value ``authorization`` as sent (``Bearer
    <key>``, the scheme word any case, D12), not yet judged: :func:`well_formed` does.

    Raises Unauthorized, ``key_sent`` False, when the header is missing, and
    ``key_sent`` True when it is longer than :data:`MAX_AUTHORIZATION_CHARS` or has
    another scheme.
    """
    if not authorization:
        raise errors.Unauthorized(
            "an API key is required: Authorization: Bearer <key>", key_sent=False
        )
    if len(authorization) > MAX_AUTHORIZATION_CHARS:
        raise malformed()
    scheme, _, value = authorization.partition(b" ")
    if scheme.lower() != b"bearer":
        raise malformed()
    return value.strip(b" ")


def well_formed(token: bytes) -> bool:
    """Whether ``token`` has the shape of a key (``keys.visible_prefix``)."""
    return token.isascii() and keys.visible_prefix(token.decode()) is not None


def malformed() -> errors.Unauthorized:
    """The refusal of an ``Authorization`` value that holds no key."""
    return errors.Unauthorized("the Authorization header must be: Bearer <key>", key_sent=True)


class KeyVerifier:
    """Checks bearer keys against the stored ``api_keys``, in constant time per
    candidate key."""

    def __init__(
        self,
        api_keys: ApiKeyRepository,
        *,
        clock: Callable[[], datetime],
        monotonic: Monotonic,
        cache_seconds: float,
    ) -> None:
        """``clock`` tells expiry (D13), ``monotonic`` the age of a cached key."""
        self._api_keys = api_keys
        self._clock = clock
        self._now = monotonic
        self._cache_seconds = cache_seconds
        # token -> (caller, expiry or None, monotonic time it goes stale)
        self._cache: LRU[bytes, tuple[Caller, datetime | None, float]] = LRU(CACHE_MAX)

    def known(self, token: bytes) -> bool:
        """Whether ``token`` was valid when this verifier last looked it up (its entry
        may be stale: :meth:`lookup` looks again). A key that failed is not known."""
        return token in self._cache

    def cached(self, token: bytes) -> Caller | None:
        """The caller of ``token`` when it was verified less than ``cache_seconds``
        ago, else None. Raises Unauthorized when the key has expired since (D13)."""
        cached = self._cache.get(token)
        if cached is None or cached[2] <= self._now():
            return None
        expires_at = cached[1]
        if expires_at is not None and expires_at <= self._clock():
            raise errors.Unauthorized("the API key has expired", key_sent=True)
        return cached[0]

    async def lookup(self, token: bytes) -> Caller:
        """The caller of the well-formed key ``token`` (:func:`well_formed`), found in
        the store and cached when valid.

        Raises Unauthorized when it names a key that is unknown, revoked or expired,
        and then forgets the token.
        """
        text = token.decode()
        prefix = keys.visible_prefix(text) or ""
        key_hash = keys.hash_key(text)
        for record in await self._api_keys.find(prefix):
            if hmac.compare_digest(record.key_hash, key_hash):
                if record.revoked_at is not None:
                    break
                if record.expires_at is not None and record.expires_at <= self._clock():
                    self._cache.pop(token, None)
                    raise errors.Unauthorized("the API key has expired", key_sent=True)
                caller = Caller(record.id, frozenset(record.scopes), record.rate_limit)
                if self._cache_seconds > 0:
                    stale_at = self._now() + self._cache_seconds
                    self._cache[token] = (caller, record.expires_at, stale_at)
                return caller
        self._cache.pop(token, None)
        raise errors.Unauthorized("the API key is not valid", key_sent=True)
