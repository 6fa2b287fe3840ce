"""Alembic environment: runs the migrations online against ``sqlalchemy.url``; on
PostgreSQL the connection is psycopg's, opened with the service's own libpq URL
(``petstore.libpq_url``) and keepalives, so multi-host URLs work as they do for the
service (``migrate.engine_for``)."""

from __future__ import annotations

from alembic import context

from petstore.server.store.migrate import engine_for

config = context.config
engine = engine_for(
    config.get_main_option("sqlalchemy.url") or "",
    libpq_url=config.get_main_option("petstore.libpq_url"),
)
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
