"""The SQL that is the same on both backends, written once.

Statements use ``?`` placeholders, SQLite's parameter style; the PostgreSQL backend
turns each into its ``%s`` style once, at import, with :func:`postgres`. Timestamps
are parameters: SQLite stores them as ISO text in UTC, PostgreSQL as ``timestamptz``,
and each backend converts its own. What differs between the backends (SQLite's
``json_each`` read of many ids, PostgreSQL's ``json_to_recordset`` inserts, pages
side by side and id-order lock) is in the backend's module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, LiteralString

from petstore.server.store import ApiKey, ApiKeyRecord

PET_COLUMNS = "id, name, category_id, status"
KEY_COLUMNS = "id, name, prefix, created_at, expires_at, revoked_at, scopes, rate_limit"
IDEMPOTENCY_COLUMNS = "api_key_id, idempotency_key, fingerprint, pet_id, response, created_at"

# Pets --------------------------------------------------------------------------------

#: One animal: name, category_id, status. (SQLite takes its id from ``lastrowid``,
#: PostgreSQL adds ``RETURNING id``.)
INSERT_PET = "INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?)"
#: A keyset page (D7): after_id, limit. (PostgreSQL reads the pages asked at once
#: side by side in one query instead: ``postgres._LIST_PAGES``.)
LIST_PETS = f"SELECT {PET_COLUMNS} FROM pets WHERE id > ? ORDER BY id LIMIT ?"  # noqa: S608
#: A keyset page of one status: status, after_id, limit.
LIST_PETS_OF_STATUS = (
    f"SELECT {PET_COLUMNS} FROM pets WHERE status = ? AND id > ? ORDER BY id LIMIT ?"  # noqa: S608
)

# Idempotency records (D16): a create's claim on its key --------------------------------

#: Before claiming: the record of this key created before the expiry, if any, goes.
#: api_key_id, key, expired_before.
DELETE_EXPIRED_CLAIM = (
    "DELETE FROM idempotency_records "
    "WHERE api_key_id = ? AND idempotency_key = ? AND created_at < ?"
)
#: The claim; no row back when an unexpired record of the key exists.
#: api_key_id, key, fingerprint, pet_id, response, created_at.
INSERT_CLAIM = (
    f"INSERT INTO idempotency_records ({IDEMPOTENCY_COLUMNS}) "  # noqa: S608
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING pet_id"
)
#: The record that won over a claim: api_key_id, key.
SELECT_CLAIM = (
    f"SELECT {IDEMPOTENCY_COLUMNS} FROM idempotency_records "  # noqa: S608
    "WHERE api_key_id = ? AND idempotency_key = ?"
)
#: The record of a key if unexpired: api_key_id, key, created_after.
FIND_IDEMPOTENCY_RECORD = SELECT_CLAIM + " AND created_at > ?"
#: Expired records: created_before.
PURGE_IDEMPOTENCY_RECORDS = "DELETE FROM idempotency_records WHERE created_at < ?"

# API keys (D13) ------------------------------------------------------------------------

#: name, prefix, key_hash, created_at, expires_at, scopes (space-separated, D21),
#: rate_limit (D22, NULL for the default); the key's row back.
INSERT_API_KEY = (
    "INSERT INTO api_keys (name, prefix, key_hash, created_at, expires_at, scopes, rate_limit) "  # noqa: S608
    f"VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING {KEY_COLUMNS}"
)
LIST_API_KEYS = f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY id"  # noqa: S608
#: revoked_at, id; a row back when a key was revoked.
REVOKE_API_KEY = (
    "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL RETURNING id"
)
#: prefix.
FIND_API_KEYS = (
    "SELECT id, key_hash, expires_at, revoked_at, scopes, rate_limit FROM api_keys WHERE prefix = ?"
)
#: now.
COUNT_ACTIVE_API_KEYS = (
    "SELECT count(*) FROM api_keys "
    "WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)"
)

# Schema ------------------------------------------------------------------------------

#: The applied migration; fails when the table does not exist (an empty database).
SCHEMA_REVISION = "SELECT version_num FROM alembic_version"


def postgres(statement: LiteralString) -> LiteralString:
    """``statement`` (``?`` placeholders) in PostgreSQL's ``%s`` style.

    Raises ValueError for a statement holding ``%``, which psycopg would read as
    the start of a placeholder: the statements here hold neither ``%`` nor a ``?``
    other than a placeholder.
    """
    if "%" in statement:
        raise ValueError(f"a statement with % cannot be adapted: {statement}")
    return statement.replace("?", "%s")


def _as_is(value: Any) -> Any:
    return value


def api_key(row: Sequence[Any], *, time: Callable[[Any], datetime | None] = _as_is) -> ApiKey:
    """The key of a row of :data:`KEY_COLUMNS`, its timestamps read with ``time`` (as
    they come on PostgreSQL; SQLite stores text). Scopes are stored space-separated."""
    created_at = time(row[3])
    assert created_at is not None  # NOT NULL
    return ApiKey(
        row[0],
        row[1],
        row[2],
        created_at,
        time(row[4]),
        time(row[5]),
        tuple(row[6].split()),
        row[7],
    )


def api_key_record(
    row: Sequence[Any], *, time: Callable[[Any], datetime | None] = _as_is
) -> ApiKeyRecord:
    """The record of a row of :data:`FIND_API_KEYS`, timestamps read with ``time``."""
    return ApiKeyRecord(row[0], row[1], time(row[2]), time(row[3]), tuple(row[4].split()), row[5])
