"""A count of the changes made to animals outside the API, on SQLite too.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27

Migration 0004 keeps this count on PostgreSQL. The API only ever inserts animals; an
``UPDATE`` or ``DELETE`` of ``pets`` is an operator's. A trigger adds one to
``pet_changes.changes`` for each row such a statement touches, in the statement's
transaction, so the count commits with the change it counts. Each worker keeps the
animals getPet found while the count stays the same, at most 5 seconds past its last
look (``store.kept_pets``; docs/operations/run.md, "What an instance keeps in memory").

PostgreSQL: nothing (0004 made it there).

Safe to apply with the previous release running: it never reads the table and never
updates or deletes an animal, so the triggers never fire for it.
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    op.execute(
        "CREATE TABLE pet_changes ("
        "only_row INTEGER PRIMARY KEY CHECK (only_row = 1), "
        "changes INTEGER NOT NULL)"
    )
    op.execute("INSERT INTO pet_changes (only_row, changes) VALUES (1, 0)")
    op.execute(
        "CREATE TRIGGER pets_updated AFTER UPDATE ON pets "
        "BEGIN UPDATE pet_changes SET changes = changes + 1; END"
    )
    op.execute(
        "CREATE TRIGGER pets_deleted AFTER DELETE ON pets "
        "BEGIN UPDATE pet_changes SET changes = changes + 1; END"
    )


def downgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    op.execute("DROP TRIGGER pets_updated")
    op.execute("DROP TRIGGER pets_deleted")
    op.execute("DROP TABLE pet_changes")
