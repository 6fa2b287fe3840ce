"""A count of the changes made to animals outside the API (PostgreSQL only).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26

The API only ever inserts animals; an ``UPDATE``, ``DELETE`` or ``TRUNCATE`` of
``pets`` is an operator's (or a restore's). A statement-level trigger adds one to
``pet_changes.changes`` in the transaction of each such statement, so the count
commits with the change it counts. Every PostgreSQL instance holds the animals it
has read in memory and reads this count each second: when it moved, the instance
drops them all (``store.kept_pets``; docs/operations/run.md, "What an instance
keeps in memory"). The trigger is ``ENABLE ALWAYS``: it also fires in sessions with
``session_replication_role = replica`` (logical replication's apply). Only disabling
it by name (``ALTER TABLE pets DISABLE TRIGGER``, ``pg_restore --disable-triggers``)
stops it.

SQLite: nothing. One process reads the file and keeps no animal in memory.

Safe during a rolling deploy (expand only): the previous release never reads the
table and never updates or deletes an animal, so the trigger never fires for it.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(
        "CREATE TABLE pet_changes ("
        "only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), "
        "changes bigint NOT NULL)"
    )
    op.execute("INSERT INTO pet_changes (changes) VALUES (0)")
    op.execute(
        "CREATE FUNCTION count_pet_change() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN UPDATE pet_changes SET changes = changes + 1; RETURN NULL; END $$"
    )
    op.execute(
        "CREATE TRIGGER pets_changed AFTER UPDATE OR DELETE OR TRUNCATE ON pets "
        "FOR EACH STATEMENT EXECUTE FUNCTION count_pet_change()"
    )
    op.execute("ALTER TABLE pets ENABLE ALWAYS TRIGGER pets_changed")


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER pets_changed ON pets")
    op.execute("DROP FUNCTION count_pet_change()")
    op.execute("DROP TABLE pet_changes")
