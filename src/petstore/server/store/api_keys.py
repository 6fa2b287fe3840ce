"""API keys (D13, D21, D22): their values, each dialect's SQL for them, and the
repository the operator's commands and the key check use.

Only a key's hash is stored, never the key. Scopes are stored as one space-separated
text (``pets:read pets:write``) and come back as a tuple.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, LiteralString, NamedTuple, TypeVar

import msgspec

from petstore.server.store.driver import Database
from petstore.server.store.rows import Row

S = TypeVar("S", "ApiKey", "ApiKeyRecord")


class ApiKey(msgspec.Struct, frozen=True):
    """An API key as the operator sees it: never the secret, nor its hash (D13); its
    scopes (D21) and its own rate limit, None for the service's (D22)."""

    id: int
    name: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    scopes: tuple[str, ...]
    rate_limit: str | None


class ApiKeyRecord(msgspec.Struct, frozen=True):
    """What verifying a presented key needs: its id, stored hash and validity, and
    what it may do: its scopes (D21) and rate limit (D22, None for the default)."""

    id: int
    key_hash: str
    expires_at: datetime | None
    revoked_at: datetime | None
    scopes: tuple[str, ...]
    rate_limit: str | None


class ApiKeyStatements(NamedTuple):
    """One dialect's SQL for API keys; parameters named as the comments say. Those
    returning keys list :func:`.rows.select_list` of ApiKey, ``find`` of ApiKeyRecord."""

    #: ``name``, ``prefix``, ``key_hash``, ``created_at``, ``expires_at``, ``scopes``,
    #: ``rate_limit``; the key's row.
    insert: LiteralString
    #: Every key, by id.
    list_all: LiteralString
    #: ``revoked_at``, ``id``; a row when a key was revoked.
    revoke: LiteralString
    #: ``prefix``.
    find: LiteralString
    #: ``now``; one row, its ``active`` count.
    count_active: LiteralString


def _key(kind: type[S], row: Row) -> S:
    """A row of ``kind``'s columns as ``kind``, its scopes split."""
    return msgspec.convert({**row, "scopes": row["scopes"].split()}, kind)


class ApiKeyRepository:
    """The API keys of ``database``, with its dialect's ``sql``; ``to_db`` is the
    dialect's timestamp parameter. Every method raises ``errors.Unavailable`` when
    the database cannot be used now."""

    def __init__(
        self, database: Database, *, sql: ApiKeyStatements, to_db: Callable[[Any], Any]
    ) -> None:
        self._database = database
        self._sql = sql
        self._to_db = to_db

    async def create(
        self,
        *,
        name: str,
        prefix: str,
        key_hash: str,
        created_at: datetime,
        expires_at: datetime | None,
        scopes: tuple[str, ...],
        rate_limit: str | None,
    ) -> ApiKey:
        """Store a new key's hash and metadata (``scopes`` D21, ``rate_limit`` D22)."""
        to_db = self._to_db
        params = {
            "name": name,
            "prefix": prefix,
            "key_hash": key_hash,
            "created_at": to_db(created_at),
            "expires_at": None if expires_at is None else to_db(expires_at),
            "scopes": " ".join(scopes),
            "rate_limit": rate_limit,
        }
        (row,) = await self._database.write(self._sql.insert, params)
        return _key(ApiKey, row)

    async def list_all(self) -> list[ApiKey]:
        """Every key, revoked and expired ones included, by id."""
        return [_key(ApiKey, row) for row in await self._database.read(self._sql.list_all)]

    async def revoke(self, key_id: int, *, at: datetime) -> bool:
        """Mark a key revoked at ``at``; False when no unrevoked key has that id."""
        params = {"revoked_at": self._to_db(at), "id": key_id}
        return bool(await self._database.write(self._sql.revoke, params))

    async def find(self, prefix: str) -> list[ApiKeyRecord]:
        """The keys whose visible prefix is ``prefix`` (usually one)."""
        rows = await self._database.read(self._sql.find, {"prefix": prefix})
        return [_key(ApiKeyRecord, row) for row in rows]

    async def count_active(self, *, now: datetime) -> int:
        """How many keys are neither revoked nor expired at ``now``."""
        (row,) = await self._database.read(self._sql.count_active, {"now": self._to_db(now)})
        return int(row["active"])
