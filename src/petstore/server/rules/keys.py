"""API keys (D13): format, hashing, and the operator's create/list/revoke.

A key is ``petstore_`` followed by 43 base64url characters (32 random bytes, 256
bits). The type prefix lets secret scanners spot a leaked key; the first 8 random
characters, with the prefix, are the key's visible *prefix*, stored in clear to find
its row. Only the SHA-256 hash of the whole key is stored: the key is random, not a
password, so a slow password hash would add latency and no safety.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Collection
from datetime import UTC, datetime

from petstore.server import config
from petstore.server.store.api_keys import ApiKey, ApiKeyRepository

KEY_TYPE_PREFIX = "petstore_"
_RANDOM_CHARS = 43  # base64url of 32 bytes, unpadded
_VISIBLE_CHARS = 8
_KEY_RE = re.compile(rf"{KEY_TYPE_PREFIX}[A-Za-z0-9_-]{{{_RANDOM_CHARS}}}")
NAME_MAX = 100
#: D21: what a key may do. ``pets:read`` is listPets and getPet, ``pets:write`` createPet.
READ, WRITE = "pets:read", "pets:write"
SCOPES = (READ, WRITE)


def generate() -> str:
    """A new random key (256 bits from ``secrets``)."""
    return KEY_TYPE_PREFIX + secrets.token_urlsafe(32)


def visible_prefix(key: str) -> str | None:
    """The stored lookup prefix of a well-formed key, None when ``key`` is malformed."""
    if _KEY_RE.fullmatch(key) is None:
        return None
    return key[: len(KEY_TYPE_PREFIX) + _VISIBLE_CHARS]


def hash_key(key: str) -> str:
    """The stored form of a key: SHA-256, hex."""
    return hashlib.sha256(key.encode()).hexdigest()


async def create(
    api_keys: ApiKeyRepository,
    *,
    name: str,
    now: datetime,
    expires_at: datetime | None = None,
    scopes: Collection[str] = SCOPES,
    rate_limit: str | None = None,
) -> tuple[ApiKey, str]:
    """Create a key named ``name`` (1-100 characters) that may do ``scopes`` (D21: a
    non-empty subset of :data:`SCOPES`, both by default) within its own
    ``rate_limit`` (D22: ``6000/minute`` notation; None for the service's); returns
    its record and the key.

    The key itself is returned only here, once. Raises ValueError for an empty or
    long name, an ``expires_at`` that is naive or not after ``now``, an unknown or
    empty scope list, or a rate limit that is not ``N/second|minute|hour|day``.
    """
    if not name.strip() or len(name) > NAME_MAX:
        raise ValueError(f"a key name is 1 to {NAME_MAX} characters, not blank")
    unknown = set(scopes) - set(SCOPES)
    if unknown or not scopes:
        raise ValueError(f"scopes are one or more of {', '.join(SCOPES)}")
    if rate_limit is not None:
        rate_limit = config.check_rate_limit(rate_limit)
    if expires_at is not None:
        if expires_at.tzinfo is None:
            raise ValueError("the expiry needs a time zone, e.g. 2027-01-01T00:00:00Z")
        if expires_at <= now:
            raise ValueError("the expiry must be in the future")
        expires_at = expires_at.astimezone(UTC)
    key = generate()
    prefix = visible_prefix(key)
    assert prefix is not None
    record = await api_keys.create(
        name=name,
        prefix=prefix,
        key_hash=hash_key(key),
        created_at=now,
        expires_at=expires_at,
        scopes=tuple(scope for scope in SCOPES if scope in scopes),
        rate_limit=rate_limit,
    )
    return record, key


async def ensure_dev_key(api_keys: ApiKeyRepository, *, now: datetime) -> str | None:
    """Create a key named ``dev`` when no key is active; returns it, or None."""
    if await api_keys.count_active(now=now):
        return None
    _, key = await create(api_keys, name="dev", now=now)
    return key


async def list_keys(api_keys: ApiKeyRepository) -> list[ApiKey]:
    """Every key of ``api_keys``, revoked and expired ones included, by id. The records
    carry no key and no hash."""
    return await api_keys.list_all()


async def revoke(api_keys: ApiKeyRepository, key_id: int, *, now: datetime) -> bool:
    """Revoke key ``key_id`` as of ``now``; every instance refuses it within 5 seconds.

    Returns False when no unrevoked key has that id (unknown, or revoked already).
    Raises ValueError when ``now`` is naive.
    """
    if now.tzinfo is None:
        raise ValueError("the revocation time needs a time zone")
    return await api_keys.revoke(key_id, at=now.astimezone(UTC))
