"""Fixtures: a fresh app on a temporary SQLite file per test, a client that checks
every response against the OpenAPI document, API keys, a clock, the CLI runner."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import signal
import sqlite3
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from petstore.server.app import create_app
from petstore.server.config import Settings
from petstore.server.http import docs
from petstore.server.http.pipeline import Service
from petstore.server.rules import keys
from petstore.server.store import migrate, open_store
from tests import servers
from tests.conformance import Conformance
from tests.servers import LiveServer

#: What a store's create_api_key is given for a key as ``keys create`` makes it by
#: default: both scopes (D21), the service's rate limit (D22).
ALL_SCOPES_DEFAULT_LIMIT: dict[str, Any] = {"scopes": keys.SCOPES, "rate_limit": None}

#: A fixed "now" before getPet's sunset, so tests do not depend on the wall clock.
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


class FakeClock:
    """An injectable clock (D14): call it for now, move it with ``advance``/``set``."""

    def __init__(self, now: datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)

    def set(self, now: datetime) -> None:
        self.now = now


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No PETSTORE_* variable of the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith("PETSTORE_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per run; each test gets a copy."""
    path = tmp_path_factory.mktemp("template") / "petstore.db"
    migrate.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """Every test that uses a database runs once on each backend (issue: scale out)."""
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def postgres_run_database() -> Iterator[str]:
    """This test run's own PostgreSQL database: created, migrated, dropped at the end."""
    with postgres_database() as url:
        migrate.upgrade(url)
        yield url


@pytest.fixture
def database_url(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, migrated_template: Path
) -> Iterator[str]:
    """A migrated database with no rows, for this test alone.

    SQLite: a copy of the migrated template. PostgreSQL: the run's database emptied
    (ids restart), or, for tests marked ``own_database`` that damage the schema, a
    database of their own.
    """
    if backend == "sqlite":
        path = tmp_path / "petstore.db"
        shutil.copyfile(migrated_template, path)
        yield f"sqlite:///{path}"
    elif request.node.get_closest_marker("own_database"):
        with postgres_database() as url:
            migrate.upgrade(url)
            yield url
    else:
        url = request.getfixturevalue("postgres_run_database")
        run_sql(url, "TRUNCATE pets, api_keys, idempotency_records RESTART IDENTITY")
        yield url


def run_sql(database_url: str, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Run one statement straight on the test database (either backend), committed;
    ``?`` placeholders. Returns the rows as dicts (empty for statements without)."""
    if database_url.startswith("sqlite"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        conn.row_factory = sqlite3.Row
        try:
            with conn:
                return [dict(row) for row in conn.execute(sql, tuple(params))]
        finally:
            conn.close()
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as pg:
        cursor = pg.execute(sql.replace("?", "%s"), tuple(params))  # type: ignore[arg-type]
        return list(cursor.fetchall()) if cursor.description else []


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def conformance(settings: Settings) -> Conformance:
    return Conformance(docs.openapi_document(settings))


@pytest.fixture
def client(settings: Settings, clock: FakeClock, conformance: Conformance) -> Iterator[TestClient]:
    """The real app over ASGI; every response is checked against the OpenAPI document."""
    app = create_app(settings, clock=clock)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        test_client.event_hooks["response"] = [conformance.check]
        yield test_client


@pytest.fixture
def make_key(database_url: str, clock: FakeClock) -> Callable[..., str]:
    """Create an API key in the test database the way the CLI does; returns the key."""

    def make(
        name: str = "test",
        expires_at: datetime | None = None,
        *,
        scopes: Sequence[str] = keys.SCOPES,
        rate_limit: str | None = None,
    ) -> str:
        async def create() -> str:
            store = await open_store(database_url)
            try:
                _, key = await keys.create(
                    store.api_keys,
                    name=name,
                    now=clock(),
                    expires_at=expires_at,
                    scopes=scopes,
                    rate_limit=rate_limit,
                )
            finally:
                await store.close()
            return key

        return asyncio.run(create())

    return make


@pytest.fixture
def api_key(make_key: Callable[..., str]) -> str:
    return make_key()


@pytest.fixture
def auth(api_key: str) -> dict[str, str]:
    """Headers that authenticate as a valid key."""
    return {"Authorization": f"Bearer {api_key}"}


@pytest.fixture
def runner(database_url: str) -> CliRunner:
    """The CLI runner, pointed at this test's database."""
    return CliRunner(env={"PETSTORE_DATABASE_URL": database_url})


def lifespan(app: Service) -> AbstractAsyncContextManager[None]:
    """The lifespan of an app from ``create_app`` (for tests that drive the app over
    httpx's ASGI transport, which does not run it)."""
    return app.lifespan()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real server per test module, on its own SQLite file, with its dev key."""
    server = LiveServer(tmp_path_factory.mktemp("live"))
    server.start()
    yield server
    server.stop()


#: The throwaway servers of this run, stopped by pytest_sessionfinish.
_RUN_SERVERS = ExitStack()


@functools.cache
def postgres_admin_url() -> str:
    """The PostgreSQL server the tests create their databases on (trust auth,
    loopback): ``PETSTORE_TEST_POSTGRES_URL``, else this run's own, started on first
    use (tests/servers.py)."""
    return os.environ.get("PETSTORE_TEST_POSTGRES_URL") or _RUN_SERVERS.enter_context(
        servers.postgres_server()
    )


@functools.cache
def redis_url() -> str:
    """The Redis server of the rate-limit tests: ``PETSTORE_TEST_REDIS_URL``, else this
    run's own, started on first use (tests/servers.py)."""
    return os.environ.get("PETSTORE_TEST_REDIS_URL") or _RUN_SERVERS.enter_context(
        servers.redis_server()
    )


#: The folders of tests that start server processes, whatever their fixtures.
SERVER_FOLDERS = ("client", "serve", "deployment", "testbed")
#: Tests that use the test hosts (network namespaces of a fixed prefix) or HAProxy on
#: loopback: on several workers (``make test``: pytest-xdist) they run one after
#: another, on one of them.
SHARED_HOSTS = (
    "testbed/test_chaos.py",
    "testbed/test_chaos_network.py",
    "deployment/test_backup_restore.py",
    "deployment/test_haproxy.py",
)


def pytest_collection_finish(session: pytest.Session) -> None:
    """On a pytest-xdist worker of ``--dist loadgroup``, raise pytest.UsageError when
    the tests of :data:`SHARED_HOSTS` lost their group (their node ids carry
    ``@hosts``; pytest-dev/pytest-xdist#1386): two of them at once would fail each
    other, one test host or HAProxy port at a time."""
    if "PYTEST_XDIST_WORKER" not in os.environ or not session.config.getvalue("loadgroup"):
        return
    here = Path(__file__).parent
    lost = [
        item.nodeid
        for item in session.items
        if Path(str(item.path)).relative_to(here).as_posix() in SHARED_HOSTS
        and not item.nodeid.endswith("@hosts")
    ]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist did not group {lost[0]} with the other tests of the test "
            "hosts (pytest-dev/pytest-xdist#1386): install the pytest pyproject.toml names"
        )


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--in-process`` (``make check``): only the tests that need no server process."""
    parser.addoption(
        "--in-process",
        action="store_true",
        help="only the tests that start no server process (petstore serve, PostgreSQL, "
        "Redis, HAProxy, a browser, a container), on SQLite",
    )


def pytest_configure(config: pytest.Config) -> None:
    """A run stopped with SIGTERM (a CI timeout, ``kill``) ends as one stopped with
    Ctrl-C does: fixtures torn down, this run's servers and ``petstore serve``
    processes stopped. With ``--in-process``, starting a server process fails the
    test that does it (tests/servers.py)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    if config.getoption("--in-process"):
        os.environ[servers.IN_PROCESS_ONLY] = "1"


def needs_servers(item: pytest.Item) -> bool:
    """Whether ``item`` starts a server process: marked ``servers`` or ``slow``, in a
    folder of :data:`SERVER_FOLDERS`, on PostgreSQL, or using a fixture named
    ``...server`` (a ``petstore serve`` of the test's)."""
    folder = Path(str(item.path)).relative_to(Path(__file__).parent).parts[0]
    callspec = getattr(item, "callspec", None)
    return (
        item.get_closest_marker("servers") is not None
        or item.get_closest_marker("slow") is not None
        or folder in SERVER_FOLDERS
        or (callspec is not None and callspec.params.get("backend") == "postgres")
        or any(name.endswith("server") for name in getattr(item, "fixturenames", ()))
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the tests of :data:`SHARED_HOSTS` in one xdist group (before pytest-xdist's
    own hook reads the groups); with ``--in-process``, leave out every test that
    :func:`needs_servers`."""
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.path)).relative_to(here).as_posix() in SHARED_HOSTS:
            item.add_marker(pytest.mark.xdist_group("hosts"))
    if not config.getoption("--in-process"):
        return
    kept = [item for item in items if not needs_servers(item)]
    config.hook.pytest_deselected(items=[item for item in items if needs_servers(item)])
    items[:] = kept


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop and delete this run's servers, also after an interrupted run."""
    _RUN_SERVERS.close()


@contextmanager
def postgres_database() -> Iterator[str]:
    """A freshly created, empty PostgreSQL database, dropped afterwards; yields its URL."""
    import psycopg

    name = f"petstore_test_{uuid.uuid4().hex[:16]}"
    admin_url = postgres_admin_url()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def insert_corrupt_pet(database_url: str, pet_id: int = 5) -> None:
    """A row the service could never write (status 'lost'): a real fault to read back.
    On PostgreSQL this drops the status constraint: mark the test ``own_database``."""
    if database_url.startswith("sqlite"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            with conn:
                conn.execute("PRAGMA ignore_check_constraints = ON")
                conn.execute(
                    "INSERT INTO pets (id, name, category_id, status) "
                    "VALUES (?, 'Ghost', 1, 'lost')",
                    (pet_id,),
                )
        finally:
            conn.close()
        return
    run_sql(database_url, "ALTER TABLE pets DROP CONSTRAINT ck_pets_status_known")
    run_sql(
        database_url,
        "INSERT INTO pets (id, name, category_id, status) OVERRIDING SYSTEM VALUE "
        "VALUES (?, 'Ghost', 1, 'lost')",
        (pet_id,),
    )


def all_pets(base_url: str, key: str) -> list[dict[str, Any]]:
    """Every animal of the server at ``base_url``, following ``Link: rel="next"`` (D9)."""
    pets: list[dict[str, Any]] = []
    url: str | None = f"{base_url}/v1/pets?limit=100"
    with httpx2.Client(headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        while url:
            response = client.get(url)
            assert response.status_code == 200, response.text
            pets += response.json()
            link = response.headers.get("link")
            url = link[1 : link.index(">")] if link else None
    return pets


def create_concurrently(base_urls: Sequence[str], key: str, *, batches: int) -> list[int]:
    """Create ``50 * batches`` animals, 50 at a time, spread over ``base_urls`` in turn;
    asserts every answer is 201 and returns the ids in order of creation."""

    async def create_all() -> list[int]:
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as client:
            ids: list[int] = []
            for batch in range(batches):
                responses = await asyncio.gather(
                    *(
                        client.post(
                            f"{base_urls[i % len(base_urls)]}/v1/pets",
                            json={"name": f"pet-{batch}-{i}", "categoryId": 1 + i},
                        )
                        for i in range(50)
                    )
                )
                assert [r.status_code for r in responses] == [201] * 50
                ids += [r.json()["id"] for r in responses]
            return ids

    return asyncio.run(create_all())
