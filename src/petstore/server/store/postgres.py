"""The PostgreSQL store: its SQL (psycopg's ``%s`` placeholders, ``timestamptz``),
over the driver of :mod:`.postgres_pool`.

A sequence hands out ids when rows are inserted, not when they commit, so without
care id 5 could commit after id 6, and a client paging with ``id > last_id`` would
already be past it (D9: none skipped). Every statement or transaction that inserts
animals first takes the transaction-scoped advisory lock :data:`ID_ORDER_LOCK`,
before it draws an id, and the commit releases it: insert transactions are
serialised across every instance sharing the database, so ids become visible in
ascending order. This holds for inserts made through the service with the
identity's default ``CACHE 1``; rows inserted by other means skip the lock.
"""

from __future__ import annotations

from typing import Any

from petstore.server.store.driver import Statements
from petstore.server.store.postgres_pool import PostgresDatabase
from petstore.server.store.queries import SQLStore

#: The advisory lock that orders id assignment by commit (D9): b"petstore" read as
#: a big-endian int64, written out in the statements below.
ID_ORDER_LOCK = 8099007544119226981


def _as_is(value: Any) -> Any:
    return value


#: PostgreSQL's SQL. ``insert_pets`` is one autocommit statement that takes the id
#: order lock before any id is drawn: the uncorrelated subquery is an InitPlan, run
#: by the one-time filter of the node that draws the ids (its ``nextval``) before
#: that node yields its first row; the filter is always true and is there for its
#: side effect (not ``EXISTS``, whose select list PostgreSQL drops unevaluated).
#: Pinned by ``tests/test_store_postgres.py::
#: test_a_create_draws_its_id_only_once_it_holds_the_id_order_lock``.
STATEMENTS = Statements(
    insert_pets=(
        "INSERT INTO pets (name, category_id, status) "
        'SELECT name, "categoryId", status FROM json_to_recordset(%s::json) '
        'AS new_pet(name text, "categoryId" bigint, status text) '
        "WHERE (SELECT pg_advisory_xact_lock(8099007544119226981) IS NULL) IS NOT NULL "
        "RETURNING id, name, category_id, status"
    ),
    insert_pet="INSERT INTO pets (name, category_id, status) VALUES (%s, %s, %s) RETURNING id",
    lock_id_order="SELECT pg_advisory_xact_lock(8099007544119226981)",
    list_pets="SELECT id, name, category_id, status FROM pets WHERE id > %s ORDER BY id LIMIT %s",
    list_pets_of_status=(
        "SELECT id, name, category_id, status FROM pets WHERE status = %s AND id > %s ORDER "
        "BY id LIMIT %s"
    ),
    get_pet="SELECT id, name, category_id, status FROM pets WHERE id = %s",
    get_pets=(
        "SELECT id, name, category_id, status FROM pets "
        "WHERE id IN (SELECT value::bigint FROM json_array_elements_text(%s::json))"
    ),
    # Migration 0004's count of changes made outside the API (a trigger adds one in
    # the transaction of each UPDATE, DELETE or TRUNCATE of pets), the table's identity
    # (a restore that recreates it) and the server's start (a restore, a failover).
    pets_version=(
        "SELECT changes, 'pets'::regclass::oid, pg_postmaster_start_time() FROM pet_changes"
    ),
    delete_expired_claim=(
        "DELETE FROM idempotency_records "
        "WHERE api_key_id = %s AND idempotency_key = %s AND created_at < %s"
    ),
    insert_claim=(
        "INSERT INTO idempotency_records (api_key_id, idempotency_key, fingerprint, pet_id, "
        "response, created_at) "
        "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING pet_id"
    ),
    select_claim=(
        "SELECT api_key_id, idempotency_key, fingerprint, pet_id, response, created_at FROM "
        "idempotency_records "
        "WHERE api_key_id = %s AND idempotency_key = %s"
    ),
    find_idempotency_record=(
        "SELECT api_key_id, idempotency_key, fingerprint, pet_id, response, created_at FROM "
        "idempotency_records "
        "WHERE api_key_id = %s AND idempotency_key = %s AND created_at > %s"
    ),
    purge_idempotency_records="DELETE FROM idempotency_records WHERE created_at < %s RETURNING 1",
    insert_api_key=(
        "INSERT INTO api_keys (name, prefix, key_hash, created_at, expires_at, scopes, "
        "rate_limit) VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id, name, prefix, "
        "created_at, expires_at, revoked_at, scopes, rate_limit"
    ),
    list_api_keys=(
        "SELECT id, name, prefix, created_at, expires_at, revoked_at, scopes, rate_limit FROM "
        "api_keys ORDER BY id"
    ),
    revoke_api_key=(
        "UPDATE api_keys SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL RETURNING id"
    ),
    find_api_keys=(
        "SELECT id, key_hash, expires_at, revoked_at, scopes, rate_limit "
        "FROM api_keys WHERE prefix = %s"
    ),
    count_active_api_keys=(
        "SELECT count(*) FROM api_keys "
        "WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > %s)"
    ),
    schema_exists="SELECT to_regclass('alembic_version') IS NOT NULL",
    schema_revision="SELECT version_num FROM alembic_version",
    to_db=_as_is,
    from_db=_as_is,
)


class PostgresStore(SQLStore):
    """:class:`petstore.server.store.Store` over the PostgreSQL database at the
    ``postgresql://`` ``url`` (created by the migrations), with 1 to ``pool_size``
    connections; ``timeout`` (seconds) bounds every wait for the database, on the
    client too (D25). Constructing it does no I/O; :meth:`open` connects."""

    def __init__(self, url: str, *, pool_size: int = 10, timeout: float = 5.0) -> None:
        super().__init__(
            PostgresDatabase(url, statements=STATEMENTS, size=pool_size, timeout=timeout)
        )
