"""D27 in the store: a PostgreSQL primary that has synchronous standbys set but
streams to none answers no read and no write, and the instance's next connections
go to the URL's other hosts first.

That is what a primary cut off from the pg_auto_failover monitor and its
secondaries looks like from an instance that still reaches it: the monitor promotes
a secondary 5 s later, and the old primary's answers are stale from then on
(docs/reliability.md). Here the old primary is a server of the test's own whose
``synchronous_standby_names`` names a standby that never connects, listed first in
a multi-host URL before the suite's database, which stands for the promoted one."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import psycopg
import pytest
from starlette.testclient import TestClient

from petstore.server.app import create_app
from petstore.server.config import Settings
from petstore.server.store import migrate
from petstore.server.store.postgres_connections import SERVES_FOR, host_last
from tests.conftest import FakeClock, run_sql
from tests.servers import postgres_server


@pytest.fixture(scope="module")
def backend() -> str:
    """Synchronous standbys are PostgreSQL's."""
    return "postgres"


@pytest.fixture
def old_primary(database_url: str) -> Iterator[str]:
    """A migrated database named as ``database_url``'s on a PostgreSQL server of this
    test's own (its settings are changed)."""
    name = urlsplit(database_url).path.lstrip("/")
    with postgres_server() as server:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        url = server.rsplit("/", 1)[0] + f"/{name}"
        migrate.upgrade(url)
        yield url


def hosts_of(*urls: str) -> str:
    """One multi-host URL over the databases ``urls`` (same user and database name):
    the first that accepts writes wins."""
    parts = [urlsplit(url) for url in urls]
    hosts = ",".join(part.netloc.split("@", 1)[1] for part in parts)
    return f"postgresql://postgres@{hosts}{parts[0].path}?target_session_attrs=read-write"


def test_a_primary_streaming_to_no_standby_is_refused_and_the_next_host_serves(
    old_primary: str, database_url: str, clock: FakeClock, make_key: Callable[..., str]
) -> None:
    key = make_key()
    # The same key on both servers: its row copied (the columns are the table's own).
    (row,) = run_sql(database_url, "SELECT * FROM api_keys")
    insert = f"INSERT INTO api_keys ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})"  # noqa: S608
    run_sql(old_primary, insert, tuple(row.values()))
    # The promoted node holds an animal the old primary never had.
    fresh = "INSERT INTO pets (name, category_id, status) VALUES ('Fresh', 1, 'sold')"
    run_sql(database_url, fresh)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    app = create_app(Settings(database_url=hosts_of(old_primary, database_url)), clock=clock)
    with TestClient(app, raise_server_exceptions=False) as client:
        # Both accept writes: the first host serves, the stale answer a cut-off
        # primary would give once a secondary is promoted.
        assert client.get("/v1/pets/1", headers=headers).status_code == 404

        with psycopg.connect(old_primary, autocommit=True) as admin:
            admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'never_connects'")
            admin.execute("SELECT pg_reload_conf()")
        time.sleep(SERVES_FOR + 0.2)

        began = time.monotonic()
        refused = client.post("/v1/pets", content=b'{"name": "Lost", "categoryId": 1}',
                              headers=headers)  # fmt: skip
        assert time.monotonic() - began < 2  # refused at once, not held for the 5 s bound
        assert refused.status_code == 503
        assert refused.json()["code"] == "unavailable"
        assert refused.headers["Retry-After"].isdigit()
        assert run_sql(old_primary, "SELECT count(*) AS n FROM pets") == [{"n": 0}]

        # The next connections try the other host first: the promoted node answers.
        answers = [client.get("/v1/pets/1", headers=headers) for _ in range(3)]
        assert answers[-1].status_code == 200
        assert answers[-1].json()["name"] == "Fresh"
        assert all(a.status_code in (200, 503) for a in answers)


def test_the_refused_host_goes_last_with_its_address_and_port() -> None:
    url = "postgresql://u@a:5001,b:5002,c:5003/db?hostaddr=10.0.0.1,10.0.0.2,10.0.0.3"
    assert host_last(url, ("a", "5001")) == {
        "host": "b,c,a", "hostaddr": "10.0.0.2,10.0.0.3,10.0.0.1", "port": "5002,5003,5001",
    }  # fmt: skip
    assert host_last("postgresql://u@a,b/db", ("a", "5432")) == {"host": "b,a", "port": ","}
    assert host_last("postgresql://u@a,b:6000/db", ("a", "5432"))["host"] == "b,a"
    assert host_last("postgresql://u@a:5001/db", ("a", "5001")) == {}
    assert host_last("postgresql://u@a,b/db", ("c", "5432"))["host"] == "a,b"
