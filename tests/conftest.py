"""Fixtures: a fresh app on a temporary SQLite file per test, a client that checks
every response against the OpenAPI document, API keys, a clock, the CLI runner."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from petstore import db, docs, keys
from petstore.app import create_app
from petstore.config import Settings
from petstore.store import open_store
from tests.conformance import Conformance

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
    import os

    for name in list(os.environ):
        if name.startswith("PETSTORE_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per run; each test gets a copy."""
    path = tmp_path_factory.mktemp("template") / "petstore.db"
    db.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def database_url(tmp_path: Path, migrated_template: Path) -> str:
    """A fresh, migrated SQLite database for this test."""
    path = tmp_path / "petstore.db"
    shutil.copyfile(migrated_template, path)
    return f"sqlite:///{path}"


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

    def make(name: str = "test", expires_at: datetime | None = None) -> str:
        async def create() -> str:
            store = await open_store(database_url)
            try:
                _, key = await keys.create(store, name=name, now=clock(), expires_at=expires_at)
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
