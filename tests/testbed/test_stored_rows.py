"""The test bed reads stored animals whole: the query each data node's final state
(testbed/final_state.py) and a restore's result (testbed/restore.py) are read with
selects every member of Pet, and each row reads back as a Pet, on a real PostgreSQL
migrated to this release's schema."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest

from petstore.schemas import NewPet, Pet
from petstore.server.store import migrate
from testbed import final_state
from tests.conftest import postgres_database, run_sql
from tests.members import wire_values


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with postgres_database() as url:
        migrate.upgrade(url)
        yield url


def test_a_nodes_animals_are_read_with_every_member_of_pet(postgres_url: str) -> None:
    fields = msgspec.structs.fields(NewPet)
    values = msgspec.to_builtins(wire_values(NewPet))
    columns = ", ".join(field.name for field in fields)
    run_sql(
        postgres_url,
        f"INSERT INTO pets ({columns}) VALUES ({', '.join('?' for _ in fields)})",  # noqa: S608
        [values[field.encode_name] for field in fields],
    )
    (row,) = run_sql(postgres_url, "SELECT id FROM pets")
    expected = msgspec.convert({**values, "id": row["id"]}, Pet)
    assert final_state._rows(postgres_url) == [expected]
