"""SQLite's SQL: every statement of the store (:class:`petstore.server.store.Dialect`)
as SQLite writes it, for the driver of :mod:`petstore.server.store.sqlite`.

Named ``:name`` parameters; timestamps as ISO text in UTC
(:func:`petstore.server.store.sqlite_connections.iso`).
"""

from __future__ import annotations

import msgspec

from petstore.schemas import NewPet, Pet
from petstore.server.store import Dialect
from petstore.server.store.api_keys import ApiKey, ApiKeyRecord, ApiKeyStatements
from petstore.server.store.idempotency_records import RECORD_COLUMNS, IdempotencyStatements
from petstore.server.store.pets import PetStatements
from petstore.server.store.rows import column_list, parameter_list, select_list
from petstore.server.store.sqlite_connections import iso

_PET = select_list(Pet)
#: A NewPet's columns out of ``json_each``'s ``value``, in ``column_list`` order.
_FROM_JSON = ", ".join(f"value ->> '{field.name}'" for field in msgspec.structs.fields(NewPet))

#: SQLite's SQL (named ``:name`` parameters; timestamps as ISO text in UTC, :func:`iso`).
#: One writer at a time and ``AUTOINCREMENT`` keep ids in commit order (D5, D9).
DIALECT = Dialect(
    pets=PetStatements(
        insert=(
            f"INSERT INTO pets ({column_list(NewPet)}) "
            f"VALUES ({parameter_list(NewPet, 'named')}) RETURNING {_PET}"
        ),
        # Each id is the batch's base (the highest id ever issued, read first in the
        # same transaction) plus 1 plus the NewPet's place in the array: given by the
        # statement, never left to the order in which rows are inserted or returned.
        insert_many=(
            f"INSERT INTO pets (id, {column_list(NewPet)}) "
            f"SELECT :base + 1 + key, {_FROM_JSON} FROM json_each(:new_pets) "
            f"RETURNING {_PET}, id - :base - 1 AS ordinal"
        ),
        insert_many_first=(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'pets'), 0), "
            "coalesce((SELECT max(id) FROM pets), 0)) AS base"
        ),
        list_page=f"SELECT {_PET} FROM pets WHERE id > :after_id ORDER BY id LIMIT :limit",
        list_page_of_status=(
            f"SELECT {_PET} FROM pets WHERE status = :status AND id > :after_id "
            "ORDER BY id LIMIT :limit"
        ),
        get=f"SELECT {_PET} FROM pets WHERE id = :id",
        get_many=f"SELECT {_PET} FROM pets WHERE id IN (SELECT value FROM json_each(:ids))",
        # Migration 0005's count of the changes made to animals (triggers).
        version="SELECT changes FROM pet_changes",
    ),
    api_keys=ApiKeyStatements(
        insert=(
            "INSERT INTO api_keys (name, prefix, key_hash, created_at, expires_at, scopes, "
            "rate_limit) VALUES (:name, :prefix, :key_hash, :created_at, :expires_at, :scopes, "
            f":rate_limit) RETURNING {select_list(ApiKey)}"
        ),
        list_all=f"SELECT {select_list(ApiKey)} FROM api_keys ORDER BY id",
        revoke=(
            "UPDATE api_keys SET revoked_at = :revoked_at "
            "WHERE id = :id AND revoked_at IS NULL RETURNING id"
        ),
        find=f"SELECT {select_list(ApiKeyRecord)} FROM api_keys WHERE prefix = :prefix",
        count_active=(
            "SELECT count(*) AS active FROM api_keys "
            "WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > :now)"
        ),
    ),
    idempotency_records=IdempotencyStatements(
        delete_expired=(
            "DELETE FROM idempotency_records "
            "WHERE api_key_id = :api_key_id AND idempotency_key = :key "
            "AND created_at < :expired_before"
        ),
        insert=(
            "INSERT INTO idempotency_records (api_key_id, idempotency_key, fingerprint, pet_id, "
            "response, created_at) "
            "VALUES (:api_key_id, :key, :fingerprint, :pet_id, :response, :created_at) "
            "ON CONFLICT DO NOTHING RETURNING pet_id"
        ),
        select=(
            f"SELECT {RECORD_COLUMNS} FROM idempotency_records "
            "WHERE api_key_id = :api_key_id AND idempotency_key = :key"
        ),
        find=(
            f"SELECT {RECORD_COLUMNS} FROM idempotency_records "
            "WHERE api_key_id = :api_key_id AND idempotency_key = :key "
            "AND created_at > :created_after"
        ),
        purge="DELETE FROM idempotency_records WHERE created_at < :created_before RETURNING 1",
    ),
    schema_exists=(
        "SELECT count(*) AS present FROM sqlite_master "
        "WHERE type = 'table' AND name = 'alembic_version'"
    ),
    schema_revision="SELECT version_num FROM alembic_version",
    to_db=iso,
)
