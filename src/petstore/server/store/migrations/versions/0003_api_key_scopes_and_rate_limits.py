"""API key scopes (D21) and per-key rate limits (D22).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25

Safe during a rolling deploy (expand only): both columns are added with values that
keep every existing key as it was: ``scopes`` defaults to both scopes, so keys made
before, and keys the previous release still makes while it serves beside this one,
can list and create; ``rate_limit`` is NULL, the service-wide
``PETSTORE_RATE_LIMIT``. The previous release ignores both columns.

The downgrade drops the columns with ``ALTER TABLE ... DROP COLUMN`` on both
databases (SQLite has it since 3.35; the store needs 3.38 for ``->>``), never with
Alembic's batch mode: on SQLite that copies the table into a new one made from what
it reflects, which lacks ``AUTOINCREMENT`` (migration 0001's: ids never reused) and any trigger
on the table (migration 0005's on ``pets``), both lost without a word.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "api_keys",
        sa.Column("scopes", sa.Text(), nullable=False, server_default="pets:read pets:write"),
    )
    op.add_column("api_keys", sa.Column("rate_limit", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("api_keys", "rate_limit")
    op.drop_column("api_keys", "scopes")
