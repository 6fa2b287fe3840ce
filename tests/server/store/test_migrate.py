"""The migration runner: a database already at a newer release's revision is left as
it is when that is fine (a rolling deploy: ``petstore serve`` migrates with
``newer_is_fine``), and refused otherwise; decided by the revision, not by the text
of Alembic's error (issue 25)."""

from __future__ import annotations

import pytest
from alembic.util import CommandError

from petstore.server.store import migrate
from tests.conftest import run_sql


@pytest.mark.own_database
def test_a_newer_schema_is_left_as_it_is_when_that_is_fine(database_url: str) -> None:
    run_sql(database_url, "UPDATE alembic_version SET version_num = '9999'")
    migrate.upgrade(database_url, newer_is_fine=True)
    assert run_sql(database_url, "SELECT version_num FROM alembic_version") == [
        {"version_num": "9999"}
    ]


@pytest.mark.own_database
def test_a_newer_schema_is_refused_otherwise(database_url: str) -> None:
    run_sql(database_url, "UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(CommandError):
        migrate.upgrade(database_url)
