"""Alembic environment: runs the migrations online against ``sqlalchemy.url``; on
PostgreSQL the connection is psycopg's, opened with the service's own libpq URL
(``petstore.libpq_url``), so multi-host URLs work as they do for the service."""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import create_engine, pool

config = context.config
options: dict[str, Any] = {"poolclass": pool.NullPool}
if (libpq_url := config.get_main_option("petstore.libpq_url")) is not None:
    import psycopg

    options["creator"] = lambda: psycopg.connect(libpq_url)
engine = create_engine(config.get_main_option("sqlalchemy.url") or "", **options)
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
