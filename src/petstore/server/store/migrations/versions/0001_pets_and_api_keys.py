"""Pets and API keys.

Revision ID: 0001
Revises:
Create Date: 2026-11-21

Portable types only (BIGINT, TEXT, TIMESTAMP WITH TIME ZONE) so the same schema
holds on SQLite and on PostgreSQL and its compatible engines. Constraint and index
names are explicit so later migrations can refer to them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# SQLite only gives AUTOINCREMENT (ids never reused, D5) to an INTEGER PRIMARY KEY.
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "pets",
        sa.Column("id", _ID, sa.Identity(always=False), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("category_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_pets"),
        sa.CheckConstraint("category_id >= 1", name="ck_pets_category_id_positive"),
        sa.CheckConstraint(
            "status IN ('available', 'pending', 'sold')", name="ck_pets_status_known"
        ),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_pets_status_id", "pets", ["status", "id"])

    op.create_table(
        "api_keys",
        sa.Column("id", _ID, sa.Identity(always=False), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("prefix", sa.Text(), nullable=False),
        sa.Column("key_hash", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.UniqueConstraint("key_hash", name="uq_api_keys_key_hash"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_api_keys_prefix", "api_keys", ["prefix"])


def downgrade() -> None:
    op.drop_index("ix_api_keys_prefix", table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_index("ix_pets_status_id", table_name="pets")
    op.drop_table("pets")
