"""Every migration applied and undone, one step at a time, on each database: up to the
newest, down to nothing, up again. After each step the schema (tables, columns,
constraints, indexes, triggers, functions, sequences; SQLite's ``AUTOINCREMENT``) is
the one a fresh database has at that revision, and where the change signal exists
(``pet_changes``: migration 0004 on PostgreSQL, 0005 on SQLite) an ``UPDATE`` and a
``DELETE`` of ``pets`` move it, as every instance's cache expects
(``store.changes``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command

from petstore.server.store import migrate
from tests.conftest import postgres_database, run_sql

#: What the schema is made of, each a query of rows compared as they come, in the
#: order given. Column positions are not compared on PostgreSQL: a column dropped and
#: added again takes a new ``attnum`` while the table reads the same.
_POSTGRES_SCHEMA = {
    "columns": "SELECT table_name, column_name, data_type, is_nullable, column_default, "
    "is_identity, identity_generation FROM information_schema.columns "
    "WHERE table_schema = 'public' AND table_name <> 'alembic_version' "
    "ORDER BY table_name, ordinal_position",
    "constraints": "SELECT conrelid::regclass::text AS on_table, conname, "
    "pg_get_constraintdef(oid) AS definition FROM pg_constraint "
    "WHERE connamespace = 'public'::regnamespace AND conrelid <> 'alembic_version'::regclass "
    "ORDER BY 1, 2",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes "
    "WHERE schemaname = 'public' AND tablename <> 'alembic_version' ORDER BY 1, 2",
    "triggers": "SELECT tgrelid::regclass::text AS on_table, tgname, tgenabled, "
    "pg_get_triggerdef(oid) AS definition FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1, 2",
    "functions": "SELECT proname, pg_get_functiondef(oid) AS definition FROM pg_proc "
    "WHERE pronamespace = 'public'::regnamespace ORDER BY 1",
    "sequences": "SELECT sequencename, data_type, start_value, increment_by, max_value "
    "FROM pg_sequences WHERE schemaname = 'public' ORDER BY 1",
}
#: SQLite keeps each table, index and trigger as the statement that made it; white
#: space aside, that text is the schema (``AUTOINCREMENT`` included). SQLite's own
#: ``sqlite_sequence`` stays once made, as it does when the tables are dropped by hand.
_SQLITE_SCHEMA = (
    "SELECT type, name, tbl_name, sql FROM sqlite_master "
    "WHERE tbl_name NOT IN ('alembic_version', 'sqlite_sequence') ORDER BY type, name"
)


@contextmanager
def _empty_database(backend: str, tmp_path: Path) -> Iterator[str]:
    """The URL of a database with no schema at all, of ``backend``."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'migrated.db'}"
    else:
        with postgres_database() as url:
            yield url


def _schema(url: str) -> dict[str, list[dict[str, Any]]]:
    """What the database at ``url`` is made of, besides Alembic's own table."""
    if url.startswith("sqlite"):
        rows = run_sql(url, _SQLITE_SCHEMA)
        return {"objects": [{**row, "sql": " ".join((row["sql"] or "").split())} for row in rows]}
    return {part: run_sql(url, query) for part, query in _POSTGRES_SCHEMA.items()}


def _has_change_signal(url: str) -> bool:
    if url.startswith("sqlite"):
        found = run_sql(url, "SELECT name FROM sqlite_master WHERE name = 'pet_changes'")
    else:
        found = run_sql(url, "SELECT to_regclass('pet_changes') AS name")
    return bool(found and found[0]["name"])


def _changes(url: str) -> int:
    return int(run_sql(url, "SELECT changes FROM pet_changes")[0]["changes"])


def _assert_the_change_signal_moves(url: str) -> None:
    """An animal added does not move the count; changed, and removed, it does."""
    before = _changes(url)
    run_sql(url, "INSERT INTO pets (name, category_id, status) VALUES ('Rex', 1, 'available')")
    assert _changes(url) == before
    run_sql(url, "UPDATE pets SET status = 'sold' WHERE name = 'Rex'")
    updated = _changes(url)
    assert updated > before
    run_sql(url, "DELETE FROM pets WHERE name = 'Rex'")
    assert _changes(url) > updated


def _step(url: str, revision: str) -> None:
    """Move the database at ``url`` one migration, up or down, to ``revision``."""
    config = migrate._alembic_config(url)
    current = run_sql(url, "SELECT version_num FROM alembic_version")
    order = ["base", *migrate.revisions()]
    at = order.index(current[0]["version_num"]) if current else 0
    target = order.index(revision)
    assert abs(target - at) == 1, (current, revision)
    if target > at:
        command.upgrade(config, revision)
    else:
        command.downgrade(config, revision)


def test_every_migration_undone_and_redone_leaves_the_schema_of_a_fresh_upgrade(
    backend: str, tmp_path: Path
) -> None:
    revisions = list(migrate.revisions())
    with _empty_database(backend, tmp_path) as url:
        fresh: dict[str, dict[str, list[dict[str, Any]]]] = {}
        migrate.upgrade(url, to=revisions[0])
        fresh[revisions[0]] = _schema(url)
        for revision in revisions[1:]:
            _step(url, revision)
            fresh[revision] = _schema(url)
        assert _has_change_signal(url), "the newest schema has no change signal"
        fresh["base"] = {part: [] for part in fresh[revisions[0]]}
        walk = [*reversed(["base", *revisions[:-1]]), *revisions]
        for revision in walk:
            _step(url, revision)
            assert _schema(url) == fresh[revision], f"at {revision} after a step"
            if _has_change_signal(url):
                _assert_the_change_signal_moves(url)
        if backend == "sqlite":
            path = url.removeprefix("sqlite:///")
            with sqlite3.connect(path) as connection:
                assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
