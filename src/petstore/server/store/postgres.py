"""The PostgreSQL store: its SQL (psycopg's named parameters, ``timestamptz``), over
the driver of :mod:`.postgres_pool`.

A sequence hands out ids when rows are inserted, not when they commit, so without
care id 5 could commit after id 6, and a client paging with ``id > last_id`` would
already be past it (D9: none skipped). Every statement or transaction that inserts
an animal first takes the transaction-scoped advisory lock :data:`ID_ORDER_LOCK`,
before it draws an id, and the commit releases it: insert transactions are
serialised across every instance sharing the database, so ids become visible in
ascending order. This holds for inserts made through the service with the
identity's default ``CACHE 1``; rows inserted by other means skip the lock.
"""

from __future__ import annotations

from datetime import datetime

from petstore.schemas import NewPet, Pet
from petstore.server.store import Dialect
from petstore.server.store.api_keys import ApiKey, ApiKeyRecord, ApiKeyStatements
from petstore.server.store.idempotency_records import RECORD_COLUMNS, IdempotencyStatements
from petstore.server.store.pets import PetStatements
from petstore.server.store.postgres_pool import PostgresDatabase
from petstore.server.store.rows import column_list, parameter_list, select_list

__all__ = ["DIALECT", "ID_ORDER_LOCK", "PostgresDatabase"]

#: The advisory lock that orders id assignment by commit (D9): b"petstore" read as
#: a big-endian int64, written out in the statements below.
ID_ORDER_LOCK = 8099007544119226981


def _as_is(value: datetime) -> datetime:
    return value


_PET = select_list(Pet)

#: PostgreSQL's SQL (psycopg's named ``%(name)s`` parameters). ``pets.insert`` takes
#: the id order lock before its id is drawn, alone or in a transaction: the
#: uncorrelated subquery is an InitPlan, run by the one-time filter of the node that
#: draws the id (the column's ``nextval``) before that node yields its row; the filter
#: is always true and is there for its side effect (not ``EXISTS``, whose select list
#: PostgreSQL drops unevaluated). Pinned by ``tests/server/store/test_store_postgres.py::
#: test_a_create_draws_its_id_only_once_it_holds_the_id_order_lock``.
DIALECT = Dialect(
    pets=PetStatements(
        insert=(
            f"INSERT INTO pets ({column_list(NewPet)}) "
            f"SELECT {parameter_list(NewPet, 'pyformat')} "
            "WHERE (SELECT pg_advisory_xact_lock(8099007544119226981) IS NULL) IS NOT NULL "
            f"RETURNING {_PET}"
        ),
        # Each NewPet's id is drawn (after the lock, as above) beside its place in the
        # array; the rows inserted are joined back to it by that id.
        insert_many=(
            "WITH new_pet AS MATERIALIZED ("
            "SELECT nextval((SELECT pg_get_serial_sequence('pets', 'id'))::regclass) AS id, "
            f"batch.ordinality - 1 AS ordinal, {column_list(NewPet, 'batch.')} "
            "FROM json_populate_recordset(NULL::pets, %(new_pets)s::json) "
            "WITH ORDINALITY AS batch "
            "WHERE (SELECT pg_advisory_xact_lock(8099007544119226981) IS NULL) IS NOT NULL), "
            f"stored AS (INSERT INTO pets (id, {column_list(NewPet)}) "
            f"SELECT id, {column_list(NewPet)} FROM new_pet RETURNING {_PET}) "
            "SELECT stored.*, new_pet.ordinal FROM stored JOIN new_pet USING (id)"
        ),
        insert_many_first=None,
        list_page=(f"SELECT {_PET} FROM pets WHERE id > %(after_id)s ORDER BY id LIMIT %(limit)s"),
        list_page_of_status=(
            f"SELECT {_PET} FROM pets WHERE status = %(status)s AND id > %(after_id)s "
            "ORDER BY id LIMIT %(limit)s"
        ),
        get=f"SELECT {_PET} FROM pets WHERE id = %(id)s",
        get_many=(
            f"SELECT {_PET} FROM pets "
            "WHERE id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))"
        ),
        # Migration 0004's count of changes to animals (a trigger adds one in the
        # transaction of each UPDATE, DELETE or TRUNCATE of pets), the table's identity
        # (a restore that recreates it) and the server's start (a restore, a failover).
        version=(
            "SELECT changes, 'pets'::regclass::oid AS pets_table, "
            "pg_postmaster_start_time() AS started FROM pet_changes"
        ),
    ),
    api_keys=ApiKeyStatements(
        insert=(
            "INSERT INTO api_keys (name, prefix, key_hash, created_at, expires_at, scopes, "
            "rate_limit) VALUES (%(name)s, %(prefix)s, %(key_hash)s, %(created_at)s, "
            f"%(expires_at)s, %(scopes)s, %(rate_limit)s) RETURNING {select_list(ApiKey)}"
        ),
        list_all=f"SELECT {select_list(ApiKey)} FROM api_keys ORDER BY id",
        revoke=(
            "UPDATE api_keys SET revoked_at = %(revoked_at)s "
            "WHERE id = %(id)s AND revoked_at IS NULL RETURNING id"
        ),
        find=f"SELECT {select_list(ApiKeyRecord)} FROM api_keys WHERE prefix = %(prefix)s",
        count_active=(
            "SELECT count(*) AS active FROM api_keys "
            "WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > %(now)s)"
        ),
    ),
    idempotency_records=IdempotencyStatements(
        delete_expired=(
            "DELETE FROM idempotency_records "
            "WHERE api_key_id = %(api_key_id)s AND idempotency_key = %(key)s "
            "AND created_at < %(expired_before)s"
        ),
        insert=(
            "INSERT INTO idempotency_records (api_key_id, idempotency_key, fingerprint, pet_id, "
            "response, created_at) VALUES (%(api_key_id)s, %(key)s, %(fingerprint)s, "
            "%(pet_id)s, %(response)s, %(created_at)s) ON CONFLICT DO NOTHING RETURNING pet_id"
        ),
        select=(
            f"SELECT {RECORD_COLUMNS} FROM idempotency_records "
            "WHERE api_key_id = %(api_key_id)s AND idempotency_key = %(key)s"
        ),
        find=(
            f"SELECT {RECORD_COLUMNS} FROM idempotency_records "
            "WHERE api_key_id = %(api_key_id)s AND idempotency_key = %(key)s "
            "AND created_at > %(created_after)s"
        ),
        purge=("DELETE FROM idempotency_records WHERE created_at < %(created_before)s RETURNING 1"),
    ),
    schema_exists="SELECT to_regclass('alembic_version') IS NOT NULL AS present",
    schema_revision="SELECT version_num FROM alembic_version",
    to_db=_as_is,
)
